"""Loaders: every sample once per epoch, the same batches as sync, errors and timeouts reach the consumer,
and close() leaves no threads or processes behind. Real loaders over a tiny in-memory dataset.

    .venv/bin/python -m pytest tests/engine/test_loaders.py -q
"""

from __future__ import annotations

import inspect
import os
import re
import threading
import time

import psutil
import pytest
import torch
from _loader_fixtures import TinyDataset
from _mode_runs import our_children
from torch.utils.data import default_collate

from engine.config import ConfigError, RunConfig
from engine.loaders import LOADERS, LoaderTimeout, epoch_batches, loader_args, open_loader
from engine.loaders._base import PooledLoader
from engine.names import WORKER_LOADERS

CASES = [
    ("sync", 0),
    ("prefetch", 0),
    ("threads", 1),
    ("threads", 2),
    ("processes", 1),
    ("processes", 2),
    ("spdl", 1),
    ("spdl", 2),
]
IDS = [f"{k}-{w}" for k, w in CASES]
BACKGROUND = [c for c in CASES if c[0] != "sync"]  # loaders with a producer that can time out
N, BS, SEED = 37, 4, 7  # 37 is not a multiple of 4: the last batch is smaller


def make(kind: str, dataset: TinyDataset, workers: int = 0, device: str = "cpu", **extra):
    """The loader a run builds: open_loader over a RunConfig."""
    cfg = RunConfig(loader=kind, workers=workers, batch_size=BS, seed=SEED, n_samples=len(dataset), **extra)
    return open_loader(dataset, cfg, torch.device(device))


def ids_of(batches) -> list[list[int]]:
    return [x[:, 0, 0, 0].long().tolist() for x, _ in batches]


def planned(epoch: int, n: int = N) -> list[list[int]]:
    return [[i for _, i in b] for b in epoch_batches(n, BS, SEED, epoch)]


def leftovers(threads_before: set, deadline_s: float = 10.0):
    """Threads started and child processes alive since `threads_before`, after waiting up to deadline_s."""
    end = time.monotonic() + deadline_s
    while True:
        threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        kids = our_children()  # multiprocessing's helpers and the shared warm parent live on by design
        if (not threads and not kids) or time.monotonic() > end:
            return threads, kids
        time.sleep(0.05)


def test_epoch_batches_is_a_seeded_partition():
    b0 = epoch_batches(N, BS, SEED, 0)
    assert b0 == epoch_batches(N, BS, SEED, 0)
    assert sorted(i for b in b0 for _, i in b) == list(range(N))
    assert [len(b) for b in b0] == [4] * 9 + [1]
    assert {e for b in b0 for e, _ in b} == {0}
    assert planned(0) != planned(1)
    assert b0 != epoch_batches(N, BS, SEED + 1, 0)


@pytest.mark.parametrize(
    "kind,workers,extra",
    [(k, w, {}) for k, w in CASES] + [("processes", 2, {"persistent_workers": False})],
    ids=IDS + ["processes-2-nonpersistent"],
)
def test_every_sample_once_per_epoch_in_the_sync_batches(kind, workers, extra):
    ds = TinyDataset(N, jitter_s=0.002)  # uneven batch costs: parallel loaders must still deliver in order
    with make("sync", ds) as sync:
        reference = [ids_of(sync.epoch(e)) for e in range(2)]
    assert reference == [planned(0), planned(1)] and reference[0] != reference[1]
    with make(kind, ds, workers, **extra) as loader:
        assert loader.num_batches == 10
        for e in range(2):
            batches = list(loader.epoch(e))
            assert ids_of(batches) == reference[e]
            assert sorted(i for b in ids_of(batches) for i in b) == list(range(N))
            for x, y in batches:
                assert x.dtype == torch.float32 and x.shape[1:] == (3, 4, 4) and x.device.type == "cpu"
                assert y.dtype == torch.long and y.tolist() == [int(i) % 10 for i in x[:, 0, 0, 0].tolist()]


@pytest.mark.parametrize("kind,workers", CASES, ids=IDS)
def test_samples_are_produced_where_the_loader_says(kind, workers):
    with make(kind, TinyDataset(N, record=True), workers) as loader:
        xs = torch.cat([x for x, _ in loader.epoch(0)])
    pids = set(xs[:, 1, 0, 0].long().tolist())
    tids = set(xs[:, 2, 0, 0].long().tolist())
    here = threading.get_ident() % 2**20
    if kind == "processes":
        assert os.getpid() not in pids and 1 <= len(pids) <= workers
    else:
        assert pids == {os.getpid()}
        assert (tids == {here}) == (kind == "sync")
        if kind in ("threads", "spdl"):
            assert 1 <= len(tids) <= workers


