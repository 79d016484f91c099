"""engine.calibrate.bound through real runs: a latency-dominated run is data-bound with efficiency near 1,
a big model on in-memory data is compute-bound, a loader and a model that cannot overlap (sync loader)
are told so (no-overlap) with a bound of load + compute, a failing calibration leaves the run done, and a
sweep reuses calibrations within a repeat. The bound's arithmetic as properties (more cores never raise
it, it never falls below any of its terms, the verdict names its largest term). Every mode family's own
bound: tests/engine/test_mode_bounds.py."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import RunConfig
from engine.calibrate import _passes
from engine.calibrate._passes import loader_pass
from engine.calibrate.bound import (
    EXPLAINED,
    FAIL_ENV,
    STALE,
    VERDICTS,
    Phase,
    _figures,
    _own_readings,
    _own_times,
    steady_cpu_pct,
)
from engine.measure.verdicts import ABOVE_ONE, efficiency_text
from engine.workloads.plugin import SERIAL_NOTE
from engine.run.runner import launch
from engine.runlog import read_events
from engine.store import get_run
from tests.engine import _drift_fixtures, _slow_start
from tests.engine._slow_start import SLOW_ITEMS, SLOW_S
from tests._wait import quiet_cores

pytestmark = pytest.mark.usefixtures("warm_runs")  # runs forked warm: these check what a run measures

# 20 ms per sample through the prefetch loader's single producer: ~0.64 s of waiting per epoch, while
# an 8-wide MLP on 8x8 images computes in microseconds. The loader-only pass alone explains the epoch.
SLOW_DATA = {
    "workload": "tensor",
    "n_samples": 32,
    "image_size": 8,
    "width": 8,
    "batch_size": 8,
    "epochs": 2,
    "warmup_epochs": 1,
    "latency_ms": 20.0,
    "loader": "prefetch",
    "device": "cpu",
    "sample_hz": 0.0,
    "threads": 1,
}
# a 1024-wide, 4-deep MLP on in-memory samples, one thread (steadier on a shared machine): the step costs far more than handing out a batch
BIG_MODEL = {
    "workload": "tensor",
    "n_samples": 256,
    "image_size": 16,
    "width": 1024,
    "depth": 4,
    "batch_size": 32,
    "epochs": 5,
    "warmup_epochs": 1,
    "loader": "prefetch",
    "device": "cpu",
    "sample_hz": 0.0,
    "threads": 1,
}


def _calibrations(run_dir) -> dict[str, bool]:
    return {e["kind"]: e["cached"] for e in read_events(run_dir) if e["type"] == "calibration"}


def _summary(run_dir) -> dict:
    return next(e for e in read_events(run_dir) if e["type"] == "summary")


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory):
    db = tmp_path_factory.mktemp("bound") / "loaderlab.duckdb"
    cfg = RunConfig.from_dict(SLOW_DATA)
    threads = cfg.replace(loader="threads", workers=2)
    meta = {"sweep_id": "bound-test"}
    runs = [
        launch(cfg, db=db, meta={**meta, "repeat_idx": 0}),
        launch(cfg, db=db, meta={**meta, "repeat_idx": 1}),
        launch(threads, db=db, meta={**meta, "config_idx": 1, "repeat_idx": 0}),
    ]
    return db, runs


@pytest.mark.quiet  # NOTE: efficiency within 0.8-1.2 is a quiet machine's: under another test's load the passes
# ran slower than the epoch (efficiency above 1, so no verdict) and the step slower than a tenth of the load
def test_latency_bound_run_is_data_bound_with_efficiency_between_0_8_and_1_2(sweep_runs):
    db, (first, *_) = sweep_runs
    assert first.status == "done", first.error
    row = get_run(first.run_id, db=db)
    assert row["verdict"] == "data-bound"
    assert 0.8 <= row["efficiency"] <= 1.2
    assert row["bound_s"] == pytest.approx(row["efficiency"] * row["epoch_s"])
    assert row["calib_age_s"] >= 0 and row["bound_error"] is None
    summary = _summary(first.run_dir)
    assert summary["loader_only_s"] > 10 * summary["compute_only_s"]
    # bound = loader steady + the run's own steady time to first batch, and the epoch took about that long
    assert summary["bound_s"] == pytest.approx(summary["loader_only_s"] + summary["bound_ttfb_s"])
    assert _calibrations(first.run_dir) == {"loader": False, "compute": False}


@pytest.mark.quiet  # NOTE: with the test above, so the module's three runs are made once, in the quiet phase
def test_calibrations_are_taken_once_per_repeat_and_shared_within_it(sweep_runs):
    _, (first, repeat, threads) = sweep_runs
    assert repeat.status == "done" and threads.status == "done"
    assert _calibrations(repeat.run_dir) == {"loader": False, "compute": False}  # a new repeat: both measured
    assert _calibrations(threads.run_dir) == {"loader": False, "compute": True}  # same repeat, new loader
    taken = {e["kind"]: e["taken_at"] for e in read_events(first.run_dir) if e["type"] == "calibration"}
    reused = {e["kind"]: e["taken_at"] for e in read_events(threads.run_dir) if e["type"] == "calibration"}
    assert reused["compute"] == taken["compute"] and reused["loader"] > taken["loader"]


def test_a_run_under_other_pool_settings_measures_its_own_loader_pass(tmp_path, monkeypatch):
    """OMP_NUM_THREADS sizes the BLAS pools a transform runs (numpy's OpenBLAS reads it), not a config field: a pass
    cached under one setting is no bound of a run under another, even in the same sweep and repeat."""
    db, cfg, meta = tmp_path / "s.duckdb", RunConfig.from_dict({**SLOW_DATA, "latency_ms": 1.0}), {"sweep_id": "env"}
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # NOTE: set both ways: an xdist worker runs under 1 already
    first = launch(cfg, db=db, meta={**meta, "repeat_idx": 0})
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    other = launch(cfg, db=db, meta={**meta, "repeat_idx": 0})
    assert first.status == other.status == "done", (first.error, other.error)
    assert _calibrations(other.run_dir) == {"loader": False, "compute": False}  # measured again, not reused


def test_a_bound_the_run_beat_is_measured_again_and_the_faster_pass_kept(tmp_path):
    """A pass taken in a slow stretch of the machine stands in for one: the cached passes of a sweep's repeat are
    written 20x slower on disk, so the next run of that repeat reads a bound far above its epoch. It measures every
    pass once more, keeps the faster, and stores that in the cache for the runs after it. dual-sequential: two
    models, two phases, where no run's own reading of a part stands in for a pass (one model's would)."""
    db, meta = tmp_path / "s.duckdb", {"sweep_id": "again"}
    cfg = RunConfig.from_dict({**SLOW_DATA, "latency_ms": 2.0, "mode": "dual-sequential"})
    first = launch(cfg, db=db, meta={**meta, "repeat_idx": 0})
    assert first.status == "done", first.error
    cache = [p for p in sorted((tmp_path / "calibrations").glob("*.json")) if not p.name.startswith("probe-")]
    assert len(cache) == 3  # the loader pass and each model's compute pass
    for path in cache:
        slow = json.loads(path.read_text())
        path.write_text(json.dumps({**slow, "seconds": 20 * slow["seconds"] + 1.0}))
    second = launch(cfg, db=db, meta={**meta, "repeat_idx": 0})
    assert second.status == "done", second.error
    again = [e for e in read_events(second.run_dir) if e["type"] == "calibration" and e.get("again")]
    assert sorted(e["kind"] for e in again) == ["compute", "compute", "loader"] and not any(e["cached"] for e in again)
    summary = _summary(second.run_dir)
    assert summary["bound_s"] < _summary(first.run_dir)["bound_s"] + 1.0  # not the tampered passes (over 1 s each)
    assert all(json.loads(p.read_text())["seconds"] < 1.0 for p in cache)  # the faster one, kept for the next run


def test_big_model_on_in_memory_data_is_bound_by_compute(tmp_path, shared_calibrations):
    """The compute pass dominates. NOTE: the verdict's threshold is a timing, so on a shared machine the run
    may fall below EXPLAINED (then its own times name it: compute-bound, or overhead-bound past it); it is never
    data-bound. The rule itself: the next test."""
    (tmp_path / "calibrations").symlink_to(shared_calibrations, True)  # BIG_MODEL's probe: once, with the sync test's
    result = launch(RunConfig.from_dict(BIG_MODEL), db=tmp_path / "s.duckdb")
    assert result.status == "done", result.error
    summary = _summary(result.run_dir)
    assert summary["compute_only_s"] > 2 * summary["loader_only_s"]
    assert summary["verdict"] != "data-bound" and summary["verdict_help"]
    # one intra-op thread and a prefetch producer on this host's cores: the counts are stored as they were
    assert summary["runnable_threads"] == 2 and summary["usable_cores"] >= 1


_SECONDS = st.floats(0.001, 10.0)
_PHASE = st.builds(Phase, _SECONDS, _SECONDS, st.none(), _SECONDS, _SECONDS, st.booleans())
_THREADS = st.fixed_dictionaries(
    {"intra_op": st.integers(1, 32), "loader": st.integers(0, 32), "cores": st.floats(0.5, 64.0)}
)


@settings(max_examples=300, deadline=None)
@given(phases=st.lists(_PHASE, min_size=1, max_size=3), ttfb=st.floats(0.0, 1.0), threads=_THREADS, measured=_SECONDS)
def test_the_bound_is_no_less_than_any_of_its_limits(phases, ttfb, threads, measured):
    """A run cannot beat its loader, its model, nor the CPU both need of the usable cores; a sync loader cannot
    beat load + compute."""
    out = _figures(phases, measured, ttfb, 0.0, threads)
    for limit in (
        lambda p: p.loader_s,
        lambda p: p.compute_s,
        lambda p: (p.loader_cpu_s + p.compute_cpu_s) / threads["cores"],
        lambda p: p.loader_s + p.compute_s if not p.overlaps else 0.0,
    ):
        assert out["bound_s"] >= sum(limit(p) for p in phases) + ttfb * len(phases) - 1e-9
    assert out["efficiency"] == pytest.approx(out["bound_s"] / measured)
    assert out["verdict"] in VERDICTS or out["verdict"] is None
    assert (out["verdict"] is None) == (out["efficiency"] > 1.0) == ("bound_note" in out)


@settings(max_examples=200, deadline=None)
@given(phases=st.lists(_PHASE, min_size=1, max_size=3), threads=_THREADS, more=st.floats(1.0, 8.0), measured=_SECONDS)
def test_more_cores_never_raise_the_bound_and_no_overlap_never_lowers_it(phases, threads, more, measured):
    out = _figures(phases, measured, 0.0, 0.0, threads)
    wider = _figures(phases, measured, 0.0, 0.0, {**threads, "cores": threads["cores"] * more})
    assert wider["bound_s"] <= out["bound_s"] + 1e-9
    serial = [Phase(p.loader_s, p.compute_s, None, p.loader_cpu_s, p.compute_cpu_s, False) for p in phases]
    assert _figures(serial, measured, 0.0, 0.0, threads)["bound_s"] >= out["bound_s"] - 1e-9


_ONE_CORE_FREE = {"intra_op": 1, "loader": 0, "cores": 2.0}


@pytest.mark.parametrize(
    "phase, verdict",
    [
        (Phase(1.0, 0.1, None, 0.2, 0.1), "data-bound"),  # the loader's wall time is the largest term
        (Phase(0.1, 1.0, None, 0.1, 0.9), "compute-bound"),
        (Phase(0.6, 0.6, None, 1.2, 1.2), "cpu-bound"),  # 2.4 CPU-seconds on 2 cores: 1.2 s, above either
        (Phase(0.5, 0.5, None, 0.5, 0.5, False), "no-overlap"),
        (Phase(0.01, 1.0, None, 0.01, 1.0, False), "compute-bound"),  # sync, but next to nothing to load
    ],
)
def test_an_explained_run_is_named_after_the_largest_term_of_its_bound(phase, verdict):
    out = _figures([phase], 0.95 * max(phase.terms(2.0).values()) / 0.9, 0.0, 0.0, _ONE_CORE_FREE)
    assert out["efficiency"] >= EXPLAINED and out["verdict"] == verdict
    assert out["verdict_help"] == VERDICTS[verdict]


def test_an_unexplained_run_is_oversubscribed_cpu_bound_or_overhead_bound():
    """Below EXPLAINED: more runnable threads than cores first (with the counts and the setting that fits),
    then a run that kept the cores busy, and only then overhead."""
    phase, slow = Phase(0.3, 0.4, None, 0.3, 0.4), 1.0  # bound 0.4 s, efficiency 0.4
    over = _figures([phase], slow, 0.0, 0.0, {"intra_op": 2, "loader": 2, "cores": 2.0}, mean_cpu_pct=190.0)
    assert over["verdict"] == "oversubscribed" and over["runnable_threads"] == 4
    assert "2 intra-op + 2 loader thread(s) = 4 runnable on 2 usable cores" in over["verdict_help"]
    assert "set threads to 1" in over["verdict_help"]
    busy = _figures([phase], slow, 0.0, 0.0, _ONE_CORE_FREE, mean_cpu_pct=195.0)
    assert busy["verdict"] == "cpu-bound"
    idle = _figures([phase], slow, 0.0, 0.0, _ONE_CORE_FREE, mean_cpu_pct=60.0)
    assert idle["verdict"] == "overhead-bound"


def test_serial_phases_add_and_concurrent_ones_report_overlap():
    two = _figures([Phase(0.2, 1.0), Phase(0.2, 0.6)], 1.7, 0.05, 0.0, _ONE_CORE_FREE)  # dual-sequential
    assert two["bound_s"] == pytest.approx(1.6 + 0.1) and "overlap" not in two
    # dual-threads: A = 1.0, B = 0.6 computed in 1.3 s: 0.3 of the 0.6 s that overlapping could save
    one = _figures([Phase(0.2, 1.0, serial_compute_s=1.6)], 1.3, 0.0, 0.0, _ONE_CORE_FREE)
    assert one["bound_s"] == pytest.approx(1.0) and one["serial_bound_s"] == pytest.approx(1.6)
    assert one["overlap"] == pytest.approx(0.5)
    # loader-bound: A + B's compute (0.015 s) could save next to nothing of the 1.2 s epoch: no overlap to report
    loaded = _figures([Phase(1.0, 0.01, serial_compute_s=0.015)], 1.2, 0.0, 0.0, _ONE_CORE_FREE)
    assert loaded["overlap"] is None and loaded["verdict"] == "data-bound"


def test_sync_loader_with_equal_load_and_compute_is_told_it_cannot_overlap(tmp_path, shared_calibrations):
    """The sync loader loads in the training thread, so nothing overlaps: the epoch is load + compute, and so
    is its bound (it was max(load, compute), which read as "overhead-bound" at about 50 %). The latency is set
    from the model's measured step."""
    # NOTE: the session's calibrations: the first run's pipeline is BIG_MODEL's (the probe is keyed by pipeline, not
    # loader), probed once for this test and the one above; passes are keyed by run, so none is shared
    (tmp_path / "calibrations").symlink_to(shared_calibrations, True)
    cfg = RunConfig.from_dict({**BIG_MODEL, "loader": "sync"})
    probe = launch(cfg.replace(epochs=2), db=tmp_path / "s.duckdb")  # the model's compute-only epoch, measured
    latency_ms = 1000 * _summary(probe.run_dir)["compute_only_s"] / cfg.n_samples
    result = launch(cfg.replace(latency_ms=latency_ms), db=tmp_path / "s.duckdb")
    assert result.status == "done", result.error
    summary = _summary(result.run_dir)
    assert summary["bound_s"] >= summary["loader_only_s"] + summary["compute_only_s"]
    # NOTE: the run's compute is slower than the pass's replay of cached batches, so efficiency sits near
    # EXPLAINED (0.82 quiet); below it the run's own data wait and step, which make its epoch, name it the same
    assert summary["verdict"] == "no-overlap", summary


