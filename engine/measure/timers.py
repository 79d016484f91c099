"""Per-step timing: data wait, host-to-device copy, compute, total; per-epoch wall time and TTFB.

On CPU every split is a perf_counter difference. On CUDA the copy and compute splits are CUDA
events recorded around the work on the run device's current stream (not the current device's), taken
from a per-device pool (engine/measure/cuda_events.py) and read once at epoch end (one synchronize per
epoch, never per step, so timing does not change what is measured). Data wait is always host time: the
loop is blocked in `next()`.

Host and GPU clocks are kept apart. data_wait_s is host time; h2d_s and compute_s are GPU time. Without
a per-step sync the host runs ahead of the GPU, so a data wait can hide behind queued GPU work: the two
overlap and must not be stacked as shares of one wall time. What the GPU lost to the loader is
gpu_idle_s: the compute stream's gaps between one step's compute end and the next step's first event
(the hand-over), including copy_wait_s, the part where it waited for a loader's side-stream copy. With
a device-side loader (prefetch on CUDA) h2d_s is that loader's copy time on its copy stream, which
overlaps compute: it is copy work done, not time added to the step. gpu_idle_s is split into
gpu_idle_data_s (the host was blocked in next()), gpu_idle_copy_s (the stream waited for a copy) and
gpu_idle_other_s (launch, Python, sync), which add up to it (engine/measure/idle.py says how).

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

from engine.measure import cuda_events
from engine.measure.idle import clock_offset, split_idle
from engine.runlog import GPU_EPOCH_FIELDS

__all__ = ["EpochTimer", "arrived"]


def arrived(
    t: float, t0: float, ttfb: float | None, waits: list[float], spans: list[tuple[float, float]]
) -> tuple[float, float]:
    """A batch asked for at `t` (perf_counter) has arrived now: its wait and its blocked span noted; returns (now,
    the epoch's time to first batch from `t0`, set on the first batch and kept after). The lab's timer and the
    observer's epoch both count a wait this way."""
    now = time.perf_counter()
    waits.append(now - t)
    spans.append((t, now))
    return now, now - t0 if ttfb is None else ttfb


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
        self._waited: list[tuple[float, float]] = []  # host intervals blocked in next(), the last one included
        self._copy: list[Any] = []  # seconds (CPU) or Spans (CUDA)
        self._compute: list[Any] = []
        self._copy_at: list[float] = []  # CUDA: host time just before each span's start was enqueued
        self._compute_at: list[float] = []
        self._loader_spans: list[tuple[Any, Any]] = []  # per step: a DeviceBatch's (copy_span, wait_span)

    def batches(self, source: Iterable) -> Iterator:
        it = iter(source)
        while True:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                self.end_wait_s = time.perf_counter() - t
                self._waited.append((t, t + self.end_wait_s))
                return
            now, self.ttfb_s = arrived(t, self._t0, self.ttfb_s, self.waits, self._waited)
            self._loader_spans.append((getattr(batch, "copy_span", None), getattr(batch, "wait_span", None)))
            self._mark = t
            yield batch
            self.totals.append(time.perf_counter() - self._mark)

    @contextlib.contextmanager
    def copy(self) -> Iterator[None]:
        with self._span(self._copy, self._copy_at):
            yield

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        with self._span(self._compute, self._compute_at):
            yield

    @contextlib.contextmanager
    def _span(self, into: list, enqueued: list[float]) -> Iterator[None]:
        if self.cuda:
            span, stream = cuda_events.pool(self.device).span(), torch.cuda.current_stream(self.device)
            # NOTE: taken before the record: the event completes no earlier than this (engine/measure/idle.py)
            enqueued.append(time.perf_counter())
            span.start.record(stream)
            yield
            span.end.record(stream)
            into.append(span)
        else:
            t = time.perf_counter()
            yield
            into.append(time.perf_counter() - t)

    def _seconds(self, spans: list) -> list[float]:
        if not self.cuda:
            return spans
        copied = [c for c, _ in self._loader_spans]
        if spans is self._copy and len(copied) == len(spans) and all(copied):
            spans = copied  # the loader copied on its own stream: the loop's copy was a no-op
        return [s.seconds() for s in spans]

    def _gpu_idle(self) -> dict[str, Any]:
        """GPU_EPOCH_FIELDS (CUDA; see the module doc): None where they cannot be read."""
        n = len(self.waits)
        if not self.cuda or len(self._compute) != n:
            return dict.fromkeys(GPU_EPOCH_FIELDS)
        firsts, enqueued = (self._copy, self._copy_at) if len(self._copy) == n else (self._compute, self._compute_at)
        waits = [w for _, w in self._loader_spans if w is not None]
        copy_wait = sum(w.seconds() for w in waits) if waits else None
        if n == 0:
            return {**dict.fromkeys(GPU_EPOCH_FIELDS, 0.0), "copy_wait_s": copy_wait}
        base = firsts[0].start  # GPU times below are seconds after this event

        def at(event: Any) -> float:
            return base.elapsed_time(event) / 1000.0

        # NOTE: each gap's length from its own two events (elapsed_time is a float32 of ms: a difference of two
        # times far from `base` would lose microseconds); `base` only places the gaps against host time
        gaps = []
        for i in range(1, n):
            start = at(self._compute[i - 1].end)
            gaps.append((start, start + self._compute[i - 1].end.elapsed_time(firsts[i].start) / 1000.0))
        stalls = [(s, s + w.seconds()) for w, s in ((w, at(w.start)) for w in waits)]
        anchors = zip(enqueued, [0.0] + [b for _, b in gaps])
        parts = split_idle(gaps, stalls, self._waited, clock_offset(anchors))
        return {
            "gpu_idle_s": parts.idle_s,
            "gpu_idle_data_s": parts.data_s,
            "gpu_idle_copy_s": parts.copy_s,
            "gpu_idle_other_s": parts.other_s,
            "copy_wait_s": copy_wait,
        }

    def finish(self, samples: int, **extra: Any) -> dict[str, Any]:
        """Close the epoch: one synchronize on CUDA, then the epoch record with its steps."""
        if self.cuda:
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - self._t0
        copies, computes = self._seconds(self._copy), self._seconds(self._compute)
        n = len(self.waits)
        copies += [0.0] * (n - len(copies))
        computes += [0.0] * (n - len(computes))
        steps = [
            [i, self.waits[i], copies[i], computes[i], self.totals[i] if i < len(self.totals) else 0.0]
            for i in range(n)
        ]
        return {
            "wall_s": wall,
            "samples": samples,
            "samples_per_s": samples / wall if wall > 0 else 0.0,
            "ttfb_s": self.ttfb_s or 0.0,
            "data_wait_s": sum(self.waits) + self.end_wait_s,
            "h2d_s": sum(copies),
            "compute_s": sum(computes),
            "n_steps": n,
            "t_start": self.t_start,
            "t_end": time.time(),
            "steps": steps,
            **self._gpu_idle(),
            **extra,
        }
