"""GPU idle split by cause: data wait, copy wait, other host time. Pure functions over recorded intervals.

The compute stream's gaps (one step's compute end to the next step's first event) are what the GPU lost
(engine/measure/timers.py). Each gap is split three ways, in this order, so that the parts add up to it:

    copy   the compute stream was blocked on a loader's side-stream copy (its wait spans, GPU clock)
    data   the rest of the gap while the host was blocked in next() on the loader (host clock)
    other  what is left: the host was launching, running Python, synchronising or bookkeeping

Gaps and copy stalls are GPU times; the host's waits are perf_counter times. One offset maps the first to
the second without a synchronize: an event cannot complete before the host enqueues it, so for every event
GPU time >= host enqueue time, with equality (within the launch latency, microseconds) for an event enqueued
while its stream was idle, which is how every gap ends. So offset = max(host enqueue - GPU time) over events
whose enqueue time the timer noted. Where no event found the stream idle (no gap), the offset is only a lower
bound, but then there is no idle to split either.

    offset = clock_offset([(host_t, gpu_t), ...])
    parts = split_idle(gaps, stalls, waits, offset)   # IdleSplit(idle_s, data_s, copy_s, other_s)
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

__all__ = ["IdleSplit", "clock_offset", "overlap", "split_idle"]

Interval = tuple[float, float]


class IdleSplit(NamedTuple):
    idle_s: float
    data_s: float
    copy_s: float
    other_s: float


def clock_offset(anchors: Iterable[tuple[float, float]]) -> float | None:
    """host time - GPU time for the events with a known enqueue time (see the module doc); None without any."""
    offsets = [h - g for h, g in anchors]
    return max(offsets) if offsets else None


def _merged(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-empty, non-overlapping intervals covering the same points."""
    out: list[list[float]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap(interval: Interval, cover: Sequence[Interval]) -> float:
    """Seconds of `interval` inside `cover` (merged intervals, as _merged returns them)."""
    a, b = interval
    return sum(max(0.0, min(b, hi) - max(a, lo)) for lo, hi in cover if hi > a and lo < b)


def _minus(interval: Interval, cover: Sequence[Interval]) -> list[Interval]:
    """The parts of `interval` outside `cover` (merged)."""
    a, b = interval
    out, at = [], a
    for lo, hi in cover:
        if hi <= at or lo >= b:
            continue
        if lo > at:
            out.append((at, lo))
        at = max(at, hi)
    if at < b:
        out.append((at, b))
    return out


def split_idle(
    gaps: Iterable[Interval], stalls: Iterable[Interval], waits: Iterable[Interval], offset: float | None
) -> IdleSplit:
    """The gaps' total and its three parts (module doc). gaps, stalls: GPU clock; waits: host clock.

    Without an offset (no anchor) the host's waits cannot be placed on the GPU clock: what is not copy
    wait is `other`."""
    stalls_m, waits_m = _merged(stalls), _merged(waits)
    idle = data = copy = 0.0
    for gap in _merged(gaps):
        idle += gap[1] - gap[0]
        copy += overlap(gap, stalls_m)
        if offset is not None:
            data += sum(overlap((a + offset, b + offset), waits_m) for a, b in _minus(gap, stalls_m))
    # NOTE: copy and data are measures of disjoint parts of the gaps, so other >= 0 up to rounding
    return IdleSplit(idle, data, copy, max(0.0, idle - copy - data))
