"""The advisor panel on Explore: advice for a measured workload/model, and its one-click sweep."""

from __future__ import annotations

from engine import api
from tests._markup import seen


def _advice(at, word: str) -> list[str]:
    """The advisor's words as the reader sees them (wrapping text, not a code block)."""
    return [seen(m.value) for m in at.markdown if word in seen(m.value) and "Advisor" not in m.value]


def test_advisor_panel_advises_and_queues_the_sweep(seeded, open_page, no_problems):
    at = open_page("explore")
    no_problems(at)
    at.selectbox(key="advisor.workload").select("tensor").run()
    advice = _advice(at, "faster") or _advice(at, "best")
    assert advice, [m.value for m in at.markdown]
    assert not [c.value for c in at.code if "faster" in c.value]  # never a code block cut off on the right
    # the seeded runs (sync, threads) leave unmeasured neighbours, so there is a sweep to queue
    [button] = [b for b in at.button if b.key == "advisor.queue"]
    before = len(api.list_jobs())
    button.click().run()
    no_problems(at)
    assert len(api.list_jobs()) > before


def test_your_setup_is_the_baseline_and_its_confirmation_can_be_queued(seeded, open_page, no_problems):
    at = open_page("explore")
    at.selectbox(key="advisor.workload").select("tensor").run()
    at.text_input(key="advisor.baseline").input("loader=processes,workers=2").run()
    no_problems(at)
    [advice] = _advice(at, "on this host") or _advice(at, "on any host")
    assert "your setup (processes, 2 workers, depth 2, batch" in advice and "no stored runs" in advice
    [button] = [b for b in at.button if b.key == "advisor.confirm"]
    before = len(api.list_jobs())
    button.click().run()
    no_problems(at)
    assert len(api.list_jobs()) - before == 2 * api.CONFIRM_REPEATS  # your setup and the best, 7 runs each


def test_a_bad_setup_is_one_error_naming_the_field_and_no_advice(seeded, open_page):
    at = open_page("explore")
    at.text_input(key="advisor.baseline").input("loader=processes,module=evil.mod:fn").run()
    assert [seen(e.value) for e in at.error] == [
        "Your current setup: baseline: 'module' is not a loader setting; use: "
        "loader, workers, prefetch_depth, start_method, persistent_workers, pin_memory, batch_size"
    ]
    assert not _advice(at, "done runs")


def test_the_advice_ends_with_its_code_and_a_memory_cap_is_read(seeded, open_page, no_problems):
    at = open_page("explore")
    at.selectbox(key="advisor.workload").select("tensor").run()
    no_problems(at)
    [code] = [c for c in at.code if c.language == "python" and "the best measured here" in c.value]  # the Advisor's
    assert "loader = " in code.value
    at.text_input(key="advisor.max_memory").input("lots").run()
    assert [seen(e.value) for e in at.error] == [
        "Memory cap: max_memory: 'lots' is not a size; write e.g. 8G, 512M or 1.5G"
    ]
    at.text_input(key="advisor.max_memory").input("2M").run()  # below every run's peak: none can be the answer
    no_problems(at)
    assert _advice(at, "peaked above the 2 MiB memory cap")