def test_a_failing_calibration_keeps_the_run_done_with_bound_error(tmp_path, monkeypatch):
    monkeypatch.setenv(FAIL_ENV, "1")
    db = tmp_path / "s.duckdb"
    result = launch(RunConfig.from_dict({**SLOW_DATA, "latency_ms": 0.0}), db=db)
    assert result.status == "done", result.error
    row = get_run(result.run_id, db=db)
    assert "injected calibration failure" in row["bound_error"]
    assert row["efficiency"] is None or row["efficiency"] != row["efficiency"]  # NULL: no bound
    assert row["samples_per_s"] > 0  # the run's own figures stand


# ---------------------------------------------------------------------------- steady state, every start method

# Every loader, and the processes loader under each start method (the others ignore it).
LOADER_STARTS = [
    ("sync", "fork"),
    ("prefetch", "fork"),
    ("threads", "fork"),
    ("processes", "fork"),
    ("processes", "spawn"),
    ("processes", "forkserver"),
    ("spdl", "fork"),
]
# 64 samples, 8 per batch, 2 workers: a short epoch, so whatever a loader pays once would dominate the pass
SMALL = {
    "n_samples": 64,
    "image_size": 8,
    "width": 8,
    "batch_size": 8,
    "epochs": 4,
    "warmup_epochs": 1,
    "workers": 2,
    "device": "cpu",
    "sample_hz": 0.0,
    "threads": 1,
}


