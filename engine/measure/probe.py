"""The probe behind engine/advice/predict.py: what one sample, one batch and one step cost on this machine, apart from
any loader setting, measured in a few seconds.

    load     the dataset's fetch + collate (+ the copy to the device) of whole batches on one thread, as a loader
             worker runs them (one intra-op thread): wall and CPU seconds per batch, the fastest of a few windows.
             Wall minus CPU is latency (sleeps, I/O), which any number of workers overlap; CPU is work that needs
             a core.
    gil      the same batches on two threads at once: the extra wall time over one thread, as a share of the CPU
             work, is the share that holds the GIL (0: decoding in C, sleeps; 1: pure Python) and so cannot run
             on two threads at once, however many threads a `threads` loader has.
    compute  the epoch's step replayed on cached batches at one intra-op thread and at torch's default: wall and
             CPU seconds per step. Two points fit Amdahl's law for any thread count between.

The probe does not depend on the loader, its workers or its threads, so one probe predicts them all
(engine/advice/predict.py). It is cached per workload, model, batch size and device on this host
(`<store dir>/calibrations/probe-*.json`): a later run of the same pipeline, in any sweep, is predicted
before it runs.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from engine.loaders import LOADERS, epoch_batches, stream_fetch, to_device
from engine.measure._passes import compute_pass, time_again
from engine.measure.capacity import usable_cpus
from engine.workloads import build_dataset, is_stream

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["PROBE_KEYS", "probe"]

# what a probe depends on: the dataset, the model and its step, the batch and where it runs (not the loader)
PROBE_KEYS = ("workload", "n_samples", "image_size", "num_classes", "work_us", "latency_ms", "folder", "seed",
              "model", "width", "depth", "optimizer", "lr", "batch_size", "device", "collate", "loss")
_LOAD_S = 0.4      # wall seconds of batches each load measurement aims at (at least 2 batches)
_STEPS = 16        # steps replayed per thread count
_TOO_BUSY = 1.5   # core sharing (see _core_sharing) above which the GIL share is not told apart from it
_SPIN_WINDOW_S = 0.04  # idle after a parallel op: longer than OpenMP's spin before its threads sleep
_WARM_BATCHES = 1  # untimed: lazy first use of the dataset (file cache, decoder set-up)
# NOTE: each load figure is the fastest of a few windows (_fastest), as the bound's passes keep their fastest: a window
# is a fraction of a second, and a hiccup of the machine inside it (seen: 68 ms a jpeg batch against 41 ms) would
# mispredict every setting of the pipeline, since they all come from this one probe
_REPEATS = 3


def probe(cfg: RunConfig, device: torch.device, steps: Callable[[Any], list[Callable]]) -> dict[str, Any]:
    """Measure the probe for cfg's pipeline on `device`; steps(dataset) -> [the mode's train step] (one)."""
    dataset = build_dataset(cfg)
    with LOADERS["sync"](dataset, cfg.replace(loader="sync", workers=0), device) as loader:
        # a stream: batches of the probe's own pass over it (a fresh iter(): the run's epochs are not consumed)
        keys, fetch = stream_fetch(loader) if is_stream(dataset) else \
            (epoch_batches(len(dataset), cfg.batch_size, cfg.seed, 1), loader.fetch)
        load = _load(fetch, keys, device, cores := usable_cpus())  # the loaders' fetch: collate, pinning
    default = torch.get_num_threads()
    compute = {}
    fraction = min(1.0, _STEPS / len(keys))  # a few steps are enough for a per-step cost
    for threads in sorted({1, default}):
        with _threads(threads):
            c = compute_pass(cfg, device, steps, fraction)
        compute[str(threads)] = {"wall_s": c["seconds"] / c["batches"], "cpu_s": c["cpu_s"] / c["batches"]}
    spin = _spin_after_step() if device.type == "cpu" and default > 1 else 0.0
    n_samples = (dataset.total or cfg.n_samples) if is_stream(dataset) else len(dataset)
    return {"batch_size": cfg.batch_size, "n_samples": n_samples, "batches": len(keys), "cores": cores,
            "default_threads": default, "device": device.type, **load, "compute": compute, "spin_after_step_s": spin,
            "taken_at": time.time()}


def _spin_after_step() -> float:
    """CPU-seconds the intra-op threads burn after a parallel op ends, while the main thread waits (for the next
    batch): OpenMP's workers spin before they sleep. Idle cores absorb it; a loader worker that wants the core
    pays it (the processes loader, 2 workers beside 2 intra-op threads: 0.147 s a jpeg epoch against 0.112 s).
    The median of a few tries: a parallel matmul, then an idle window."""
    a = torch.randn(256, 256)
    tries = []
    for _ in range(3):
        torch.mm(a, a)
        cpu0, main0 = time.process_time(), time.thread_time()
        time.sleep(_SPIN_WINDOW_S)
        tries.append(max(0.0, (time.process_time() - cpu0) - (time.thread_time() - main0)))
    return sorted(tries)[len(tries) // 2]


def _load(fetch: Callable, keys: list, device: torch.device, cores: float) -> dict[str, Any]:
    """Per batch: wall and CPU seconds of fetch + collate (+ copy) on one thread, and the GIL share (None on one
    core: two threads would wait for the core, not the GIL)."""
    def one(batch_keys: list) -> None:
        to_device(fetch(batch_keys), device)

    with _threads(1):
        for k in keys[:_WARM_BATCHES]:
            one(k)
        t0 = time.perf_counter()
        one(keys[_WARM_BATCHES % len(keys)])
        first = time.perf_counter() - t0
        n = max(2, min(len(keys), math.ceil(_LOAD_S / max(first, 1e-4))))
        batch = [keys[i % len(keys)] for i in range(n)]
        wall, cpu = _fastest(lambda: _one_thread(one, batch))
        wall, cpu = wall / n, cpu / n
        two = _fastest(lambda: (_two_threads(one, batch),))[0] / n if cores >= 2 else None
        shared = _core_sharing(cpu * n) if two is not None and cpu > 0 else 1.0
    # the second thread's extra wall, past what sharing the cores now costs any two threads, is the GIL-held work
    # it had to wait for; as a share of the CPU work
    # (None where it cannot tell: one core, or a machine so busy that two threads get about one core between them)
    gil = None if two is None or shared > _TOO_BUSY else \
        min(1.0, max(0.0, (two - wall - cpu * (shared - 1)) / cpu)) if cpu > 0 else 0.0
    return {"load_wall_s": wall, "load_cpu_s": min(cpu, wall), "gil_share": gil, "core_sharing": shared}


def _core_sharing(seconds: float) -> float:
    """How much slower two threads of GIL-free CPU work run at once than one alone, now: 1 on two idle cores,
    up to 2 on a machine whose other processes leave one. Hashing a large buffer releases the GIL.

    NOTE: without it, a busy machine's wait for a core read as the GIL (0.98 for GIL-free work under load)."""
    data = bytes(1 << 20)
    t0 = time.perf_counter()
    hashlib.sha256(data).digest()
    rounds = max(2, int(min(seconds, _LOAD_S / 2) / max(time.perf_counter() - t0, 1e-6)))

    def work(_: object = None) -> None:
        for _ in range(rounds):
            hashlib.sha256(data).digest()

    t0 = time.perf_counter()
    work()
    alone = time.perf_counter() - t0
    return max(1.0, _two_threads(work, [None]) / alone) if alone > 0 else 1.0


def _fastest(measure: Callable[[], tuple[float, ...]]) -> tuple[float, ...]:
    """The fastest (by its first figure, wall seconds) of the measurements time_again asks for, while they add up
    to under _REPEATS x _LOAD_S: a slow pipeline's probe stays a few seconds."""
    tries = [measure()]
    while time_again(len(tries), sum(t[0] for t in tries), _REPEATS * _LOAD_S):
        tries.append(measure())
    return min(tries)


def _one_thread(one: Callable[[Any], None], batch: list) -> tuple[float, float]:
    """Wall and CPU seconds for this thread to run one(k) for each k of `batch`."""
    t0, c0 = time.perf_counter(), time.thread_time()
    for k in batch:
        one(k)
    return time.perf_counter() - t0, time.thread_time() - c0


def _two_threads(one: Callable[[Any], None], batch: list) -> float:
    """Wall seconds for two threads to run one(k) for each k of `batch` each, at once."""
    start = threading.Barrier(3)

    def work() -> None:
        with _threads(1):
            start.wait()
            for k in batch:
                one(k)

    pair = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for t in pair:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pair:
        t.join()
    return time.perf_counter() - t0


@contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
