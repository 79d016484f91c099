"""A script's tune on the dashboard (issue 38 §4): Explore lists it under "Script tunes" (?tune=<id>), ranks its
candidates by seconds per batch with their intervals, shows a failed candidate with its first error and the answer's
diff as code; a trial's run page says which trial of which tune it is and links there. The store is a real file,
seeded as `engine tune -- python train.py` seeds it: trial RunLogs ingested under the tune's id, then record_tune."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest

from engine.runlog import RunLog, claim
from engine.store import ingest_run, record_tune
from tests._markup import live_markup, seen

TUNE = "tune-0a1b2c3d4e5f"
SITE = "train.py:42"
SETTINGS = [
    {"num_workers": 0, "pin_memory": False},
    {"num_workers": 2, "pin_memory": False},
    {"num_workers": 4, "pin_memory": False},
    {"num_workers": 2, "pin_memory": "spawn"},
    {"num_workers": 8, "pin_memory": False},
]  # the last never ran: the prediction ranked it below
# the diff and the error are the user's text: Markdown and HTML in them must show as typed
DIFF = (
    "--- train.py\n+++ train.py\n@@ -42 +42 @@\n-loader = DataLoader(ds, num_workers=0)  # **was** <b>x</b>\n"
    "+loader = DataLoader(ds, num_workers=2)  # [see](http://evil.example) ![i](http://evil.example/i.png)\n"
)
ERROR = "PicklingError: Can't pickle <function <lambda>>: **attribute** lookup failed [x](http://evil.example)"


def _trial(db, idx: int, repeat: int, s_per_batch: float | None, error: str | None = None) -> str:
    """One trial as tune_script stores it: an observed run's RunLog, ingested under the tune's id."""
    run_id = f"20261128-020000-{idx}{repeat:02d}"
    run_dir = db.parent / "runs" / run_id
    claim(run_dir, db)
    with RunLog(run_dir) as rl:
        rl.write(
            "start",
            run_id=run_id,
            pid=os.getpid(),
            host={"hostname": "box", "cores": 2},
            config={
                "workload": "MyDataset",
                "loader": "processes" if SETTINGS[idx]["num_workers"] else "sync",
                "workers": SETTINGS[idx]["num_workers"],
                "tag": "tune",
            },
        )
        rl.write("summary", source="observed", observed_stream=SITE)
        rl.write(
            "summary",
            s_per_batch=s_per_batch,
            trial_rung=0 if repeat == 0 else "confirm",
            trial_steps=40,
            tune_site=SITE,
            gpu_idle_share=None,
            peak_bytes=None if error else (100 + 10 * idx) * 2**20,
        )
        rl.write("end", status="failed" if error else "done", error=error)
    return ingest_run(run_dir, db=db, sweep_meta={"sweep_id": TUNE, "config_idx": idx, "repeat_idx": repeat})


@pytest.fixture
def tuned(store):
    """A finished tune: the script's own 7 trials (~10 ms a batch), workers=2 6 trials (~5 ms), workers=4 one
    (7 ms), and a candidate that broke the script."""
    ids = {}
    for i in range(7):
        ids[(0, i)] = _trial(store, 0, i, 0.010 + i * 0.0002)
    for i in range(6):
        ids[(1, i)] = _trial(store, 1, i, 0.005 + i * 0.0001)
    ids[(2, 0)] = _trial(store, 2, 0, 0.007)
    ids[(3, 0)] = _trial(store, 3, 0, None, ERROR)
    record_tune(
        store,
        {
            "tune_id": TUNE,
            "created_at": datetime(2026, 11, 28, 2, 30),
            "kind": "script",
            "command": json.dumps(["python", "train.py", "--epochs", "3"]),
            "site": SITE,
            "budget_s": 90.0,
            "spent_s": 80.0,
            "stop_reason": "confirmed",
            "best_config_idx": 1,
            "speedup": 2.0,
            "speedup_lo": 1.8,
            "speedup_hi": 2.2,
            "difference": "B faster",
            "diff": DIFF,
            "answer": "best: num_workers=2 (2.0x)",
            "settings_json": json.dumps(SETTINGS),
        },
    )
    return store, ids


def _ranking(at):
    table = next(t.value for t in at.table if "median s/batch" in [seen(c) for c in t.value.columns])
    return table.rename(columns=seen).map(seen)


def test_explore_ranks_a_script_tunes_candidates_by_seconds_per_batch_with_their_intervals(
    tuned, open_page, no_problems
):
    at = open_page("explore", tune=TUNE)
    no_problems(at)
    assert at.selectbox(key="explore.tune").value == TUNE
    table = _ranking(at)
    assert list(table["setting"]) == [
        "num_workers=2",
        "num_workers=4",
        "the script's own (num_workers=0, pin_memory=False)",
        "num_workers=2, pin_memory=spawn",
    ]
    assert list(table["trials"]) == ["6", "1", "7", "1"]
    assert table["95 % interval"].iloc[0].startswith("95% CI 0.005")  # 6 finished trials: an interval
    assert table["95 % interval"].iloc[1] == "one run: no interval"
    assert table["95 % interval"].iloc[2].startswith("95% CI 0.01")
    failed = table.iloc[3]
    assert failed["median s/batch"] == "failed" and failed["first error"] == ERROR  # shown as typed
    assert list(table["call"]) == ["the answer", "", "the script's own", ""]
    assert list(table["peak memory"]) == ["110 MiB", "120 MiB", "100 MiB", "not measured"]
    assert set(table["GPU idle"]) == {"not measured (CPU)"}
    # a candidate never tried is no row of the ranking: it is named in one folded list below
    untried = next(e for e in at.expander if "not tried" in e.label)
    assert untried.label.startswith("1 candidate(s) not tried") and "num_workers=8" in untried.text[0].value


def test_the_tunes_answer_shows_its_speedup_site_and_diff_as_code_and_user_text_as_text(tuned, open_page):
    at = open_page("explore", tune=TUNE)
    answer = next(seen(m.value) for m in at.markdown if "The answer:" in seen(m.value))
    assert "num_workers=2 at train.py:42, 2.00× (95% CI 1.80-2.20×) against the script's own setting: faster" in answer
    diffs = [c for c in at.code if c.language == "diff"]
    # verbatim, as code (st.code drops the last newline): the user's Markdown and HTML never render
    assert [c.value for c in diffs] == [DIFF.rstrip("\n")]
    table = next(t.value for t in at.table if "median s/batch" in [seen(c) for c in t.value.columns])
    cells = [str(c) for c in table.to_numpy().ravel()]
    assert ERROR in [seen(c) for c in cells]  # the error's link, emphasis and HTML are in the table, as text:
    assert not [c for c in cells if live_markup(c)]


def test_no_tune_chosen_shows_the_chooser_newest_first_and_no_tune_view(tuned, open_page, no_problems):
    store, _ = tuned
    record_tune(
        store,
        {
            "tune_id": "tune-ffffffffffff",
            "created_at": datetime(2026, 11, 28, 3, 0),
            "kind": "script",
            "command": '["python", "b.py"]',
            "site": "b.py:7",
            "budget_s": None,
            "spent_s": 5.0,
            "stop_reason": "budget",
            "best_config_idx": None,
            "speedup": None,
            "speedup_lo": None,
            "speedup_hi": None,
            "difference": None,
            "diff": "",
            "answer": "",
            "settings_json": "[]",
        },
    )
    at = open_page("explore")
    no_problems(at)
    chooser = at.selectbox(key="explore.tune")
    assert chooser.options[1:] == [chooser.format_func(i) for i in ("tune-ffffffffffff", TUNE)]
    assert not [c for c in at.code if c.language == "diff"]
    at = chooser.set_value("tune-ffffffffffff").run()  # picked in the chooser: the URL says so, to share it
    assert at.query_params["tune"] == "tune-ffffffffffff"
    at = open_page("explore", tune="tune-ffffffffffff")
    no_problems(at)
    assert any("No change to make to the DataLoader at b.py:7" in seen(m.value) for m in at.markdown)
    assert any("No diff" in seen(c.value) for c in at.caption)


def test_a_trial_runs_page_names_its_tune_and_links_to_it_in_explore(tuned, open_page, no_problems):
    _, ids = tuned
    at = open_page("runs", run=ids[(1, 2)])
    no_problems(at)
    said = " ".join(seen(i.value) for i in at.info)
    assert f"Trial 10 of tune {TUNE} (15 trials): num_workers=2, this setting's trial 3." in said
    links = [m.value for m in at.markdown if "/explore?tune=" in m.value]
    assert links and links[0].endswith(f"(/explore?tune={TUNE})")
    assert "Observed: your own training loop" in said  # still an observed run's page


def test_a_trial_of_a_tune_without_a_stored_answer_says_so_and_links_nowhere(store, open_page, no_problems):
    run_id = _trial(store, 1, 0, 0.005)  # the tune is running, or was stopped before record_tune
    at = open_page("runs", run=run_id)
    no_problems(at)
    said = " ".join(seen(i.value) for i in at.info)
    assert (
        f"Trial 1 of tune {TUNE} (1 trial): candidate 1, this setting's trial 1; the tune's answer is not stored"
        in said
    )
    assert not [m for m in at.markdown if "/explore?tune=" in m.value]
