"""Timing events reused from a pool per device, and the batch a device-side loader hands over.

Creating CUDA events every step (4+ per step before) costs a driver call each and churns handles. A
Span is two timing events taken from its device's pool; when the last holder drops the Span (the epoch's
timer, after its one synchronize has read it), its events go back to the pool. So events are created
in the first epoch only, and a batch shared by two consumers (dual-threads' FanOut) frees its spans once.

A DeviceBatch is an (x, y) tuple that also carries the loader's own spans, recorded on CUDA streams:
copy_span on the copy stream around the host-to-device copy, wait_span on the consumer's compute stream
around its wait for that copy (the copy stall the compute stream actually saw). EpochTimer reads them.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import torch

__all__ = ["DeviceBatch", "EventPool", "Span", "pool"]


class Span:
    """A start and an end event; seconds() is valid once both have completed (after a synchronize)."""

    __slots__ = ("__weakref__", "end", "start")

    def __init__(self, start: Any, end: Any):
        self.start, self.end = start, end

    def seconds(self) -> float:
        return self.start.elapsed_time(self.end) / 1000.0


class EventPool:
    """Events of one device; `make` creates one (a timing torch.cuda.Event by default)."""

    def __init__(self, make: Callable[[], Any] | None = None):
        self._make = make or (lambda: torch.cuda.Event(enable_timing=True))
        self._free: list[Any] = []
        self._lock = threading.Lock()
        self.created = 0

    def _take(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
            self.created += 1
        return self._make()

    def _give(self, events: list[Any]) -> None:
        with self._lock:  # NOTE: finalizers run wherever the GC runs, so any thread may give back
            self._free.extend(events)

    def span(self) -> Span:
        span = Span(self._take(), self._take())
        weakref.finalize(span, self._give, [span.start, span.end])
        return span

    def free(self) -> int:
        with self._lock:
            return len(self._free)


_POOLS: dict[torch.device, EventPool] = {}
_POOLS_LOCK = threading.Lock()


def pool(device: torch.device) -> EventPool:
    """The pool of `device` (an event records only on streams of the device it was first recorded on)."""
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    with _POOLS_LOCK:
        return _POOLS.setdefault(device, EventPool())


class DeviceBatch(tuple):
    """(x, y) already on the device, with the loader's copy_span and wait_span (see the module doc)."""

    copy_span: Span | None = None
    wait_span: Span | None = None
