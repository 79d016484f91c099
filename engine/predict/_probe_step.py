"""The training step beside a Python-bound thread, for the probe (engine/predict/probe.py): how much of the step
holds the GIL, and how much slower it runs while another thread of its process wants the GIL.

A producer thread (sync's, prefetch's, a `threads` worker) that runs Python takes turns on the GIL with the
step's own Python and autograd dispatch; the two cannot overlap the part both hold. Measured with a counter: a
pure-Python loop on another thread counts as fast as it can, alone and then while the step replays; what it
loses is the time the step held the GIL.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable

import torch

from engine.loaders import open_loader
from engine.workloads import build_dataset

__all__ = ["step_beside_python"]

_BATCHES = 8  # replayed steps per measurement
_ROUNDS = 2  # measurements of each kind; the fastest is kept


def step_beside_python(
    cfg: Any, device: torch.device, steps: Callable[[Any], list[Callable]], shared: float, made: list | None = None
) -> dict[str, float]:
    """{"step_gil_share": 0..1, "step_beside_python": wall beside a Python loop / alone (>= 1)} at one intra-op
    thread; `shared`: how much slower two GIL-free threads run now than one (engine/predict/probe.py), so a busy
    machine's wait for a core is not read as the GIL. made: (x, y) batches already made (else the epoch's first)."""
    dataset = build_dataset(cfg.replace(latency_ms=0.0, work_us=0))
    if made:
        batches = [(x.to(device), y.to(device)) for x, y in made[:_BATCHES]]
    else:
        with open_loader(dataset, cfg, torch.device("cpu"), loader="sync") as loader:
            batches = [(x.to(device), y.to(device)) for x, y in itertools.islice(loader.epoch(1), _BATCHES)]
    step = steps(dataset)[0]
    step(*batches[0])  # untimed: allocator and kernel selection

    def replay() -> float:
        t0 = time.perf_counter()
        for x, y in batches:
            step(x, y)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    alone = min(replay() for _ in range(_ROUNDS))
    rate = _count(lambda: time.sleep(alone))[0]  # the counter alone: the main thread sleeps, holding nothing
    tries = [_count(replay) for _ in range(_ROUNDS)]
    beside = max(r for r, _ in tries)  # the round the counter got furthest in: the least disturbed
    # the counter kept beside / rate of its pace; of what it lost, what sharing the cores explains is not the GIL
    # (shared = 1 on idle cores)
    held = 1.0 - min(1.0, beside * shared / rate) if rate > 0 else 0.0
    return {"step_gil_share": held, "step_beside_python": max(1.0, min(w for _, w in tries) / alone)}


def _count(work: Callable[[], Any]) -> tuple[float, float]:
    """(iterations a pure-Python counter on another thread made per second of work(), work()'s wall seconds)."""
    stop, counted = threading.Event(), [0]

    def counter() -> None:
        n = 0
        while not stop.is_set():
            n += 1
        counted[0] = n

    t = threading.Thread(target=counter, daemon=True)
    t.start()
    t0 = time.perf_counter()
    result = work()
    wall = time.perf_counter() - t0
    stop.set()
    t.join()
    seconds = result if isinstance(result, float) else wall
    return counted[0] / max(wall, 1e-9), seconds
