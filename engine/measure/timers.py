"""Per-step timing: data wait, host-to-device copy, compute, total; per-epoch wall time and TTFB.

On CPU every split is a perf_counter difference. On CUDA the copy and compute splits are CUDA
events recorded around the work and read once at epoch end (one synchronize per epoch, never per
step, so timing does not change what is measured). Data wait is always host time: the loop is
blocked in `next()`.

    timer = EpochTimer(device)
    for batch in timer.batches(loader.epoch(e)):    # times the wait for each batch
        with timer.copy(): x, y = to_device(batch, device)
        with timer.compute(): step(x, y)
    record = timer.finish(samples=n)               # dict ready for RunLog.write("epoch", ...)
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, Iterator

import torch

__all__ = ["EpochTimer"]


class EpochTimer:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.t_start = time.time()
        self._t0 = time.perf_counter()
        self._mark = self._t0
        self.ttfb_s: float | None = None
        self.waits: list[float] = []
        self.totals: list[float] = []
        self.end_wait_s = 0.0  # blocked in the last next() that ended the epoch: still data wait
        self._copy: list[Any] = []     # seconds (CPU) or (start, end) event pairs (CUDA)
        self._compute: list[Any] = []

    def batches(self, source: Iterable) -> Iterator:
        it = iter(source)
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                self.end_wait_s = time.perf_counter() - t
                return
            now = time.perf_counter()
            if self.ttfb_s is None:
                self.ttfb_s = now - self._t0
            self.waits.append(now - t)
            self._mark = t
            yield batch
            self.totals.append(time.perf_counter() - self._mark)

    @contextlib.contextmanager
    def copy(self) -> Iterator[None]:
        with self._span(self._copy):
            yield

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        with self._span(self._compute):
            yield

    @contextlib.contextmanager
    def _span(self, into: list) -> Iterator[None]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            into.append((start, end))
        else:
            t = time.perf_counter()
            yield
            into.append(time.perf_counter() - t)

    def _seconds(self, spans: list) -> list[float]:
        if not self.cuda:
            return spans
        return [s.elapsed_time(e) / 1000.0 for s, e in spans]

    def finish(self, samples: int, **extra: Any) -> dict[str, Any]:
        """Close the epoch: one synchronize on CUDA, then the epoch record with its steps."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - self._t0
        copies, computes = self._seconds(self._copy), self._seconds(self._compute)
        n = len(self.waits)
        copies += [0.0] * (n - len(copies))
        computes += [0.0] * (n - len(computes))
        steps = [[i, self.waits[i], copies[i], computes[i], self.totals[i] if i < len(self.totals) else 0.0]
                 for i in range(n)]
        return {
            "wall_s": wall, "samples": samples, "samples_per_s": samples / wall if wall > 0 else 0.0,
            "ttfb_s": self.ttfb_s or 0.0, "data_wait_s": sum(self.waits) + self.end_wait_s, "h2d_s": sum(copies),
            "compute_s": sum(computes), "n_steps": n, "t_start": self.t_start, "t_end": time.time(),
            "steps": steps, **extra,
        }