@pytest.mark.parametrize("kind,workers", CASES, ids=IDS)
def test_worker_exception_reaches_the_consumer_with_its_message(kind, workers):
    before = set(threading.enumerate())
    with make(kind, TinyDataset(N, fail_at=5), workers) as loader:
        with pytest.raises(ValueError, match="tiny dataset refuses index 5 in epoch 0"):
            list(loader.epoch(0))
    assert leftovers(before) == ([], [])


@pytest.mark.parametrize("kind,workers", CASES, ids=IDS)
def test_close_leaves_no_threads_or_processes(kind, workers):
    before = set(threading.enumerate())
    loader = make(kind, TinyDataset(N), workers)
    assert len(list(loader.epoch(0))) == 10
    it = loader.epoch(1)
    next(it)  # an epoch in flight when close() comes
    pids = loader.worker_pids() if kind == "processes" else []
    assert len(pids) == (workers if kind == "processes" else 0)
    loader.close()
    threads, kids = leftovers(before)
    assert threads == [] and kids == []
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    with pytest.raises(RuntimeError, match="closed"):
        loader.epoch(2)


@pytest.mark.parametrize("kind,workers", CASES, ids=IDS)
def test_abandoned_epoch_then_next_epoch_is_complete(kind, workers):
    with make(kind, TinyDataset(N), workers) as loader:
        for _ in loader.epoch(0):
            break
        held = loader.epoch(1)  # abandoned while still referenced: the next epoch() must stop it
        next(held)
        assert ids_of(loader.epoch(2)) == planned(2)
        with pytest.raises(StopIteration):
            next(held)  # starting epoch 2 stopped it
        assert ids_of(loader.epoch(3)) == planned(3)


@pytest.mark.parametrize("kind,workers", BACKGROUND, ids=[f"{k}-{w}" for k, w in BACKGROUND])
def test_stuck_worker_raises_loader_timeout(kind, workers):
    # NOTE: the very first batch takes 3 s, three times the 1 s timeout: a thread's sleep cannot be cut short, so
    # closing a threads, prefetch or spdl loader waits it out; a longer sleep proves no more and costs each case that
    first = planned(0)[0][0]
    with make(kind, TinyDataset(N, sleep_at=first, sleep_s=3.0), workers, worker_timeout_s=1.0) as loader:
        with pytest.raises(LoaderTimeout, match=r"within 1 s \(worker_timeout_s\)") as err:
            list(loader.epoch(0))
    assert kind in str(err.value)


def test_spawned_workers_deliver_the_sync_batches():
    before = set(threading.enumerate())
    with make("processes", TinyDataset(N, record=True), 2, start_method="spawn") as loader:
        for e in range(2):
            batches = list(loader.epoch(e))
            assert ids_of(batches) == planned(e)
            pids = set(torch.cat([x for x, _ in batches])[:, 1, 0, 0].long().tolist())
            assert os.getpid() not in pids and pids <= set(loader.worker_pids())
    assert leftovers(before) == ([], [])


@pytest.mark.parametrize("kind,workers", CASES, ids=IDS)
def test_a_loader_built_without_a_config_gives_the_registry_loaders_batches(kind, workers):
    """Keyword arguments alone, as in a notebook (the rest at their defaults; collate as a callable): the batches,
    samples and labels both, are those of the loader open_loader builds from a RunConfig with the same seed."""
    ds = TinyDataset(N)
    with make(kind, ds, workers) as registry:
        expected = [list(registry.epoch(e)) for e in range(2)]
    knobs = {"workers": workers} if LOADERS[kind].uses_workers else {}
    with LOADERS[kind](ds, device="cpu", batch_size=BS, seed=SEED, collate=default_collate, **knobs) as by_hand:
        got = [list(by_hand.epoch(e)) for e in range(2)]
    assert [ids_of(batches) for batches in got] == [planned(0), planned(1)]
    for mine, theirs in zip(got, expected, strict=True):
        assert len(mine) == len(theirs)
        assert all(torch.equal(x, x2) and torch.equal(y, y2) for (x, y), (x2, y2) in zip(mine, theirs))


def test_open_loader_passes_each_loader_the_knobs_it_takes_defaulting_as_the_config():
    """The constructors' defaults are RunConfig's (but workers: a loader built by hand gets a pool of 2), and the
    translation gives each loader exactly its keyword arguments: workers only to the loaders that need them."""
    cfg = RunConfig()
    for kind, cls in LOADERS.items():
        params = {n: p.default for n, p in inspect.signature(cls).parameters.items() if p.kind is p.KEYWORD_ONLY}
        args = loader_args(cls, cfg)
        assert set(args) == set(params), kind
        assert ("workers" in args) == cls.uses_workers, kind
        assert {n: v for n, v in args.items() if n != "workers"} == {
            n: v for n, v in params.items() if n != "workers"
        }, kind
    assert loader_args(LOADERS["processes"], cfg.replace(worker_timeout_s=7.5))["timeout_s"] == 7.5


