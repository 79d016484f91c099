"""engine.predict.model's capacity model as properties (Hypothesis over probes): more cores never slow a setting,
more latency never speeds one, more process workers never slow one that fits the cores, a sync loader on a CPU
is never predicted faster than the same setting overlapped, no prediction beats the work the cores must do, a
worker process's batch is never faster than the one-thread load plus its hand-off, no worker count beats the
training process's serial receiving side, where items wait far longer than they work twice the threads never
predict slower, and where the load holds no GIL threads never predict slower than as many processes. The probe (engine/predict/probe.py) on real pipelines: a sleep is latency
that holds no GIL, a Python loop is CPU work that holds it, what that predicts for threads against processes, and a
budget too short for the full probe gets a quick one with a wider range."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.predict.model import MODES, predict, rank
from engine.config import RunConfig
from engine.predict.forecast import FAIL_ENV as FAIL_PROBE_ENV
from engine.predict.probe import probe
from engine.measure import usable_cpus
from engine.measure.verdicts import VERDICTS
from engine.modes import step_builder
from engine.run.runner import launch
from engine.runlog import read_events
from engine.store import get_run
from tests._wait import no_quiet_second, quiet_cores

pytestmark = pytest.mark.usefixtures("warm_runs")  # runs forked warm: these check what a run measures

CPU = torch.device("cpu")
seconds = st.floats(1e-4, 0.5)


@st.composite
def probes(draw: st.DrawFn) -> dict:
    cpu = draw(seconds)
    one = draw(seconds)
    threads = draw(st.integers(1, 16))
    pool = draw(st.integers(1, 8))
    # NOTE: the multi-thread step runs 0.2-3x the one-thread step: threads may slow a small model's step (0.60 s on
    # 2 threads against 0.44 s on 1, measured), and the model must hold its properties there too
    return {
        "batch_size": 64,
        "n_samples": draw(st.integers(64, 8192)),
        "cores": float(draw(st.integers(1, 16))),
        "default_threads": threads,
        "device": "cpu",
        "load_cpu_s": cpu,
        "load_wall_s": cpu + draw(seconds),
        "gil_share": draw(st.none() | st.floats(0.0, 1.0)),
        "step_gil_share": draw(st.none() | st.floats(0, 1)),
        "step_beside_python": draw(st.floats(1.0, 4.0)),
        "spread": draw(st.floats(0.0, 0.5)),
        "pools": [{"api": "openblas", "lib": "libopenblas", "threads": pool}] if pool > 1 else [],
        "pool_spin_s": draw(seconds) if pool > 1 else 0.0,
        # the load's median wall: its CPU spread over the pool's threads by the share of them that worked
        "load_median_wall_s": cpu / (1 + draw(st.floats(0.0, 1.0)) * (pool - 1)),
        # a worker process's hand-off of a batch, and the training process's serial side of it (at most that)
        **(lambda hand: {"handoff_s": hand, "receive_s": hand * draw(st.floats(0.0, 1.0))})(draw(seconds)),
        "compute": {
            "1": {"wall_s": one, "cpu_s": one * draw(st.floats(0.5, 1.0))},
            str(threads): {
                "wall_s": one * draw(st.floats(0.2, 3.0)),
                "cpu_s": one * draw(st.floats(0.5, float(threads))),
            },
        },
    }


loaders = st.sampled_from(["sync", "prefetch", "threads", "processes"])


def _cfg(loader: str, workers: int, threads: int, base: RunConfig | None = None) -> RunConfig:
    return (base or RunConfig(device="cpu")).replace(
        loader=loader, workers=workers if loader in ("threads", "processes", "spdl") else 0, threads=threads
    )


@settings(max_examples=300, deadline=None)
@given(probes(), loaders, st.integers(1, 16), st.integers(1, 16), st.integers(1, 32))
def test_more_cores_never_slow_a_setting(p: dict, loader: str, workers: int, threads: int, cores: int) -> None:
    cfg = _cfg(loader, workers, threads)
    assert predict(cfg, p, cores + 1).epoch_s <= predict(cfg, p, cores).epoch_s * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(probes(), loaders, st.integers(1, 16), st.integers(1, 16), seconds)
def test_more_latency_never_speeds_a_setting(p: dict, loader: str, workers: int, threads: int, extra: float) -> None:
    cfg = _cfg(loader, workers, threads)
    slower = {**p, "load_wall_s": p["load_wall_s"] + extra}
    assert predict(cfg, slower).epoch_s >= predict(cfg, p).epoch_s * (1 - 1e-9)


@settings(max_examples=300, deadline=None)
@given(probes(), st.integers(1, 15))
def test_more_process_workers_never_slow_a_setting_that_fits_the_cores(p: dict, workers: int) -> None:
    pool = max([1] + [q["threads"] for q in p["pools"]])  # each worker process runs its own hidden pool
    if 1 + (workers + 1) * pool > p["cores"]:  # one intra-op thread beside the workers and their pools
        return
    more, fewer = predict(_cfg("processes", workers + 1, 1), p), predict(_cfg("processes", workers, 1), p)
    assert more.epoch_s <= fewer.epoch_s * (1 + 1e-9)
    assert not more.oversubscribed


@settings(max_examples=300, deadline=None)
@given(probes(), st.integers(1, 64), st.integers(1, 16), st.integers(1, 64))
def test_a_workers_batch_is_never_predicted_faster_than_the_one_thread_load_plus_its_hand_off(
    p: dict, workers: int, threads: int, cores: int
) -> None:
    p = {**p, "pools": []}
    batches = math.ceil(p["n_samples"] / p["batch_size"])
    epoch = predict(_cfg("processes", workers, threads), p, cores).epoch_s
    assert epoch >= math.ceil(batches / workers) * (p["load_wall_s"] + p["handoff_s"]) * (1 - 1e-9)


@settings(max_examples=300, deadline=None)
@given(probes(), st.integers(1, 64), st.integers(1, 16), st.integers(1, 64))
def test_more_workers_never_predict_faster_than_the_receiving_side_allows(
    p: dict, workers: int, threads: int, cores: int
) -> None:
    batches = math.ceil(p["n_samples"] / p["batch_size"])
    epoch = predict(_cfg("processes", workers, threads), p, cores).epoch_s
    assert epoch >= batches * p["receive_s"] * (1 - 1e-9)


@settings(max_examples=300, deadline=None)
@given(probes(), st.integers(1, 63))
def test_more_process_workers_on_enough_cores_never_predict_slower(p: dict, workers: int) -> None:
    """Monotone in workers where physics says so: every thread has a core (each worker's pool too)."""
    pool = max([1] + [q["threads"] for q in p["pools"]])
    cores = 1 + (workers + 1) * pool
    more, fewer = predict(_cfg("processes", workers + 1, 1), p, cores), predict(_cfg("processes", workers, 1), p, cores)
    assert more.epoch_s <= fewer.epoch_s * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(
    probes(),
    st.sampled_from(["threads", "spdl"]),
    st.sampled_from([1, 2, 4, 8, 16, 32]),
    st.integers(1, 16),
    st.floats(16.0, 200.0),
)
def test_where_items_wait_far_longer_than_they_work_twice_the_threads_are_never_predicted_slower(
    p: dict, loader: str, workers: int, threads: int, waits: float
) -> None:
    """Threads that wait hold no core and no GIL: where loading is the limit at both counts, twice the threads (up
    to what the latency/work ratio keeps busy) never predict slower, whatever share of the work holds the GIL.
    (Where the step is the limit, more threads beside it may slow it a little: the time-sliced step.)"""
    p = {**p, "load_wall_s": p["load_cpu_s"] * (1 + waits)}
    if 2 * workers > p["cores"] * (1 + waits):
        return
    fewer = predict(_cfg(loader, workers, threads), p)
    more = predict(_cfg(loader, 2 * workers, threads), p)
    if fewer.limit == more.limit == "data-bound":
        assert more.epoch_s <= fewer.epoch_s * (1 + 1e-9), (more, fewer)


@settings(max_examples=300, deadline=None)
@given(probes(), st.integers(1, 64), st.integers(1, 16), st.integers(1, 64))
def test_where_the_load_holds_no_gil_threads_are_never_predicted_slower_than_as_many_processes(
    p: dict, workers: int, threads: int, cores: int
) -> None:
    """Both overlap the waits and the work; processes pay the hand-off (and the serial receiving side) besides."""
    p = {**p, "gil_share": 0.0}
    in_threads = predict(_cfg("threads", workers, threads), p, cores)
    assert in_threads.epoch_s <= predict(_cfg("processes", workers, threads), p, cores).epoch_s * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(probes(), st.integers(1, 8), st.integers(1, 8), st.floats(0.0, 1.0))
def test_a_hidden_pool_counts_by_the_share_the_probe_saw_it_work_and_transform_threads_caps_it(
    p: dict, workers: int, cap: int, use: float
) -> None:
    pool = max([1] + [q["threads"] for q in p["pools"]])
    cfg = _cfg("processes", workers, 1)
    # NOTE: the model reads transform_threads with getattr (the field arrives with the run's thread-pool records)
    capped_cfg = SimpleNamespace(**{**cfg.to_dict(), "transform_threads": cap})
    busy = {**p, "load_median_wall_s": p["load_cpu_s"] / pool}  # every thread of the pool worked through the load
    idle = {**p, "load_median_wall_s": p["load_cpu_s"]}  # CPU = wall: the pool added no core
    part = {**p, "load_median_wall_s": p["load_cpu_s"] / (1 + use * (pool - 1))}
    assert predict(cfg, busy).runnable == 1 + workers * pool  # the lab's thread, the workers, each one's pool
    assert predict(capped_cfg, busy).runnable == 1 + workers * min(pool, cap)
    assert predict(cfg, idle).runnable == 1 + workers  # an idle pool takes no core
    # where the cores hold every thread, a pool that works more only loads on more threads: never predicted slower
    cores = 1 + workers * pool
    assert predict(cfg, busy, cores).epoch_s <= predict(cfg, part, cores).epoch_s * (1 + 1e-9)
    assert predict(cfg, part, cores).epoch_s <= predict(cfg, idle, cores).epoch_s * (1 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(probes(), st.integers(1, 16))
def test_sync_on_a_cpu_is_never_faster_than_prefetch(p: dict, threads: int) -> None:
    sync, ahead = predict(_cfg("sync", 0, threads), p), predict(_cfg("prefetch", 0, threads), p)
    assert sync.epoch_s >= ahead.epoch_s * (1 - 1e-9) or ahead.oversubscribed


@settings(max_examples=300, deadline=None)
@given(probes(), loaders, st.integers(1, 16), st.integers(1, 16))
def test_no_prediction_beats_the_cores_or_names_a_limit_smaller_than_another(
    p: dict, loader: str, workers: int, threads: int
) -> None:
    got = predict(_cfg(loader, workers, threads), p)
    batches = -(-p["n_samples"] // p["batch_size"])
    assert got.epoch_s >= batches * p["load_cpu_s"] / p["cores"] * (1 - 1e-9)
    assert got.epoch_s == max(got.terms.values()) and got.terms[got.limit] == got.epoch_s


def test_rank_puts_the_fastest_first_and_skips_modes_it_does_not_model() -> None:
    p = {
        "batch_size": 64,
        "n_samples": 1024,
        "cores": 4.0,
        "default_threads": 4,
        "device": "cpu",
        "load_cpu_s": 0.001,
        "load_wall_s": 0.02,
        "gil_share": 0.0,
        "compute": {"1": {"wall_s": 0.002, "cpu_s": 0.002}, "4": {"wall_s": 0.001, "cpu_s": 0.004}},
    }
    configs = [_cfg("sync", 0, 1), _cfg("threads", 8, 1), RunConfig(mode="fused", device="cpu")]
    ranked = rank(configs, p)
    assert [c.loader for c, _ in ranked] == ["threads", "sync"]  # 20 ms of latency: 8 threads overlap it
    assert predict(RunConfig(mode="ddp", device="cpu"), p) is None


def _probe(**fields) -> tuple[RunConfig, dict]:
    cfg = RunConfig.from_dict(
        {"workload": "tensor", "n_samples": 64, "image_size": 8, "width": 8, "batch_size": 8, "device": "cpu", **fields}
    )
    return cfg, probe(cfg, CPU, step_builder(cfg, 0, CPU))


# NOTE: the probes the quiet GIL tests took, by their fields: the same load's probe, taken once quiet cores came, is
# the same reading in each test that asks for it (the agreement test's first probe of a load is the other test's
# probe of it), so each is taken once; a test that finds it wanting measures again, as it would its own
_TAKEN: dict[str, list[tuple[RunConfig, dict, bool]]] = {}


def _gil_probe(fields: dict, nth: int = 0) -> tuple[RunConfig, dict, bool]:
    """The nth quiet probe of this load the module took (taken now where it has not: once the other processes leave
    both cores idle), and whether a quiet second came before it."""
    taken = _TAKEN.setdefault(repr(sorted(fields.items())), [])
    if nth >= len(taken):
        quiet = quiet_cores()
        taken.append((*_probe(**fields), quiet))
    return taken[nth]


def _fresh_gil_probe(fields: dict) -> tuple[RunConfig, dict, bool]:
    """A new quiet probe of this load in place of the last one taken (which a test found wanting)."""
    taken = _TAKEN.setdefault(repr(sorted(fields.items())), [])
    quiet = quiet_cores()
    taken[-1:] = [(*_probe(**fields), quiet)]
    return taken[-1]


def _quiet_probe(nth: int, **fields) -> tuple[dict, bool]:
    """A probe taken once the other processes leave both cores idle, measured again where it still found a core
    shared (a busy moment of the machine does not read as no GIL share); and whether a quiet second came first."""
    _, p, quiet = _gil_probe(fields, nth)
    if p["gil_share"] is None:
        _, p, again = _fresh_gil_probe(fields)
        quiet = quiet or again
    return p, quiet


@pytest.mark.quiet  # NOTE: the GIL share is the extra wall of two threads: another test loading the cores between the
# probe's windows read GIL-free work as 0.56 GIL-held under xdist (fresh-clone CI)
@pytest.mark.parametrize("fields", [{"latency_ms": 4.0}, {"work_us": 2000}], ids=["sleep", "numpy-like work"])
def test_probe_finds_latency_and_work_that_release_the_gil(fields: dict) -> None:
    quiet = False
    for attempt in range(3):  # NOTE: as below: a machine too busy to tell the GIL from a wait for a core says None
        base, p, was_quiet = (_fresh_gil_probe if attempt else _gil_probe)(fields)
        quiet = was_quiet or quiet
        if p["gil_share"] is not None or p["cores"] < 2:
            break
    per_batch = 8 * (fields.get("latency_ms", 0) / 1e3 + fields.get("work_us", 0) / 1e6)
    assert p["load_wall_s"] >= 0.9 * per_batch
    if "latency_ms" in fields:  # a sleep costs no CPU
        assert p["load_cpu_s"] < 0.5 * p["load_wall_s"]
    if p["cores"] >= 2:
        # NOTE: on two cores in the quiet part the share must be measured: a probe that never measures it would
        # pass every assertion below that depends on it
        if p["gil_share"] is None and not quiet:
            no_quiet_second("other processes left no quiet second in 3 waits of 20 s: no GIL share can be measured")
        assert p["gil_share"] is not None, (
            f"GIL share unmeasured on {p['cores']:g} cores (core sharing "
            f"{p['core_sharing']:.2f}) with the other processes quiet"
        )
        assert p["step_gil_share"] is not None and 0.0 <= p["step_gil_share"] <= 1.0
        if p["load_cpu_s"] > 0.5 * p["load_wall_s"]:
            assert p["gil_share"] < 0.5
        slow, fast = (predict(_cfg("threads", w, 1, base), p).epoch_s for w in (1, 4))
        assert not predict(_cfg("threads", 4, 1, base), p).scaled
        if p["gil_share"] is not None or p["load_cpu_s"] < 0.5 * p["load_wall_s"]:  # (None counts as GIL-bound)
            assert fast < slow  # released GIL: threads overlap the loading


@pytest.mark.quiet
def test_the_gil_share_of_the_same_load_agrees_across_probes() -> None:
    # NOTE: one-thread and two-thread windows taken seconds apart read a pure-Python tokenizer's share at 0.58 and
    # 1.00 in two probes on this VM (its speed drifts); back-to-back pairs keep three probes of one load together
    if usable_cpus() < 2:
        pytest.skip("one core: the GIL is not told apart from the wait for the core")
    shares: dict[str, list] = {}
    for fields in ({"workload": "pyloop", "work_us": 1500}, {"work_us": 2000}):  # pure Python; GIL-free work
        for nth in range(3):
            p, quiet = _quiet_probe(nth, **fields)
            if not quiet:
                no_quiet_second("other processes left no quiet second in 40 s before a probe: its share says nothing")
            shares.setdefault(fields.get("workload", "tensor"), []).append(p["gil_share"])
    assert None not in shares["pyloop"] + shares["tensor"], shares
    # every probe reads pure Python as GIL-held, and within 0.25 of the others
    assert min(shares["pyloop"]) >= 0.75 and max(shares["pyloop"]) - min(shares["pyloop"]) <= 0.25, shares
    # the tensor workload's torch ops release the GIL (each op's dispatch holds it): a small share over small work,
    # so mostly noise, 0.08-0.59 per probe here (0.59 once in CI's quiet part); their median reads it as released
    # (under 0.5, as in the test above)
    assert sorted(shares["tensor"])[1] < 0.5, shares


@pytest.mark.quiet
def test_probe_finds_python_work_holds_the_gil_and_predicts_processes_beat_threads() -> None:
    quiet, busy = False, lambda p: p["gil_share"] is None or p["load_cpu_s"] < 0.5 * p["load_wall_s"]
    for attempt in range(3):  # NOTE: a machine too busy to tell the GIL from a wait for a core says None, and its
        # waits for a core read as wall without CPU (the suite's other worker, a user's browser can make it so): wait
        # for quiet cores, probe again
        base, p, was_quiet = (_fresh_gil_probe if attempt else _gil_probe)({"workload": "pyloop", "work_us": 1500})
        quiet = was_quiet or quiet
        if p["cores"] < 2 or not busy(p):
            break
    if p["cores"] >= 2 and busy(p) and not quiet:
        no_quiet_second("other processes left no quiet second in 3 waits of 20 s: no GIL share can be measured")
    assert p["load_cpu_s"] >= 0.5 * p["load_wall_s"]  # CPU work (a sleep is < 0.5: above); a busy machine waits
    if p["cores"] >= 2:  # NOTE: measured, as above: unmeasured would pass the prediction below by the worst case
        assert p["gil_share"] is not None, (
            f"GIL share unmeasured on {p['cores']:g} cores (core sharing "
            f"{p['core_sharing']:.2f}) with the other processes quiet"
        )
        assert p["gil_share"] > 0.5
    # measured or not (unmeasured counts as GIL-bound, the worst case), processes are predicted faster
    threads = predict(_cfg("threads", 2, 1, base), p).epoch_s
    procs = predict(_cfg("processes", 2, 1, base), p).epoch_s
    assert procs < threads


# ---------------------------------------------------------------------------- runs store their prediction

TINY = {
    "workload": "tensor",
    "n_samples": 64,
    "image_size": 8,
    "width": 8,
    "batch_size": 16,
    "epochs": 2,
    "device": "cpu",
    "sample_hz": 0.0,
    "latency_ms": 1.0,
}


def _stored(db, **fields) -> tuple[dict, list[dict]]:
    result = launch(RunConfig.from_dict({**TINY, **fields}), db=db)
    assert result.status == "done", result.error
    return get_run(result.run_id, db=db), read_events(result.run_dir)


def _finite(value) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def test_a_first_run_predicts_from_its_own_probe_and_the_next_from_it_before_its_first_epoch(tmp_path):
    db = tmp_path / "s.duckdb"
    first, events = _stored(db, loader="sync")
    assert first["predicted_from"] == "own" and _finite(first["predicted_epoch_s"])
    assert first["predicted_limit"] in VERDICTS
    kinds = [e["type"] for e in events]
    assert kinds.index("prediction") > max(i for i, k in enumerate(kinds) if k == "epoch")  # after the run
    assert list((tmp_path / "calibrations").glob("probe-*.json"))  # saved for the pipeline's later runs

    second, events = _stored(db, loader="threads", workers=2)
    assert second["predicted_from"] == "prior" and _finite(second["predicted_epoch_s"])
    assert second["predicted_limit"] in VERDICTS
    kinds = [e["type"] for e in events]
    assert kinds.count("prediction") == 1 and kinds.index("prediction") < kinds.index("epoch")  # made before it ran
    # another loader, so another prediction from the same probe: a sleep that 2 threads overlap is cheaper
    assert second["predicted_epoch_s"] < first["predicted_epoch_s"]


def test_a_run_of_a_mode_the_model_does_not_cover_or_without_a_bound_stores_no_prediction(tmp_path):
    db = tmp_path / "s.duckdb"
    fused, _ = _stored(db, mode="fused", n_models=2)
    assert "fused" not in MODES
    unbound, events = _stored(db, bound=False)
    for row in (fused, unbound):
        assert row["predicted_epoch_s"] is None and row["predicted_from"] is None and row["predicted_limit"] is None
    assert "prediction" not in [e["type"] for e in events]
    assert not list((tmp_path / "calibrations").glob("probe-*.json"))


def test_a_failing_probe_keeps_the_run_done_with_no_prediction(tmp_path, monkeypatch):
    monkeypatch.setenv(FAIL_PROBE_ENV, "1")
    row, events = _stored(tmp_path / "s.duckdb")
    assert row["status"] == "done" and row["predicted_epoch_s"] is None and row["predicted_from"] is None
    assert row["samples_per_s"] > 0 and row["bound_s"] is not None  # the run's own figures and its bound stand
    assert "prediction" not in [e["type"] for e in events]


@pytest.mark.quiet
def test_probe_reads_a_heavy_tailed_latency_at_its_mean_not_its_fastest_window() -> None:
    # bench/pipelines/storage.py: lognormal waits, median 3 ms, sigma 1: a mean of 3 e^0.5 = 4.95 ms an item
    cfg = RunConfig.from_dict(
        {
            "workload": "bench.pipelines.storage:build",
            "model": "bench.pipelines.storage:model",
            "n_samples": 1024,
            "batch_size": 32,
            "device": "cpu",
        }
    )
    mean = 32 * 3e-3 * math.exp(0.5)
    p = probe(cfg, CPU, step_builder(cfg, 0, CPU))
    assert p["latency_batches"] * 32 >= 256  # enough items to see the tail, not a few windows' worth
    # NOTE: at least the mean, which the fastest of a few windows reads under (0.8x and below). It reads over it, up
    # to 1.65x in a fresh-clone CI's quiet part (0.26 s a batch against 0.158; 0.178 at a quiet prompt): a known miss,
    # in the closing note of issue 25's merge, so the upper side holds only what would be a gross error
    assert 0.8 * mean <= p["load_wall_s"] - p["load_cpu_s"] <= 2.0 * mean
    # the fastest window is kept beside it, not used for it: NOTE: no bound against the mean, as a few short windows
    # of a heavy tail can all read above it (1.27x in a fresh clone's quiet phase, 2026-11-26)
    assert p["load_fastest_wall_s"] > 0 and p["load_wall_s"] != p["load_fastest_wall_s"]


@pytest.mark.quiet
def test_a_load_whose_machine_slows_after_the_first_windows_is_read_at_most_windows_speed_not_the_fastest() -> None:
    # tests/engine/_drift_fixtures.py: 0.5 ms of CPU an item for the first 1.3 s, then 1 ms (as this VM's speed drifts
    # for seconds): the back-to-back windows see it fast, the six one-thread windows of the GIL pairs after see it slow
    cfg = RunConfig.from_dict(
        {
            "workload": "tests.engine._drift_fixtures:build",
            "model": "mlp",
            "n_samples": 2048,
            "image_size": 8,
            "batch_size": 32,
            "device": "cpu",
        }
    )
    assert usable_cpus() >= 2, "the GIL pairs (the later windows) need two cores"
    p = probe(cfg, CPU, step_builder(cfg, 0, CPU))
    fast, slow = 32 * 0.5e-3, 32 * 1e-3
    assert p["load_windows"] >= 7  # the back-to-back windows and the pairs' one-thread windows
    assert p["load_fastest_wall_s"] < 1.3 * fast  # the fastest window saw the fast stretch ...
    assert 0.85 * slow <= p["load_wall_s"] <= 1.3 * slow  # ... and the figure is what most windows saw
    # the range reaches down to the fast stretch, as closely as the fastest window is held to it above (a CI's quiet
    # part read its low end at 17.8 ms, 1.11x the stretch's 16: the windows' own overhead, not a range that stopped short)
    assert p["load_wall_s"] / (1 + p["spread"]) < 1.3 * fast


def test_a_probe_that_cannot_fit_its_budget_is_a_quick_one_with_a_wider_range_not_none() -> None:
    """A budget far below the full probe's: the probe still comes back, says it is quick, and its range is at least
    QUICK_SPREAD; with a few seconds, a quick probe of this load (it mostly waits) passes batches through a worker
    too (processes and threads tie without it); without a budget, the full probe (with its hand-off passes)."""
    from engine.predict.probe import QUICK_SPREAD

    cfg = RunConfig.from_dict(
        {
            "workload": "bench.pipelines.storage:build",
            "model": "bench.pipelines.storage:model",
            "n_samples": 256,
            "batch_size": 32,
            "device": "cpu",
        }
    )
    quick = probe(cfg, CPU, step_builder(cfg, 0, CPU), budget_s=0.5)
    assert quick["quick"] and quick["spread"] >= QUICK_SPREAD and quick["load_windows"] >= 1
    assert set(quick["compute"]) == {"1", str(quick["default_threads"])}
    assert predict(_cfg("threads", 8, 1), quick).epoch_s > 0
    roomier = probe(cfg, CPU, step_builder(cfg, 0, CPU), budget_s=3.0)
    assert roomier["quick"] and roomier["handoff_s"] >= roomier["receive_s"] > 0
    assert predict(_cfg("processes", 8, 1), roomier).epoch_s > predict(_cfg("threads", 8, 1), roomier).epoch_s
    full = probe(cfg, CPU, step_builder(cfg, 0, CPU))
    assert not full["quick"] and full["load_windows"] > quick["load_windows"]
    assert full["handoff_s"] >= full["receive_s"] > 0  # a worker's batch pays at least the receiving side's share


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_probe_of_pinned_batches_measures_the_hand_off_through_forked_workers() -> None:
    """The probe's load pins its batches on CUDA, and its hand-off pass forks DataLoader workers after CUDA has
    started: a worker given a pinned batch died there ("CUDA error: initialization error") and took the probe,
    and so every prediction on a GPU box, with it."""
    cuda = torch.device("cuda")
    cfg = RunConfig.from_dict(
        {
            "workload": "tensor",
            "n_samples": 64,
            "image_size": 8,
            "width": 8,
            "batch_size": 8,
            "device": "cuda",
            "pin_memory": True,
        }
    )
    p = probe(cfg, cuda, step_builder(cfg, 0, cuda))
    assert p["handoff_s"] > 0 and p["receive_s"] > 0