@pytest.fixture
def slow_start() -> str:
    """The spec of tests/engine/_slow_start.py's dataset, which the run child and spawned workers import from the
    checkout (on their PYTHONPATH already).

    NOTE: one module for every test, not a copy under a name of its own: the probe is keyed by the pipeline, so the
    efficiency tests' runs share one probe (it bounds nothing; each pays its own loader pass), and a run whose
    PYTHONPATH is the warm parent's is forked warm, where a copy's folder on it made every run start cold."""
    return f"{_slow_start.__name__}:data"


# NOTE: spdl is left out here: its pipeline hands each sample through asyncio tasks and threads (0.7-1.3 ms of CPU a
# sample, its author measured), so its steady 64-sample epoch is no test of a 150 ms limit meant for start-up cost;
# its bound stays held to the efficiency test below with every other loader
@pytest.mark.parametrize("loader, start_method", [ls for ls in LOADER_STARTS if ls[0] != "spdl"])
def test_the_loader_pass_times_a_steady_epoch_not_the_first(slow_start, loader, start_method):
    """Each copy of the dataset sleeps on its first 32 items (0.96 s in all): the pass's first epoch pays them,
    after its first batch too (batches that come from slow items one after another); the timed epoch must not."""
    cfg = RunConfig.from_dict({**SMALL, "workload": slow_start, "loader": loader, "start_method": start_method})
    out = loader_pass(cfg, torch.device("cpu"))
    assert out["samples"] == 64
    assert out["seconds"] < 5 * SLOW_S, out  # one slow item per batch would already take 8 x 30 ms
    assert out["first_epoch_s"] + out["first_ttfb_s"] >= SLOW_ITEMS * SLOW_S / 2  # it was slow: 2 workers at most


