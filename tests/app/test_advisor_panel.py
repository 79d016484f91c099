"""The advisor panel on Explore: advice for a measured workload/model, and its one-click sweep."""

from __future__ import annotations

from engine import api


def test_advisor_panel_advises_and_queues_the_sweep(seeded, open_page, no_problems):
    at = open_page("explore")
    no_problems(at)
    at.selectbox(key="advisor.workload").select("tensor").run()
    at.selectbox(key="advisor.host").select("any").run()
    advice = [c.value for c in at.code if "faster" in c.value or "best" in c.value]
    assert advice, [c.value for c in at.code]
    # the seeded runs (sync, threads) leave unmeasured neighbours, so there is a sweep to queue
    [button] = [b for b in at.button if b.key == "advisor.queue"]
    before = len(api.list_jobs())
    button.click().run()
    no_problems(at)
    assert len(api.list_jobs()) > before
