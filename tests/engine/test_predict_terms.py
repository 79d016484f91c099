"""engine.predict.model term by term, on hand-computed cases from its docstring (one per term: waves (of batches,
or of samples), the GIL split, the time-sliced step, spin), and what surrounds the model: ranges,
residuals of earlier runs (prior+runs), settings it cannot tell apart shown once, and a probe cache keyed on the
thread settings and the affinity."""

from __future__ import annotations

import json
from dataclasses import replace
import subprocess
import sys

import pandas as pd
import pytest

from engine.cli._format import predicted_table
from engine.predict.learned import earlier_runs, learned_residuals
from engine.predict import LOADER_SHAPES, MODES, adjusted, apart, predict, residuals
from engine.config import RunConfig
from engine.predict.forecast import rows
from engine.measure.host import fingerprint
from engine.paths import ROOT
from engine.run.runner import launch
from engine.store import recent_done_runs


def _probe(
    load_wall: float,
    load_cpu: float,
    one: tuple[float, float],
    many: tuple[float, float] | None = None,
    threads: int = 1,
    cores: float = 16.0,
    **extra,
) -> dict:
    """8 batches of 64; compute '1' (wall, cpu) and, with threads > 1, the default threads' (wall, cpu)."""
    compute = {"1": {"wall_s": one[0], "cpu_s": one[1]}}
    if many:
        compute[str(threads)] = {"wall_s": many[0], "cpu_s": many[1]}
    return {
        "batch_size": 64,
        "n_samples": 512,
        "cores": cores,
        "default_threads": threads,
        "device": "cpu",
        "load_wall_s": load_wall,
        "load_cpu_s": load_cpu,
        "gil_share": 0.0,
        "compute": compute,
        **extra,
    }


def _cfg(loader: str, workers: int = 0, threads: int = 1, **fields) -> RunConfig:
    return RunConfig(device="cpu", n_samples=512, **fields).replace(loader=loader, workers=workers, threads=threads)


def test_waves_four_workers_make_eight_batches_of_latency_in_two_waves() -> None:
    # 100 ms of latency a batch, 4 workers: 2 waves of 4 batches, each wave 4 x 100 / 4 ms, then one 1 ms step
    got = predict(_cfg("processes", 4), _probe(0.1, 0.0, (0.001, 0.001)))
    assert got.limit == "data-bound" and got.epoch_s == pytest.approx(2 * 4 * 0.025 + 0.001)


def test_threads_past_the_batches_idle_and_producers_of_samples_overlap_waits_at_a_samples_grain(monkeypatch) -> None:
    # 320 ms of waiting a batch (5 ms a sample), a little GIL-held work (1 ms a batch): 8 batches. threads make whole
    # batches: 8 and 16 threads are both one wave of 320 + 1 ms (the others' GIL turns run in its wait), then the
    # last step; the 8 threads with no batch to make take no core (9 runnable on 16 cores: no step is time-sliced)
    probe = _probe(0.321, 0.001, (0.001, 0.001), cores=16.0, gil_share=1.0)
    eight, sixteen = predict(_cfg("threads", 8), probe), predict(_cfg("threads", 16), probe)
    assert sixteen.epoch_s == pytest.approx(eight.epoch_s) and eight.terms["data-bound"] == pytest.approx(0.321 + 0.001)
    # a shape whose producers fetch samples: 32 of them make 512 samples in 16 waves of 5 ms + 1/64 ms, then the
    # last step (time-sliced a little: 33 runnable on 16 cores)
    monkeypatch.setitem(LOADER_SHAPES, "spdl", replace(LOADER_SHAPES["spdl"], per_sample=True))
    got = predict(_cfg("spdl", 32), probe)
    assert got.terms["data-bound"] == pytest.approx(16 * 0.321 / 64 + 0.001, rel=0.01)
    assert got.epoch_s < eight.epoch_s / 2