@pytest.mark.slow
@pytest.mark.quiet
@pytest.mark.parametrize("workload", ["slow first epoch", "tensor"])
@pytest.mark.parametrize("loader, start_method", LOADER_STARTS)
def test_efficiency_stays_within_1_25_for_sync_and_1_1_for_other_loaders_and_start_methods(
    tmp_path, request, shared_calibrations, loader, start_method, workload
):
    """The bound is close to a bound: a quiet machine's run beats it by no more than the allowance (1.25 for sync,
    whose bound is exact; STALE, 1.1, for the others). Above 1 the engine shows no fraction and no verdict. With the
    tensor workload, a short epoch is all start-up a fresh loader could add (a GPU box's spawned workers import a CUDA torch); with a dataset whose first
    epoch is slow, the run's warm-up epoch pays what the steady ones do not, so the pass must not pay it either
    (a fresh loader's first epoch here: efficiency 3 to 15).

    NOTE: 256 samples keep a steady epoch at tens of milliseconds, far below any start-up, and long enough that
    a hiccup is not the whole epoch. The passes run after the epochs they bound, so a pass slowed by the machine
    reads above 1 now and then: the limit is STALE, the tests' allowance for that."""
    # NOTE: the session's calibrations: each workload's probe (keyed by pipeline, not loader) is taken once, not
    # once a loader
    (tmp_path / "calibrations").symlink_to(shared_calibrations, True)
    fields = {
        **SMALL,
        "n_samples": 256,
        "workload": "tensor" if workload == "tensor" else request.getfixturevalue("slow_start"),
        "loader": loader,
        "start_method": start_method,
    }
    limit = 1.25 if loader == "sync" else STALE
    for attempt in range(3):  # NOTE: measured again when above the limit, as the probe's quiet tests are: a run of
        # 50 ms epochs on this VM reads steady epochs 0.047 and 0.063 s apart within one run (its core runs 1.5-2x
        # slow for 100-250 ms stretches), which no allowance for a bound fits; a start-up cost in the bound reads 2
        # to 15 on every attempt
        if attempt:
            quiet_cores()  # and again once the other processes leave the cores (up to 20 s): a busy minute passes
        result = launch(RunConfig.from_dict(fields), db=tmp_path / f"s{attempt}.duckdb")
        assert result.status == "done", result.error
        summary = _summary(result.run_dir)
        assert summary.get("bound_error") is None
        if summary["efficiency"] <= limit:
            break
    # NOTE: sync's bound is exact, not a margin below the run (load + compute, nothing overlaps on a CPU): two
    # fastest passes against a 40 ms run's median land within ~10 % either side (1.10 seen on a quiet machine).
    # A data-bound run's bound is its loader pass, so it sits near 1 too (0.84-0.92 in 10 quiet runs of
    # processes-forkserver; 1.048 once in a fresh-clone CI's quiet phase): the limit is STALE, the allowance
    # for a bound measured a moment apart from its run. A start-up cost in the bound reads 2 to 15.
    assert summary["efficiency"] <= limit, (limit, summary)


