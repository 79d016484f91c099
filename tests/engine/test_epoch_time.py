"""A run's epoch time has one home: engine.measure.median_epoch_s. The bound divides by it where the run is measured,
the run's summary carries it, and the store stores that figure; a RunLog cut short (no summary) gets the same function
on its finished epochs. Held through real RunLogs: a real short run, the same RunLog cut after N epochs, and the
same epochs read as an observed run's (engine/run/_observed_why.py)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import RunConfig
from engine.measure import epoch_walls, median_epoch_s
from engine.run.runner import launch
from engine.runlog import read_events
from engine.store import get_run, ingest_run

pytestmark = pytest.mark.usefixtures("warm_runs")  # what a run measures, not how its process starts

# 4 ms per sample through prefetch, a tiny MLP: a run of a few seconds whose bound's passes are cheap
SHORT = {
    "workload": "tensor",
    "n_samples": 32,
    "image_size": 8,
    "width": 8,
    "batch_size": 8,
    "epochs": 4,
    "warmup_epochs": 1,
    "latency_ms": 4.0,
    "loader": "prefetch",
    "device": "cpu",
    "sample_hz": 0.0,
    "threads": 1,
}


def _steady(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "epoch" and not e["warmup"]]


def _copy(events: list[dict], run_dir: Path) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run_dir


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    db = tmp_path_factory.mktemp("epoch_time") / "loaderlab.duckdb"
    run = launch(RunConfig.from_dict(SHORT), db=db)
    assert run.status == "done", run.error
    return db, run


def test_the_stored_epoch_s_is_the_efficiencys_denominator_and_the_one_functions_value(short_run):
    db, run = short_run
    row = get_run(run.run_id, db=db)
    events = read_events(run.run_dir)
    (summary,) = [e for e in events if e["type"] == "summary"]
    assert row["epoch_s"] == summary["epoch_s"] == median_epoch_s(_steady(events))
    assert row["efficiency"] is not None and row["bound_s"] / row["efficiency"] == pytest.approx(row["epoch_s"])


@pytest.mark.parametrize("kept", [2, 3])  # the warm-up and one steady epoch; and two steady
def test_a_runlog_cut_after_n_epochs_stores_the_one_functions_value_on_its_finished_epochs(short_run, tmp_path, kept):
    _, run = short_run
    events = read_events(run.run_dir)
    epochs = [i for i, e in enumerate(events) if e["type"] == "epoch"]
    cut = [e for e in events[: epochs[kept - 1] + 1] if e["type"] not in ("summary", "end")]
    db = tmp_path / "cut.duckdb"
    run_id = ingest_run(_copy(cut, tmp_path / "runs" / run.run_id), db=db)
    row = get_run(run_id, db=db)
    finished = _steady(cut)
    assert len(finished) == kept - 1 and row["efficiency"] is None  # no summary: no bound, the epochs' own figure
    assert row["epoch_s"] == median_epoch_s(finished) == pytest.approx(statistics.median(e["wall_s"] for e in finished))


def test_an_observed_runs_epoch_s_is_its_efficiencys_denominator(short_run, tmp_path):
    """The same epochs read as an observed run's: its why (bound, efficiency, verdict) is appended as a summary, as
    engine/run/observed.py does, and the store keeps the epoch time that why divided by."""
    from engine.run._observed_why import observed_figures

    _, run = short_run
    events = [e for e in read_events(run.run_dir) if e["type"] not in ("summary", "end", "calibration")]
    fields = observed_figures(events)
    db = tmp_path / "observed.duckdb"
    run_id = ingest_run(
        _copy(
            [*events, {"type": "summary", **fields}, {"type": "end", "status": "done"}], tmp_path / "runs" / run.run_id
        ),
        db=db,
    )
    row = get_run(run_id, db=db)
    assert row["epoch_s"] == fields["epoch_s"] == median_epoch_s([e for e in _steady(events) if e.get("n_steps")])
    assert row["bound_s"] / row["efficiency"] == pytest.approx(row["epoch_s"])


_seconds = st.floats(0.001, 100, allow_nan=False)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), _seconds, _seconds), min_size=1, max_size=12))
def test_an_epoch_of_several_ranks_spans_its_first_start_to_its_last_end(rows):
    """One event per (epoch, rank): an epoch's wall is the span of its events (they ran side by side), a lone
    event's its own wall_s, and the figure is their median."""
    events = {
        (epoch, rank): {"epoch": epoch, "rank": rank, "t_start": start, "t_end": start + wall, "wall_s": wall}
        for epoch, rank, start, wall in rows
    }
    by_epoch: dict[int, list[dict]] = {}
    for e in events.values():
        by_epoch.setdefault(e["epoch"], []).append(e)
    expected = [
        g[0]["wall_s"] if len(g) == 1 else max(e["t_end"] for e in g) - min(e["t_start"] for e in g)
        for g in by_epoch.values()
    ]
    assert epoch_walls(events.values()) == expected
    assert median_epoch_s(events.values()) == statistics.median(expected)


def test_malformed_readings_are_left_out_never_a_failure():
    assert median_epoch_s([]) is None
    assert median_epoch_s([{"epoch": 1, "wall_s": "x"}, {"epoch": 2, "wall_s": math.nan}]) is None
    # a rank with no start: the longest wall stands for the epoch
    assert epoch_walls(
        [
            {"epoch": 1, "t_start": None, "t_end": 2.0, "wall_s": 1.5},
            {"epoch": 1, "t_start": 0.5, "t_end": 2.5, "wall_s": 2.0},
        ]
    ) == [2.0]
