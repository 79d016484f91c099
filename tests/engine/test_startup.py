"""Where a run's start-up goes (engine/measure/startup.py): real runs through the runner, the phases in the RunLog
and in the store, checked against clocks the parent reads itself."""

from __future__ import annotations

import time

import pytest

from engine.config import RunConfig
from engine.measure.startup import PHASES
from engine.run.runner import launch
from engine.runlog import read_events
from engine.store import get_run

TINY = dict(
    workload="tensor", n_samples=64, image_size=8, width=8, epochs=2, batch_size=16, device="cpu", sample_hz=2.0
)


def _first_batch_at(events: list[dict]) -> float:
    first = next(e for e in events if e["type"] == "epoch")
    return first["t_start"] + first["ttfb_s"]


def test_the_start_up_phases_add_up_to_launch_to_first_batch_as_the_parent_saw_it(store):
    cfg = RunConfig.from_dict(TINY)
    t0 = time.time()
    result = launch(cfg, db=store)
    assert result.status == "done", result.error
    events = read_events(result.run_dir)
    kinds = [e["type"] for e in events]
    assert kinds.index("startup") < kinds.index("epoch")  # written when the first epoch is, before it
    run = get_run(result.run_id, db=store)
    assert run["startup_cuda_s"] is None  # a CPU run: not measured, not 0
    parts = [run[k] for k in PHASES if k != "startup_cuda_s"]
    assert all(p is not None and p >= 0 for p in parts), parts
    assert sum(parts) == pytest.approx(run["startup_s"])
    # the parent's own clock: launch() called at t0, the first batch arrived when the epoch event says
    assert run["startup_s"] == pytest.approx(_first_batch_at(events) - t0, abs=0.5)
    assert run["startup_imports_s"] > 0.1  # a cold child imports torch
    # the bound's passes, after the epochs: within the time from the last epoch to the summary
    last_end = max(e["t_end"] for e in events if e["type"] == "epoch")
    summary_t = next(e["t"] for e in events if e["type"] == "summary")
    assert 0 < run["calibration_s"] <= summary_t - last_end


def test_a_slow_first_batch_is_the_first_batch_phase_not_the_build(store):
    # 8 samples at 60 ms each before the first batch can be handed over
    result = launch(
        RunConfig.from_dict({**TINY, "latency_ms": 60.0, "batch_size": 8, "n_samples": 16, "bound": False}), db=store
    )
    assert result.status == "done", result.error
    run = get_run(result.run_id, db=store)
    assert run["startup_first_batch_s"] >= 8 * 0.060
    assert run["calibration_s"] is None  # no bound, no passes