# ---------------------------------------------------------------------------- the verdicts issue 25 added

_BUSY, _IDLE = 195.0, 60.0  # the process tree's CPU % over the steady epochs, on 2 cores
_UNEXPLAINED = Phase(0.3, 0.4, None, 0.3, 0.4)  # bound 0.4 s against a 1.0 s epoch: efficiency 0.4


def test_many_threads_whose_cores_idled_are_not_oversubscribed():
    """Workers asleep on I/O take no core: more threads than cores, but cores left idle, is no oversubscription."""
    threads = {"intra_op": 2, "loader": 4, "cores": 2.0}
    assert _figures([_UNEXPLAINED], 1.0, 0.0, 0.0, threads, mean_cpu_pct=_IDLE)["verdict"] == "overhead-bound"
    assert _figures([_UNEXPLAINED], 1.0, 0.0, 0.0, threads, mean_cpu_pct=_BUSY)["verdict"] == "oversubscribed"


def test_pools_the_lab_did_not_set_count_as_runnable_threads_and_are_named_with_their_fix():
    fix = "openblas (libscipy_openblas) 2 threads in each loader worker: set transform_threads=1"
    threads = {"intra_op": 1, "loader": 1, "cores": 2.0, "extra": 2, "pools": fix}
    out = _figures([_UNEXPLAINED], 1.0, 0.0, 0.0, threads, mean_cpu_pct=_BUSY)
    assert out["verdict"] == "hidden-threads" and out["runnable_threads"] == 4
    assert "1 intra-op + 1 loader thread(s) + 2 pool thread(s) = 4 runnable on 2 usable cores" in out["verdict_help"]
    assert fix in out["verdict_help"]
    # the same run without the pools fits its cores: busy cores then read as cpu-bound
    alone = _figures([_UNEXPLAINED], 1.0, 0.0, 0.0, {**threads, "extra": 0, "pools": None}, mean_cpu_pct=_BUSY)
    assert alone["verdict"] == "cpu-bound" and alone["runnable_threads"] == 2