def test_gil_split_two_threads_share_only_the_work_that_releases_the_gil() -> None:
    # 100 ms of CPU a batch, half of it GIL-held, 2 threads: (0.5 x 100) / 2 + 0.5 x 100 = 75 ms a batch,
    # 4 waves of 2 batches = 8 x 75 ms, then a 1 ms step
    got = predict(_cfg("threads", 2), _probe(0.1, 0.1, (0.001, 0.001), gil_share=0.5))
    assert got.limit == "data-bound" and got.epoch_s == pytest.approx(8 * 0.075 + 0.001)
    # processes do not share a GIL: (100 ms) / 2 a batch
    procs = predict(_cfg("processes", 2), _probe(0.1, 0.1, (0.001, 0.001), gil_share=0.5))
    assert procs.epoch_s == pytest.approx(8 * 0.05 + 0.001)


def test_time_sliced_step_beside_two_workers_on_two_cores() -> None:
    # 1 intra-op thread + 2 workers = 3 runnable on 2 cores (share 1.5); a 40 ms step beside 40 ms of decoding a
    # batch split over 2 workers (20 ms each): 40 + 20 x (1.5 - 1) = 50 ms; compute: first batch 40 ms + 7 x 50 ms,
    # and the last step's 40 ms alone (nothing is left to make beside it)
    got = predict(_cfg("processes", 2), _probe(0.04, 0.04, (0.04, 0.04), cores=2.0))
    assert got.oversubscribed and got.limit == "compute-bound"
    assert got.epoch_s == pytest.approx(0.04 + 7 * 0.05 + 0.04)


def test_time_sliced_team_loses_its_speed_up_only_while_the_producer_works_beside_it() -> None:
    # 2 intra-op threads: 40 ms a step on 1, 20 ms on 2; prefetch's producer works 10 ms a batch beside it on 2 cores
    # (3 runnable, share 1.5): for 10 x 1.5 = 15 ms the team runs time-sliced at one thread's speed (a quarter of its
    # work), the other three quarters at its own: 15 + 0.75 x 20 = 30 ms a step (not 40 + 10 x 0.5 = 45 ms);
    # compute: the first batch's 10 ms + 7 x 30 + the last step's 20 ms, alone (nothing is left to make beside it)
    probe = _probe(0.01, 0.01, (0.04, 0.04), (0.02, 0.04), threads=2, cores=2.0)
    got = predict(_cfg("prefetch", threads=2), probe)
    assert got.limit == "compute-bound"
    assert got.epoch_s == pytest.approx(0.01 + 7 * 0.03 + 0.02)


def test_a_pool_the_probe_saw_idle_adds_no_thread_and_sync_runs_its_pool_between_steps() -> None:
    # OpenBLAS's 2 threads loaded, but the load's CPU equals its wall (numpy loads the pool; a small product never
    # wakes it): processes, 1 worker, 1 thread is 2 runnable on 2 cores, not 3; with the pool busy (CPU twice the
    # wall, as the spectrogram's 227 ms in 114 ms) it is 3
    pools = {"pools": [{"api": "openblas", "lib": "libopenblas", "threads": 2}], "pool_spin_s": 0.0}
    idle = _probe(0.1, 0.1, (0.04, 0.04), cores=2.0, load_median_wall_s=0.1, **pools)
    busy = {**idle, "load_median_wall_s": 0.05}
    assert predict(_cfg("processes", 1), idle).runnable == 2
    assert predict(_cfg("processes", 1), busy).runnable == 3
    # sync: the busy pool loads on its 2 threads (100 ms of CPU in 50 ms) while the step waits, so the 2-thread step
    # is never time-sliced by it: 8 x (50 + 20) ms
    sync = _probe(0.1, 0.1, (0.04, 0.04), (0.02, 0.04), threads=2, cores=2.0, load_median_wall_s=0.05, **pools)
    assert predict(_cfg("sync", threads=2), sync).epoch_s == pytest.approx(8 * (0.05 + 0.02))


