"""engine.measure.bound through real runs: a latency-dominated run is data-bound with efficiency near 1,
and a sweep reuses calibrations keyed by the fields each pass depends on."""

from __future__ import annotations

import pytest

from engine.config import RunConfig
from engine.runlog import read_events
from engine.runner import launch
from engine.store import get_run

# 20 ms per sample through the prefetch loader's single producer: ~0.64 s of waiting per epoch, while
# an 8-wide MLP on 8x8 images computes in microseconds. The loader-only pass alone explains the epoch.
SLOW_DATA = {"workload": "tensor", "n_samples": 32, "image_size": 8, "width": 8, "batch_size": 8, "epochs": 2,
             "warmup_epochs": 1, "latency_ms": 20.0, "loader": "prefetch", "device": "cpu", "sample_hz": 0.0}


def _calibrations(run_dir) -> dict[str, bool]:
    return {e["kind"]: e["cached"] for e in read_events(run_dir) if e["type"] == "calibration"}


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory):
    db = tmp_path_factory.mktemp("bound") / "loaderlab.duckdb"
    cfg = RunConfig.from_dict(SLOW_DATA)
    threads = cfg.replace(loader="threads", workers=2)
    meta = {"sweep_id": "bound-test"}
    runs = [launch(cfg, db=db, meta={**meta, "repeat_idx": 0}),
            launch(cfg, db=db, meta={**meta, "repeat_idx": 1}),
            launch(threads, db=db, meta={**meta, "config_idx": 1})]
    return db, runs


def test_latency_bound_run_is_data_bound_with_efficiency_near_one(sweep_runs):
    db, (first, *_) = sweep_runs
    assert first.status == "done", first.error
    row = get_run(first.run_id, db=db)
    assert row["verdict"] == "data-bound"
    assert 0.8 <= row["efficiency"] <= 1.2
    assert row["bound_s"] == pytest.approx(row["efficiency"] * row["epoch_s"])
    summary = next(e for e in read_events(first.run_dir) if e["type"] == "summary")
    assert summary["loader_only_s"] > 10 * summary["compute_only_s"]
    # bound = loader steady + the run's own steady time to first batch, and the epoch took about that long
    assert summary["bound_s"] == pytest.approx(summary["loader_only_s"] + summary["bound_ttfb_s"])
    assert _calibrations(first.run_dir) == {"loader": False, "compute": False}


def test_calibrations_are_cached_within_a_sweep(sweep_runs):
    _, (first, repeat, threads) = sweep_runs
    assert repeat.status == "done" and threads.status == "done"
    assert _calibrations(repeat.run_dir) == {"loader": True, "compute": True}   # same config: both reused
    assert _calibrations(threads.run_dir) == {"loader": False, "compute": True}  # new loader: loader pass redone
    first_pass = next(e for e in read_events(first.run_dir) if e["type"] == "summary")["loader_only_s"]
    repeat_pass = next(e for e in read_events(repeat.run_dir) if e["type"] == "summary")["loader_only_s"]
    assert repeat_pass == first_pass