def test_a_step_slowed_beside_hidden_pool_threads_reads_hidden_threads_though_the_cores_did_not_read_busy():
    """The spectrogram's case: 1 intra-op thread, 1 worker and its BLAS pool's extra thread on 2 cores, CPU at 136 %,
    the step 45 % slower than the compute pass measured it alone. Threads that outnumber the cores and a step that
    lost its turns is the evidence; neither alone is."""
    fix = "openblas (libscipy_openblas) 2 threads in each loader worker: set transform_threads=1"
    threads = {"intra_op": 1, "loader": 1, "cores": 2.0, "extra": 1, "pools": fix}
    step = _UNEXPLAINED.compute_s
    slowed = _figures([_UNEXPLAINED], 1.0, 0.0, 0.0, threads, mean_cpu_pct=136.0, step_s=1.45 * step)
    assert slowed["verdict"] == "hidden-threads" and fix in slowed["verdict_help"]
    as_alone = _figures([_UNEXPLAINED], 1.0, 0.0, 0.0, threads, mean_cpu_pct=136.0, step_s=1.05 * step)
    assert as_alone["verdict"] == "overhead-bound"
    fits = _figures(
        [_UNEXPLAINED], 1.0, 0.0, 0.0, {**threads, "extra": 0, "pools": None}, mean_cpu_pct=136.0, step_s=1.45 * step
    )  # 2 runnable on 2 cores: the slow step is not the threads' doing
    assert fits["verdict"] == "overhead-bound"


@pytest.mark.parametrize(
    "kind, loader_cpu_s, gil_share, verdict",
    [
        ("prefetch", 0.3, None, "gil-contention"),  # a producer busy on one core, cores left idle: the GIL
        ("threads", 0.3, 0.9, "gil-contention"),  # the probe measured a Python-bound load
        ("prefetch", 0.3, 0.1, "overhead-bound"),  # the probe says the load releases the GIL
        ("prefetch", 0.03, None, "overhead-bound"),  # a producer asleep on I/O holds no GIL
        ("processes", 0.3, 0.9, "overhead-bound"),  # workers in their own processes have their own GIL
    ],
)
def test_gil_contention_needs_a_python_bound_producer_thread_beside_idle_cores(kind, loader_cpu_s, gil_share, verdict):
    phase = Phase(0.3, 0.4, None, loader_cpu_s, 0.4)
    threads = {"intra_op": 1, "loader": 1, "cores": 2.0, "kind": kind}
    out = _figures([phase], 1.0, 0.0, 0.0, threads, mean_cpu_pct=120.0, gil_share=gil_share)
    assert out["verdict"] == verdict
    assert out["verdict_help"] == VERDICTS[verdict]


def test_an_efficiency_above_one_gets_no_verdict_and_reads_as_measured_under_other_conditions():
    phase = Phase(1.0, 0.1, None, 0.2, 0.1)
    out = _figures([phase], 0.98, 0.0, 0.0, _ONE_CORE_FREE)  # efficiency 1.02: above 1, within STALE
    assert out["efficiency"] > 1 and out["verdict"] is None and ABOVE_ONE in out["bound_note"]
    assert efficiency_text(out["efficiency"]) == ABOVE_ONE and efficiency_text(0.84) == "84%"
    assert _figures([phase], 1.02, 0.0, 0.0, _ONE_CORE_FREE)["verdict"] == "data-bound"  # 0.98: a fraction


