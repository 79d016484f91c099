"""Every mode family's own lower bound (ModeSpec.bound), through real runs with bound=True.

The checks are on structure: which passes ran and on what share of the data; and on the one property every
mode's bound has, whatever formula combines its passes: it is a bound, so a quiet run's epoch never beats it
(engine/calibrate/bound.py's formulas themselves are not restated here).
"""

from __future__ import annotations

import os

import pytest
import torch

from engine.calibrate import STALE
from engine.runlog import read_events
from tests._wait import quiet_cores
from tests.engine._mode_runs import launch_mode, summary_of

pytestmark = pytest.mark.usefixtures("warm_runs")  # runs forked warm: these check what a run measures


def _cals(events: list[dict]) -> list[dict]:
    """The passes as first measured (not those measured again where the run beat its bound)."""
    return [e for e in events if e["type"] == "calibration" and not e.get("again")]


def _run(tmp_path, **fields):
    result, events = launch_mode(tmp_path / "s.duckdb", bound=True, device="cpu", threads=1, **fields)
    assert result.status == "done", result.error
    summary = summary_of(events)
    assert "bound_error" not in summary and summary["bound_s"] > 0
    return summary, _cals(events)


def _compute(cals: list[dict]) -> list[float]:
    return [c["seconds"] for c in cals if c["kind"] == "compute"]


def _loader(cals: list[dict]) -> dict:
    return next(c for c in cals if c["kind"] == "loader")


def test_single_bounds_one_phase_of_loader_against_the_step(tmp_path):
    summary, cals = _run(tmp_path, mode="single")
    assert summary["bound_phases"] == 1 and _loader(cals)["samples"] == 128
    assert summary["loader_cpu_s"] > 0 and summary["compute_cpu_s"] > 0


def test_dual_sequential_loads_the_epoch_once_per_model(tmp_path):
    summary, cals = _run(tmp_path, mode="dual-sequential")
    assert len(_compute(cals)) == 2 and _loader(cals)["samples"] == 128
    assert summary["bound_phases"] == 2 and "overlap" not in summary  # one after the other: nothing to overlap


@pytest.mark.parametrize("mode", ["dual-threads", "dual-processes"])
def test_concurrent_duals_bound_by_the_slower_model_and_report_overlap(tmp_path, mode):
    summary, cals = _run(tmp_path, mode=mode)
    assert len(_compute(cals)) == 2
    assert summary["serial_bound_s"] >= summary["bound_s"]  # running them together can only help
    assert "overlap" in summary  # its own figure: how much of A + B the concurrency hid


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="dual-streams needs CUDA")
def test_dual_streams_reports_overlap(tmp_path):
    result, events = launch_mode(tmp_path / "s.duckdb", bound=True, device="cuda", mode="dual-streams")
    assert result.status == "done", result.error
    assert "overlap" in summary_of(events) and len(_compute(_cals(events))) == 2


def test_fused_bounds_by_the_vmapped_step_of_all_models(tmp_path):
    summary, cals = _run(tmp_path, mode="fused", n_models=3)
    assert len(_compute(cals)) == 1 and summary["bound_phases"] == 1


def test_split_calibrates_each_stage_and_sums_them_without_micro_batches(tmp_path):
    summary, cals = _run(tmp_path, mode="split", n_stages=2, depth=2)
    assert len(_compute(cals)) == 2  # each stage calibrated
    assert "serial_bound_s" not in summary


def test_split_pipeline_bounds_by_the_busiest_device(tmp_path):
    summary, cals = _run(tmp_path, mode="split", n_stages=2, depth=2, micro_batches=2)
    assert len(_compute(cals)) == 2
    # both stages on the one CPU: micro-batches cannot overlap what one device does, so no gain over serial
    assert summary["serial_bound_s"] == pytest.approx(summary["bound_s"])


def test_ddp_calibrates_one_ranks_shard_at_the_world_size_that_ran(tmp_path):
    summary, cals = _run(tmp_path, mode="ddp", world_size=2)
    assert _loader(cals)["samples"] == 64  # 128 samples over 2 ranks: rank 0's shard
    compute = next(c for c in cals if c["kind"] == "compute")
    assert compute["batches"] == pytest.approx(2)  # 64 samples / batch 32, of the epoch's 4 batches
    assert summary["world_size_run"] == 2


def test_the_run_row_keeps_the_bound_figures(tmp_path):
    from engine.store import get_run  # noqa: PLC0415

    result, events = launch_mode(tmp_path / "s.duckdb", bound=True, device="cpu", threads=1, mode="dual-threads")
    row = get_run(result.run_id, db=tmp_path / "s.duckdb")
    summary = summary_of(events)
    assert row["serial_bound_s"] == pytest.approx(summary["serial_bound_s"])
    assert row["calib_age_s"] == pytest.approx(summary["calib_age_s"])
    assert [e for e in read_events(result.run_dir) if e["type"] == "calibration"]


# every mode this CPU runs, each with what it needs
_CPU_MODES = [
    dict(mode="single"),
    dict(mode="dual-sequential"),
    dict(mode="dual-threads"),
    dict(mode="dual-processes"),
    dict(mode="fused", n_models=2),
    dict(mode="split", n_stages=2, depth=2),
    dict(mode="split", n_stages=2, depth=2, micro_batches=2),
    dict(mode="ddp", world_size=2),
]


@pytest.mark.slow
@pytest.mark.quiet
@pytest.mark.parametrize("fields", _CPU_MODES, ids=lambda f: "-".join(map(str, f.values())))
def test_each_modes_efficiency_stays_within_1_25_quiet_or_1_375_busy(tmp_path, fields):
    """Whatever formula a mode combines its passes with, the result is close to a bound: efficiency (bound / epoch)
    at most 1.25 on a quiet machine, 1.375 (1.25 x STALE) on a busier one. It asserts these allowances, not 1: the
    engine itself shows anything above 1 as "≥ 1: bound measured under other conditions", with no verdict.

    NOTE: 1024 samples keep an epoch at tens of milliseconds, where a hiccup is not the whole epoch (TINY's few
    milliseconds are noise), and three steady epochs give the run a median. The loader is sync, whose bound is
    exact rather than a margin below the run: held to 1.25 as in test_bound; on a machine busier than its cores,
    passes slowed by others read higher now and then, so STALE's allowance comes on top there."""
    for attempt in range(3):  # NOTE: measured again when above the limit, as test_bound's efficiency test is: this
        # VM's core runs 1.5-2x slow for stretches, and passes inside one read dual-sequential at 1.26 in a CI's
        # quiet phase though the engine measured them twice; a bound that charges what the run does not reads
        # above the limit on every attempt
        if attempt:
            quiet_cores()  # and again once the other processes leave the cores (up to 20 s): a busy minute passes
        quiet = os.getloadavg()[0] < len(os.sched_getaffinity(0))
        summary, _ = _run(tmp_path / str(attempt), n_samples=1024, image_size=16, epochs=4, **fields)
        limit = 1.25 if quiet and os.getloadavg()[0] < len(os.sched_getaffinity(0)) else 1.25 * STALE
        if summary["efficiency"] <= limit:
            break
    assert summary["efficiency"] <= limit, (limit, summary["efficiency"], summary.get("bound_note"))
