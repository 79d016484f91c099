"""engine/measure/pools.py through real loaders and a real run: the BLAS pool numpy brings is seen where items load,
transform_threads caps it there (each worker of `processes`, the producer threads, sync's training thread) and close()
gives the process its pools back; a run stores the pools it loaded with and the threads they add.

    .venv/bin/python -m pytest tests/engine/test_pools.py -q
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from engine.config import RunConfig
from engine.loaders import open_loader, seen_pools
from engine.measure.pools import hidden_pools, idle_pools_add_none, pool_fix, pools_record
from engine.run.runner import launch
from engine.store import get_run
from engine.workloads import build_dataset

SPECTRO = {
    "workload": "bench.pipelines.spectrogram:build",
    "model": "bench.pipelines.spectrogram:model",
    "n_samples": 16,
    "batch_size": 8,
    "device": "cpu",
    "threads": 1,
}
PLACE = {"sync": "training", "prefetch": "producer", "threads": "producer", "processes": "worker"}

np.ones(1)  # numpy's BLAS is loaded: the pools below are seen
# NOTE: serial: run one at a time before the parallel part, as pytest-xdist's workers cap OpenBLAS at 1 thread
# (tests/conftest.py), where every test here would skip
pytestmark = [
    pytest.mark.serial,
    pytest.mark.usefixtures("warm_runs"),  # runs forked warm: these check what a run stores, not how it starts
    pytest.mark.skipif(
        not any(p["threads"] > 1 for p in hidden_pools()),
        reason="numpy's BLAS runs one thread here (one core?): nothing to cap",
    ),
]
TOKENS = {
    "workload": "bench.pipelines.tokenizer:build",
    "model": "bench.pipelines.tokenizer:model",
    "n_samples": 64,
    "batch_size": 16,
    "device": "cpu",
    "threads": 1,
}


def _load(loader: str, transform_threads: int) -> list[dict]:
    cfg = RunConfig.from_dict(
        {
            **SPECTRO,
            "loader": loader,
            "workers": 2 if loader in ("threads", "processes") else 0,
            "transform_threads": transform_threads,
        }
    )
    with open_loader(build_dataset(cfg), cfg, torch.device("cpu")) as it:
        assert len(list(it.epoch(1))) == 2
    return seen_pools()[PLACE[loader]]


@pytest.mark.parametrize("loader", ["sync", "prefetch", "threads", "processes"])
def test_transform_threads_caps_the_pools_where_items_load_and_close_gives_them_back(loader):
    before = [p["threads"] for p in hidden_pools()]
    assert max(p["threads"] for p in _load(loader, 0)) > 1  # auto: as the library set them
    assert [p["threads"] for p in _load(loader, 1)] == [1] * len(before)
    assert [p["threads"] for p in hidden_pools()] == before  # the test process has its pools back


def test_the_record_counts_a_pool_per_worker_process_and_once_per_process_of_threads():
    seen = {
        "worker": [{"api": "openblas", "lib": "libopenblas", "threads": 4}],
        "producer": [{"api": "openblas", "lib": "libopenblas", "threads": 4}],
    }
    assert pools_record(seen, "processes", 3)["extra_threads"] == 9  # three processes, three pools
    assert pools_record(seen, "threads", 3)["extra_threads"] == 3  # one process: one pool, whatever calls it
    assert pools_record(seen, "sync", 0)["extra_threads"] == 0  # sync loads in the training thread: none seen there
    assert json.loads(pools_record(seen, "sync", 0)["thread_pools"]) == seen
    assert (
        pool_fix(pools_record(seen, "processes", 3)["thread_pools"], "processes")
        == "openblas (libopenblas) 4 threads in each loader worker: set transform_threads=1"
    )
    with threadpool_limits(limits=1):
        assert pool_fix(json.dumps({"worker": hidden_pools()}), "processes") is None  # one thread: nothing hidden


def test_pools_the_probe_saw_idle_add_no_threads_to_the_record_and_working_ones_keep_theirs():
    seen = {"worker": [{"api": "openblas", "lib": "libopenblas", "threads": 2}]}
    record = pools_record(seen, "processes", 2)
    loaded = [{"api": "openblas", "lib": "libopenblas", "threads": 2}]
    # a pure-Python transform: numpy's OpenBLAS loaded, idle through the probe's load
    assert idle_pools_add_none(record, {"pools": [], "pools_loaded": loaded})["extra_threads"] == 0
    # a transform that ran it, or no probe at all: the pools count as seen
    assert idle_pools_add_none(record, {"pools": loaded, "pools_loaded": loaded})["extra_threads"] == 2
    assert idle_pools_add_none(record, None)["extra_threads"] == 2 == record["extra_threads"]
    assert idle_pools_add_none(record, {"pools": []})["thread_pools"] == record["thread_pools"]  # still listed


def test_a_run_stores_the_pools_its_workers_loaded_with_and_the_threads_they_add(tmp_path):
    db = tmp_path / "s.duckdb"
    fields = {**SPECTRO, "loader": "processes", "workers": 1, "epochs": 2, "bound": False, "sample_hz": 0.0}
    auto = launch(RunConfig.from_dict(fields), db=db)
    capped = launch(RunConfig.from_dict({**fields, "transform_threads": 1}), db=db)
    rows = [get_run(r.run_id, db=db) for r in (auto, capped)]
    assert [r["status"] for r in rows] == ["done", "done"], [r["error"] for r in rows]
    workers = [json.loads(r["thread_pools"])["worker"] for r in rows]
    assert max(p["threads"] for p in workers[0]) > 1 and rows[0]["extra_threads"] >= 1
    assert all(p["threads"] == 1 for p in workers[1]) and rows[1]["extra_threads"] == 0
    assert rows[1]["transform_threads"] == 1


def test_a_pipelines_first_run_counts_no_thread_of_a_pool_its_items_never_call(tmp_path):
    """A pure-Python tokenizer: numpy's OpenBLAS is loaded in the loader worker (with torch) and never called. The
    pipeline's first run has no probe before it; the one it takes after the run sees the pool idle, so the run's
    record lists the pool and adds none of its threads to the runnable count, and the verdict is no hidden-threads."""
    db = tmp_path / "s.duckdb"
    fields = {**TOKENS, "loader": "processes", "workers": 1, "epochs": 2, "bound": True, "sample_hz": 0.0}
    result = launch(RunConfig.from_dict(fields), db=db)
    row = get_run(result.run_id, db=db)
    assert row["status"] == "done", row["error"]
    assert max(p["threads"] for p in json.loads(row["thread_pools"])["worker"]) > 1  # loaded, and sized past 1
    assert row["extra_threads"] == 0 and row["verdict"] != "hidden-threads"
    assert row["predicted_from"] == "own"  # the first run of the pipeline: its probe came after it


def _sensor_batches(n: int = 2) -> tuple[object, list[list[int]]]:
    """bench/pipelines/sensors.py's items (a covariance on numpy's BLAS, then LAPACK) and n batches of 16 keys."""
    from bench.pipelines.sensors import build

    return build(n_samples=16 * n), [list(range(i * 16, (i + 1) * 16)) for i in range(n)]


def test_two_workers_loading_on_pools_that_outnumber_the_cores_are_measured_and_a_dead_child_is_unmeasured():
    """engine/predict/_probe_pools.py on a real pool: two forked children load the batches at once, each on its own
    OpenBLAS, and the pair's slowdown past sharing the cores is a figure (>= 1, never past its deadline) the model
    reaches processes' ranges to; a child whose fetch fails reports nothing, and the pair is unmeasured (None), at
    once, not at the deadline. NOTE: how far a pair collapses is a figure of the machine's scheduler and of chance
    (bench/RESULTS.md), not a property to assert here."""
    import time

    from engine.predict._probe_pools import DEADLINE, pool_collapse

    dataset, keys = _sensor_batches()

    def fetch(batch: list[int]) -> list:
        return [dataset[i] for i in batch]

    fetch(keys[0])  # the pools start
    t0, c0 = time.perf_counter(), time.process_time()
    for k in keys:
        fetch(k)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    collapse = pool_collapse(fetch, keys, cpu, wall, float(len(os.sched_getaffinity(0))))
    assert collapse is not None and 1.0 <= collapse <= DEADLINE

    def fails(batch: list[int]) -> list:
        raise RuntimeError("a dataset that breaks in the worker")

    t0 = time.perf_counter()
    assert pool_collapse(fails, keys, cpu, wall, 2.0) is None
    assert time.perf_counter() - t0 < 5.0  # the children's pipe closed: no wait for the deadline