def test_items_that_load_one_at_a_time_say_so_first_in_the_help():
    threads = {"intra_op": 1, "loader": 4, "cores": 2.0, "items_note": SERIAL_NOTE}
    out = _figures([Phase(1.0, 0.1, None, 0.2, 0.1)], 1.05, 0.0, 0.0, threads)
    assert out["verdict"] == "data-bound" and out["verdict_help"].startswith(SERIAL_NOTE)
    assert VERDICTS["data-bound"] in out["verdict_help"]


def test_the_verdicts_cpu_percent_is_the_steady_epochs_only():
    events = [{"type": "samples", "rows": [[0.5, 10.0], [1.5, 190.0], [2.5, 170.0], [3.5, 5.0]]}]
    steady = [{"t_start": 1.0, "t_end": 3.0}]  # start-up at 0.5 and the teardown at 3.5 are left out
    assert steady_cpu_pct(events, steady) == pytest.approx(180.0)
    assert steady_cpu_pct(events, [{"t_start": 10.0, "t_end": 11.0}]) is None


def test_the_compute_pass_reads_the_cpu_before_the_final_synchronize(monkeypatch):
    """On CUDA the host spins in the final synchronize: its CPU-seconds are no work of the step's. The order of the
    calls holds on a CPU too (the sync is recorded here, not run)."""
    calls = []
    monkeypatch.setattr(_passes, "_sync", lambda device: calls.append("sync"))
    monkeypatch.setattr(_passes, "tree_cpu_s", lambda: calls.append("cpu") or float(len(calls)))
    _passes._replay(lambda x, y: calls.append("step"), [(None, None)] * 2, torch.device("cuda"))
    assert calls == ["sync", "cpu", "step", "step", "cpu", "sync"]


@settings(max_examples=200, deadline=None)
@given(wait=st.floats(0.0, 1.0), step=st.floats(0.0, 1.0), overlaps=st.booleans())
def test_a_run_whose_own_wait_and_step_make_its_epoch_is_never_overhead_bound(
    wait: float, step: float, overlaps: bool
) -> None:
    """A bound well under the run (0.4 s, or 0.7 s serial, of a 1.0 s epoch), the cores idle, threads that fit, no
    GIL: only the run's own times can say more. Where its data wait and step make EXPLAINED of the epoch or more,
    nothing outside them holds it; overhead-bound is left for time outside them."""
    phase = Phase(0.3, 0.4, None, 0.3, 0.4, overlaps=overlaps)
    out = _figures([phase], 1.0, 0.0, 0.0, _ONE_CORE_FREE, mean_cpu_pct=_IDLE, own_times=(wait, step))
    assert out["efficiency"] < EXPLAINED
    if wait + step >= EXPLAINED:
        assert out["verdict"] in ("data-bound", "compute-bound", "no-overlap")
        assert "the run's own times" in out["bound_note"]
        if overlaps and wait >= 1 - EXPLAINED:  # it waited for data a fifth of its epoch: not "the loader is good"
            assert out["verdict"] == "data-bound"
    else:
        assert out["verdict"] == "overhead-bound" and "bound_note" not in out


def test_a_run_slower_than_its_passes_is_named_by_its_own_data_wait_not_overhead(tmp_path):
    """tests/engine/_drift_fixtures.py's slow_run: the run's items wait 2 ms, the passes' after it 0.25 ms, as when this
    VM slows during a run and not during its calibration. The bound (the passes) explains under EXPLAINED of the run,
    yet the run's own data wait is its epoch: the sync loop is data-bound, not held by per-step overhead."""
    cfg = RunConfig.from_dict(
        {
            "workload": "tests.engine._drift_fixtures:slow_run",
            "model": "mlp",
            "image_size": 8,
            "width": 8,
            "n_samples": 128,
            "batch_size": 16,
            "loader": "sync",
            "epochs": 3,
            "warmup_epochs": 1,
            "threads": 1,
            "device": "cpu",
        }
    )
    assert 3 * cfg.n_samples == _drift_fixtures.SLOW_RUN_ITEMS  # the run's items slow, every later one fast
    result = launch(cfg, db=tmp_path / "s.duckdb")
    assert result.status == "done", result.error
    row = get_run(result.run_id, db=tmp_path / "s.duckdb")
    assert row["efficiency"] < EXPLAINED, row  # the premise: the passes ran faster than the run
    assert row["verdict"] == "data-bound", (row["verdict"], row["bound_note"])
    assert "the run's own times" in row["bound_note"]


# (first batch, the rest of the load, step, time outside them) of one steady epoch of one model on one rank
_EPOCH = st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.floats(0.0, 0.5))