def test_worker_pools_past_the_cores_reach_the_range_to_the_measured_collapse_and_teams_that_fit_leave_it() -> None:
    # sensors on 2 cores: a 2-thread OpenBLAS that worked (200 ms of CPU in 100 ms); two workers put 4 pool threads
    # on 2 cores, and their load collapses by chance, epoch by epoch (2x to 22x, bench/RESULTS.md)
    pools = {"pools": [{"api": "openblas", "lib": "libopenblas", "threads": 2}], "pool_spin_s": 0.0}
    calm = _probe(0.2, 0.2, (0.002, 0.002), cores=2.0, load_median_wall_s=0.1, **pools)
    by = {c: {**calm, "pool_collapse": c} for c in (1.0, 2.0, 5.0, 10.0)}
    two = [predict(_cfg("processes", 2), by[c]) for c in sorted(by)]
    assert len({p.epoch_s for p in two}) == 1  # the figure is the epoch without it: no epoch is sure to collapse
    his = [p.hi for p in two]
    assert his == sorted(his) and his[-1] > 3 * his[0]  # the range reaches further as the collapse grows
    # at its high end each batch's CPU has grown by the collapse: 8 batches x 200 ms x 5 over 2 cores, at the least
    assert two[2].hi >= 8 * 0.2 * 5 / 2 and two[2].lo == two[0].lo
    for cfg, cores in (
        (_cfg("processes", 1), 2.0),  # one worker's 2 pool threads fit 2 cores
        (_cfg("processes", 2, transform_threads=1), 2.0),  # pools capped at one thread: no team to collapse
        (_cfg("threads", 2), 2.0),  # threads share their process's one pool
        (_cfg("processes", 2), 8.0),  # 4 pool threads fit 8 cores
    ):
        assert predict(cfg, by[10.0], cores) == predict(cfg, by[1.0], cores), cfg
    # a probe that did not measure it (None: its pools fit, or none worked) predicts as no collapse
    assert predict(_cfg("processes", 2), {**calm, "pool_collapse": None}) == two[0]


def test_spin_after_the_step_is_charged_to_the_cores_when_threads_outnumber_them() -> None:
    # 2 intra-op threads (no speed-up: 10 ms on 1 and 2, 20 ms CPU on 2) + 4 workers on 2 cores: the cores carry
    # 100 ms of loading + 20 ms of the team's CPU + 50 ms of its spin after each step = 170 ms a batch, over 2 cores
    probe = _probe(0.1, 0.1, (0.01, 0.01), (0.01, 0.02), threads=2, cores=2.0, spin_after_step_s=0.05)
    got = predict(_cfg("processes", 4, threads=2), probe)
    assert got.limit == "cpu-bound" and got.epoch_s == pytest.approx(8 * 0.17 / 2)
    assert predict(_cfg("processes", 4, threads=2), {**probe, "spin_after_step_s": 0.0}).epoch_s < got.epoch_s


def test_a_step_that_threads_slow_is_never_predicted_slower_on_more_cores() -> None:
    # the case: 4 threads, 0.44 s a step on 1 thread and 0.60 s on 2; it read 9.62, 10.47, 10.90 s on 2-4
    probe = _probe(0.01, 0.01, (0.44, 0.44), (0.60, 1.2), threads=2, cores=2.0)
    epochs = [predict(_cfg("prefetch", threads=4), probe, cores).epoch_s for cores in (2, 3, 4, 8)]
    assert epochs == sorted(epochs, reverse=True)


def test_every_loader_the_lab_has_is_modelled_or_says_it_is_not() -> None:
    from engine.loaders import LOADERS  # noqa: PLC0415 - the registry, to hold the model's table against it

    probe = _probe(0.01, 0.01, (0.01, 0.01))
    for name in LOADERS:
        got = predict(_cfg(name, 0 if name in ("sync", "prefetch") else 2), probe)
        assert (got is not None) == (name in LOADER_SHAPES), name


def test_a_range_holds_its_prediction_and_alike_settings_are_never_apart() -> None:
    probe = _probe(0.05, 0.02, (0.01, 0.01), spread=0.2)
    a, b = predict(_cfg("prefetch"), probe), predict(_cfg("prefetch", prefetch_depth=8), probe)
    assert a.lo < a.epoch_s < a.hi and not apart(a, b)
    far = predict(_cfg("processes", 8), probe)
    assert apart(a, far)  # 8 workers overlap the latency: far outside a 20 % spread


