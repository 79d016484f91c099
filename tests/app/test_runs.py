"""Runs: the table, ?run=<id> detail, bad ids as st.error, tags/notes editing, delete/restore/purge, compare."""

from __future__ import annotations

import re

import pytest

from engine import api
from engine.store import connect
from tests._markup import seen


def _plots(at) -> int:
    return len(at.get("plotly_chart"))


def test_table_lists_runs_and_search_filters_them(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page("runs")
    no_problems(at)
    assert set(at.dataframe[0].value["run_id"]) == set(ids)
    at.text_input(key="runs.q").set_value("syn-").run()
    assert set(at.dataframe[0].value["run_id"]) == {i for i in ids if i.startswith("syn-")}
    assert at.query_params["q"] == "syn-"  # the search is in the URL


def test_run_param_opens_the_detail_view(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page("runs", run=ids[0])
    no_problems(at)
    assert ids[0] in seen(at.subheader[0].value)
    figures = {m.label: m.value for m in at.metric}
    assert figures["lower bound"].endswith(" s") and figures["efficiency"].endswith("%")
    assert re.search(r"Verdict: \*\*(data|compute|overhead)-bound\*\*", " ".join(seen(m.value) for m in at.markdown))
    assert _plots(at) == 3  # per-epoch line, stacked breakdown, step timeline
    assert at.selectbox(key="runs.epoch_pick").value == 1
    at.selectbox(key="runs.epoch_pick").set_value(0).run()
    no_problems(at)
    assert at.query_params["epoch"] == "0"


def test_the_run_page_ends_with_the_code_to_paste(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page("runs", run=ids[0])
    no_problems(at)
    code = at.code[-1]
    assert code.language == "python" and f"LoaderLab run {ids[0]}: sync" in code.value
    scope: dict = {"dataset": [(float(i), i) for i in range(10)]}
    exec(compile(code.value, "<run page>", "exec"), scope)  # noqa: S102 - what the user copies, as it is
    assert sum(len(y) for _, y in scope["loader"]) == 10


def test_unknown_or_malformed_run_id_is_an_error(seeded, open_page):
    for bad, words in (
        ("20990101-000000-ffffff", "no run"),
        ("<script>alert(1)</script>", "not a run id"),
        ("../../etc/passwd", "not a run id"),
    ):
        at = open_page("runs", run=bad)
        assert not at.exception
        assert len(at.error) == 1 and words in at.error[0].value, at.error
        assert at.dataframe, "the table is still there to pick a run from"


def test_tags_and_notes_edits_persist(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page("runs", run=ids[1])
    at.text_input(key=f"runs.tags.{ids[1]}").set_value(" fast, keeper ,fast")
    at.text_area(key=f"runs.notes.{ids[1]}").set_value("threads win here")
    at.button[[b.label for b in at.button].index("Save tags and notes")].click().run()
    no_problems(at)
    run = api.get_run(ids[1])
    assert (run["tags"], run["notes"]) == ("fast,keeper", "threads win here")
    again = open_page("runs", run=ids[1])
    assert again.text_input(key=f"runs.tags.{ids[1]}").value == "fast,keeper"
    assert "keeper" in set(api.explore_filter_options()["tag"])  # user tags are explore filters too


def test_delete_restore_and_purge(seeded, open_page, no_problems):
    db, ids = seeded
    victim = ids[-1]
    at = open_page("runs", run=victim)
    at.button(key="runs.delete_one").click().run()
    assert api.get_run(victim)["deleted"] is True
    assert victim not in set(open_page("runs").dataframe[0].value["run_id"])
    at = open_page("runs", run=victim)
    assert "deleted" in at.warning[0].value
    at.button(key="runs.delete_one").click().run()  # now labelled "Restore this run"
    assert api.get_run(victim)["deleted"] is False
    api.soft_delete([victim])
    at = open_page("runs")
    at.checkbox(key="runs.purge_sure").check().run()
    at.button(key="runs.purge").click().run()
    no_problems(at)
    assert "Purged 1 run." in at.success[0].value  # one run, not "1 runs"
    assert api.get_run(victim) is None and api.get_run(ids[0]) is not None


def test_compare_shows_the_config_diff_and_overlaid_curves(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page("runs", compare=f"{ids[0]},{ids[1]}")
    no_problems(at)
    diff = at.dataframe[0].value
    assert {"loader", "workers", "bound"} <= set(diff.index) and "workload" not in diff.index
    assert list(diff.columns) == ids[:2]
    assert _plots(at) == 1


def test_compare_needs_two_to_four_known_runs(seeded, open_page):
    db, ids = seeded
    for bad in (ids[0], ",".join(ids[:5]), f"{ids[0]},nope-123"):
        at = open_page("runs", compare=bad)
        assert not at.exception and len(at.error) == 1, bad


def test_detail_shows_overlap_and_an_efficiency_above_one_as_no_fraction_and_no_verdict(seeded, open_page):
    """Concurrent modes' overlap is a figure of its own; an efficiency above 1 reads "≥ 1: bound measured under
    other conditions", with no verdict (even one an older run stored) and the note that says why."""
    db, ids = seeded
    with connect(db, read_only=False) as conn:
        conn.execute(
            "UPDATE runs SET overlap = 0.4, efficiency = 1.05, verdict = 'data-bound', "
            "bound_note = 'efficiency 1.05: stale' WHERE run_id = ?",
            [ids[2]],
        )
    at = open_page("runs", run=ids[2])
    assert not at.exception and not at.error
    assert any(m.value.startswith("Overlap: **40%**") for m in at.markdown)
    assert [seen(w.value) for w in at.warning] == ["efficiency 1.05: stale"]
    assert {m.label: m.value for m in at.metric}["efficiency"] == "≥ 1: bound measured under other conditions"
    assert not any("data-bound" in m.value for m in at.markdown)
    plain = open_page("runs", run=ids[0])
    assert not any(m.value.startswith("Overlap") for m in plain.markdown) and not plain.warning


def test_failed_run_shows_its_error_line_and_its_traceback_from_the_runlog(store, open_page):
    """The error is one line; the full traceback (kept in the RunLog's end event) is on the page, folded away."""
    from engine.config import RunConfig  # noqa: PLC0415
    from engine.runlog import RunLog  # noqa: PLC0415
    from engine.store import ingest_run  # noqa: PLC0415

    run_id = "20250101-120000-fa11ed"
    traceback = (
        'Traceback (most recent call last):\n  File "/home/me/data.py", line 9, in __getitem__\n'
        '    raise ValueError("sample is corrupt")\nValueError: sample is corrupt\n'
    )
    with RunLog(store.parent / "runs" / run_id) as rl:
        rl.write("start", run_id=run_id, config=RunConfig().to_dict(), host={})
        rl.write("end", status="failed", error="ValueError: sample is corrupt", traceback=traceback)
    ingest_run(store.parent / "runs" / run_id, db=store)
    at = open_page("runs", run=run_id)
    assert not at.exception
    assert [seen(e.value) for e in at.error] == ["The run failed: ValueError: sample is corrupt"]
    assert [c.value.strip() for c in at.code] == [traceback.strip()]
    assert "Traceback" in [e.label for e in at.expander]


def _cancelled_run(db, run_id: str, wait_s: float) -> None:
    """A run cancelled after 3 epochs (1 warm-up), each `wait_s` of its 1 s waiting for data, stored by the real
    ingest from its RunLog as the worker leaves it."""
    from engine.config import RunConfig
    from engine.paths import runs_dir
    from engine.runlog import RunLog
    from engine.store import ingest_run

    folder = runs_dir(db) / run_id
    with RunLog(folder) as rl:
        rl.write("start", run_id=run_id, config=RunConfig(bound=False).to_dict(), host={"hostname": "h"})
        for ep in range(3):
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=ep,
                warmup=ep == 0,
                wall_s=1.0,
                samples=64,
                ttfb_s=0.05,
                data_wait_s=wait_s,
                h2d_s=0.0,
                compute_s=1.0 - wait_s,
                n_steps=1,
                steps=[[0, wait_s, 0.0, 1.0 - wait_s, 1.0]],
            )
        rl.write("end", status="cancelled", error="cancelled by the user")
    ingest_run(folder, db=db)


def test_a_cancelled_run_is_said_as_cancelled_with_the_verdict_its_kept_epochs_support(store, open_page, no_problems):
    """Issue 28: it read "The run failed: cancelled by the user" in a red box, with no verdict at 94 % data wait."""
    _cancelled_run(store, "cancelled-waiting", 0.94)
    at = open_page("runs", run="cancelled-waiting")
    no_problems(at)  # no st.error: a user's cancel is no failure
    assert [seen(i.value) for i in at.info] == [
        "Cancelled after 3 finished epochs: they are kept, and the figures below come from them."
    ]
    said = " ".join(seen(m.value) for m in at.markdown)
    assert "Verdict: **data-bound**" in said and "94% of the kept steady-state time waiting for data" in said
    _cancelled_run(store, "cancelled-between", 0.3)
    said = " ".join(seen(m.value) for m in open_page("runs", run="cancelled-between").markdown)
    assert "Verdict: **none**" in said and "only the lower bound (not measured) could say" in said


@pytest.mark.parametrize("wait_s, verdict", [(0.94, "data-bound"), (0.05, "compute-bound"), (0.3, None)])
def test_a_cancelled_runs_page_says_the_verdict_the_store_holds(store, open_page, wait_s, verdict):
    """Issue 39: a cancelled run's stored verdict was empty while its page said compute-bound (the page judged its
    kept epochs itself). Now ingest stores that judgement and the page reads the store: the CLI, SQL and the page
    say one verdict."""
    _cancelled_run(store, "cancelled", wait_s)
    stored = api.get_run("cancelled")
    assert stored["verdict"] == verdict and stored["verdict_help"]  # judged at ingest, with what it rests on
    said = next(seen(m.value) for m in open_page("runs", run="cancelled").markdown if "Verdict:" in seen(m.value))
    assert said.startswith(f"Verdict: **{verdict or 'none'}**: {seen(stored['verdict_help'])}")


def _text_cells(df) -> set[str]:
    return {str(v) for c in df.columns if df[c].dtype == object for v in df[c] if isinstance(v, str)}


def test_the_runs_table_and_a_run_page_never_read_none(seeded, open_page, no_problems):
    """Issue 39: "None" in the Runs table (source for every lab run). A lab run's source says lab; every empty cell
    of every table shows the dash (st.dataframe's placeholder, whose own default is "None"); the config table and
    the page's caption say no None either."""
    from ui.words import MISSING

    _, ids = seeded
    at = open_page("runs")
    no_problems(at)
    table = at.dataframe[0].value
    assert set(table["source"]) == {"lab"} and not table["source"].isna().any()
    at = open_page("runs", run=ids[0])
    no_problems(at)
    for frame in at.dataframe:
        assert frame.proto.placeholder == MISSING
        assert not {"None", "nan", "NaN"} & _text_cells(frame.value), frame.value
    assert not any("None" in seen(c.value) for c in at.caption)