@pytest.mark.parametrize("kind", WORKER_LOADERS)
def test_the_workers_rule_is_one_line_naming_workers_from_the_config_and_the_constructor(kind):
    assert LOADERS[kind].uses_workers and issubclass(LOADERS[kind], PooledLoader)
    with pytest.raises(ConfigError) as from_config:
        RunConfig.from_dict({"loader": kind, "workers": 0})
    with pytest.raises(ConfigError) as from_constructor:
        LOADERS[kind](TinyDataset(N), device="cpu", workers=0)
    assert from_config.value.field == from_constructor.value.field == "workers"
    assert str(from_config.value) == str(from_constructor.value)
    assert "\n" not in str(from_config.value) and f"loader '{kind}' needs workers >= 1" in str(from_config.value)


def test_only_the_worker_loaders_use_workers():
    assert {n for n, cls in LOADERS.items() if cls.uses_workers} == set(WORKER_LOADERS)
    assert {n for n, cls in LOADERS.items() if issubclass(cls, PooledLoader)} == set(WORKER_LOADERS)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_prefetch_hands_out_batches_already_on_the_gpu():
    with make("prefetch", TinyDataset(N), device="cuda") as loader:
        batches = list(loader.epoch(0))
    assert all(x.is_cuda and y.is_cuda for x, y in batches)
    assert ids_of([(x.cpu(), y) for x, y in batches]) == planned(0)


@pytest.mark.parametrize("in_thread", [False, True], ids=["main-thread", "other-thread"])
@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
def test_killed_worker_fails_the_epoch_within_seconds_naming_it(in_thread, persistent):
    """SIGKILL of one worker with worker_timeout_s=120: the epoch fails naming the worker's pid and the signal
    long before the timeout. The code's bound is POLL_S (0.5 s) + 1 s; the goal (issue 14) is 5 s.
    In another thread DataLoader's SIGCHLD handler cannot help: only the loader's own polling finds it."""
    before = set(threading.enumerate())
    outcome: dict = {}
    with make(
        "processes", TinyDataset(N, jitter_s=0.05), 2, worker_timeout_s=120.0, persistent_workers=persistent
    ) as loader:

        def consume() -> None:
            it = loader.epoch(0)
            next(it)
            victim = loader.worker_pids()[0]
            os.kill(victim, 9)
            outcome["victim"], outcome["t0"] = victim, time.monotonic()
            try:
                for _ in it:
                    pass
            except RuntimeError as err:
                outcome["error"] = str(err)
            outcome["seconds"] = time.monotonic() - outcome["t0"]

        if in_thread:
            t = threading.Thread(target=consume)
            t.start()
            t.join(60)
            assert not t.is_alive(), "the epoch never failed"
        else:
            consume()
    assert "error" in outcome, f"the epoch finished although worker {outcome['victim']} was killed"
    assert re.search(rf"worker.*pid.*\b{outcome['victim']}\b.*killed by signal", outcome["error"]), outcome
    assert outcome["seconds"] < 5, f"a dead worker was found only after {outcome['seconds']:.1f} s"
    assert leftovers(before) == ([], [])


def test_a_worker_killed_while_the_epochs_iterator_starts_is_named_though_the_iterator_never_finished_building():
    """CI: a worker SIGKILLed while iter() started the workers interrupted the iterator's __init__ with a KeyError
    naming multiprocessing's QueueFeederThread; neither the loader nor the DataLoader held the iterator yet, so the
    run failed with that KeyError. The dead worker is found through the frames of the iterator being built."""
    import multiprocessing  # noqa: PLC0415
    import signal  # noqa: PLC0415

    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
    worker.start()
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(5)

    class Building:  # stands for DataLoader's _MultiProcessingDataLoaderIter, interrupted in its __init__
        def __init__(self) -> None:
            self._workers, self._index_queues = [worker], []
            raise KeyError("<Thread(QueueFeederThread, started daemon)>")

    try:
        Building()
    except KeyError as err:
        caught = err
    with make("processes", TinyDataset(N), 1) as loader:
        named = loader._worker_death(caught)
    assert named is not None and re.search(rf"worker 0 \(pid {worker.pid}\) was killed by signal 9", str(named))