def test_residuals_of_other_settings_scale_a_prediction_under_the_same_limit() -> None:
    probe = _probe(0.05, 0.02, (0.01, 0.01))
    seen = [_cfg("processes", 1), _cfg("processes", 2)]
    # every earlier run measured 1.3x its prediction: a third setting with that limit is expected 1.3x too
    found = residuals([(c, 1.3 * predict(c, probe).epoch_s) for c in seen], probe)
    held_out = predict(_cfg("processes", 4), probe)
    got = adjusted(held_out, found)
    assert got.source == "prior+runs" and got.epoch_s == pytest.approx(1.3 * held_out.epoch_s)
    assert got.lo <= got.epoch_s <= got.hi
    assert adjusted(held_out, {}) == held_out  # nothing ran: the probe alone


def test_predict_shows_settings_the_model_cannot_tell_apart_once() -> None:
    probe = _probe(0.05, 0.02, (0.01, 0.01), cores=2.0)
    table = pd.DataFrame(
        rows([_cfg("prefetch", prefetch_depth=2), _cfg("prefetch", prefetch_depth=8), _cfg("processes", 2)], probe)
    )
    assert table["same_as"].notna().sum() == 1  # depth 8 is depth 2's twin
    text = predicted_table(table)
    lines = [line for line in text.splitlines() if "prefetch" in line]
    assert len(lines) == 1 and "depth 8" in lines[0]  # one line, naming its twin
    assert "cannot tell them apart" in text


def _key_in_child(env: dict[str, str], cpus: str) -> str:
    code = (
        "import os, sys; from pathlib import Path\n"
        f"{'os.sched_setaffinity(0, {0})' if cpus == 'one' else ''}\n"
        "from engine.predict import probe_path; from engine.config import RunConfig\n"
        "print(probe_path(Path('c'), RunConfig(device='cpu'), 'm', 'cpu').name)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_probe_cache_is_keyed_on_thread_settings_and_affinity() -> None:
    import os  # noqa: PLC0415

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    plain = _key_in_child(env, "all")
    assert _key_in_child(env, "all") == plain  # the same settings find the same probe
    assert _key_in_child({**env, "OMP_NUM_THREADS": "1"}, "all") != plain
    if len(os.sched_getaffinity(0)) > 1 and (os.cpu_count() or 1) == len(os.sched_getaffinity(0)):
        assert _key_in_child(env, "one") != plain


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


@pytest.mark.usefixtures("warm_runs")  # the runs' figures are the point, not how their process starts
def test_earlier_done_runs_of_the_pipeline_are_its_points_and_no_other_pipelines(tmp_path) -> None:
    db = tmp_path / "s.duckdb"
    for loader in ("sync", "prefetch"):
        assert launch(RunConfig.from_dict({**TINY, "loader": loader}), db=db).status == "done"
    machine = fingerprint()["machine"]
    runs = recent_done_runs(MODES, db)
    mine = earlier_runs(RunConfig.from_dict(TINY), runs, machine)
    assert sorted(c.loader for c, _ in mine) == ["prefetch", "sync"] and all(s > 0 for _, s in mine)
    assert earlier_runs(RunConfig.from_dict({**TINY, "latency_ms": 2.0}), runs, machine) == []  # another pipeline
    assert earlier_runs(RunConfig.from_dict(TINY), runs, "another host") == []
    probe = json.loads(next((tmp_path / "calibrations").glob("probe-*.json")).read_text())
    found, n = learned_residuals(RunConfig.from_dict(TINY), runs, probe)
    assert n == 2 and sum(len(r) for r in found.values()) == 2
    no_store = recent_done_runs(MODES, tmp_path / "none.duckdb")
    assert earlier_runs(RunConfig.from_dict(TINY), no_store, machine) == []  # no store: none