def _epochs(parts: list[tuple[float, float, float, float]]) -> list[dict]:
    return [
        {
            "epoch": i,
            "ttfb_s": first,
            "data_wait_s": first + rest,
            "h2d_s": 0.0,
            "compute_s": step,
            "wall_s": first + rest + step + other,
        }
        for i, (first, rest, step, other) in enumerate(parts)
    ]


@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(_EPOCH, min_size=1, max_size=5),
    load=st.floats(0.0, 3.0),
    compute=st.floats(0.0, 3.0),
    busy=st.floats(0.0, 1.0),
    overlaps=st.booleans(),
)
def test_a_cpu_run_of_one_model_never_reads_above_its_own_epoch_whatever_its_passes_read(
    parts, load, compute, busy, overlaps
):
    """One model on a CPU: however slow its passes read (they come a minute later, on a VM whose speed drifts), the
    bound takes no part slower than the run itself took it, so it never exceeds the run's median epoch. Where the
    loader overlaps the step, the passes keep to one core each (2 cores, so that the cores term cannot outgrow the
    two parts' wall); sync's CPU-seconds fill up to both."""
    events = _epochs(parts)
    measured = statistics.median(e["wall_s"] for e in events)
    ttfb = statistics.median(e["ttfb_s"] for e in events)
    share = busy if overlaps else 2 * busy
    phase = Phase(load, compute, None, share * load, share * compute, overlaps=overlaps)
    out = _figures(
        [phase],
        measured,
        ttfb,
        0.0,
        _ONE_CORE_FREE,
        own_times=_own_times(events),
        readings=_own_readings(events, measured),
    )
    assert out["bound_s"] <= measured + 1e-9, out
    assert out["efficiency"] is None or out["efficiency"] <= 1.0 + 1e-9


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(_EPOCH, min_size=1, max_size=5),
    load=st.floats(0.0, 3.0),
    compute=st.floats(0.0, 3.0),
    busy=st.floats(0.0, 1.0),
    overlaps=st.booleans(),
)
def test_the_runs_own_readings_never_raise_a_bound_only_lower_it(parts, load, compute, busy, overlaps):
    """A run's own reading of a part is a second reading of it beside the pass's: the bound keeps the faster, so it is
    never above the bound from the passes alone, whatever the loader."""
    events = _epochs(parts)
    measured = statistics.median(e["wall_s"] for e in events)
    ttfb = statistics.median(e["ttfb_s"] for e in events)
    phase = Phase(load, compute, None, 2 * busy * load, 2 * busy * compute, overlaps=overlaps)
    passes = _figures([phase], measured, ttfb, 0.0, _ONE_CORE_FREE)
    both = _figures([phase], measured, ttfb, 0.0, _ONE_CORE_FREE, readings=_own_readings(events, measured))
    assert both["bound_s"] <= passes["bound_s"] + 1e-9


def test_a_run_faster_than_its_passes_keeps_its_own_readings_and_a_verdict(tmp_path):
    """tests/engine/_drift_fixtures.py's fast_run and fast_model: the run's items wait 0.25 ms and its steps 1 ms, the
    passes' after it 2 ms and 8 ms, as when this VM slows between a run and its calibration. The passes alone bound
    the run at several times its epoch; with the run's own readings of its load and step beside them, the sync run
    reads at most 1 and gets a verdict."""
    db = tmp_path / "f.duckdb"
    cfg = RunConfig.from_dict(
        {
            "workload": "tests.engine._drift_fixtures:fast_run",
            "model": "tests.engine._drift_fixtures:fast_model",
            "image_size": 8,
            "n_samples": 128,
            "batch_size": 16,
            "loader": "sync",
            "epochs": 3,
            "warmup_epochs": 1,
            "threads": 1,
            "device": "cpu",
        }
    )
    assert 3 * cfg.n_samples == _drift_fixtures.SLOW_RUN_ITEMS  # the run's items fast, every later one slow
    assert 3 * cfg.n_samples // cfg.batch_size == _drift_fixtures.FAST_RUN_STEPS  # and its steps
    result = launch(cfg, db=db)
    assert result.status == "done", result.error
    row = get_run(result.run_id, db=db)
    events = read_events(Path(row["run_dir"]))
    steady = [e for e in events if e["type"] == "epoch" and not e["warmup"]]
    passes = {e["kind"]: e["seconds"] for e in events if e["type"] == "calibration"}
    # the premise: each pass read its part slower than the run took it
    assert passes["loader"] > max(e["data_wait_s"] for e in steady), (passes, steady)
    assert passes["compute"] > max(e["compute_s"] for e in steady), (passes, steady)
    assert row["efficiency"] <= 1.0, (row["efficiency"], row["bound_note"])
    assert row["verdict"] is not None, row["bound_note"]
