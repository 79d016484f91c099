"""System sampler: a thread that records CPU % and memory of the whole process tree (loader workers
included) and, with a GPU, its utilisation and memory, about `hz` times a second.

Memory is PSS summed over the tree (Linux: each page shared by k processes counts 1/k in each), so
copy-on-write pages that forked workers share with the parent count once, not once per worker as an
RSS sum would. Where PSS cannot be read (not Linux, no access), that process counts its RSS and
summary() says peak_memory_kind = "rss". The stored names stay rss_bytes / peak_rss_bytes.

GPU fields come from engine/measure/nvml.py: the GPU found by UUID, each counter read on its own, so
one that the GPU lacks (utilisation on a MIG slice) drops that field, never the sampler.

Rows go to the RunLog in batches (`samples` events) so sampling never costs an fsync per row.

What sampling costs the run it measures: CPU % is cheap (a /proc read per process); PSS is not (the kernel walks
each process's whole memory map), nor is finding the tree (psutil reads every process on the machine). So those two
are read at most every SLOW_EVERY_S, CPU % at every tick; a row between two memory reads carries the last one, and a
worker started since the last look is counted from the next. What a tick costs: bench/RESULTS.md, "What the sampler
costs a run".
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psutil

from engine.measure.nvml import Gpu
from engine.runlog import RunLog

__all__ = ["Sampler"]

log = logging.getLogger(__name__)

SLOW_EVERY_S = 0.5  # PSS reads and finding the tree (see the module doc); a shorter memory peak can be missed


def _memory(p: psutil.Process) -> tuple[int, bool]:
    """(bytes, is_pss): the process's PSS, or its RSS where PSS cannot be read."""
    full = _safe(p.memory_full_info)
    if getattr(full, "pss", None) is not None:
        return int(full.pss), True
    return int(getattr(_safe(p.memory_info), "rss", 0)), False


class Sampler:
    def __init__(self, log_: RunLog, hz: float = 10.0, gpu_index: int | None = None, flush_every_s: float = 2.0):
        self.log, self.period, self.flush_every_s = log_, 1.0 / hz if hz > 0 else 0.0, flush_every_s
        self.gpu_index = gpu_index
        self.rows: list[list[Any]] = []
        self.peak_rss = 0  # PSS of the tree (see the module doc); the name stays for the stored column
        self.all_pss = True
        self.cpu_sum, self.n = 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loaderlab-sampler", daemon=True)

    def __enter__(self) -> "Sampler":
        if self.period:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        self._flush()

    def _tree(self, root: psutil.Process, known: dict[int, psutil.Process]) -> list[psutil.Process]:
        # NOTE: keep Process objects across ticks: cpu_percent() is measured since the previous call
        procs = [root]
        try:
            procs += root.children(recursive=True)
        except psutil.Error:
            pass
        return [known.setdefault(p.pid, p) for p in procs]

    def _loop(self) -> None:
        known: dict[int, psutil.Process] = {}
        root, gpu = psutil.Process(), Gpu(self.gpu_index)
        last_flush = time.monotonic()
        for p in self._tree(root, known):
            _safe(p.cpu_percent)
        # NOTE: memory read once at the start too, so a run shorter than one period still has a peak
        self.peak_rss = max(self.peak_rss, self._tree_memory(self._tree(root, known)))
        tree, rss, slow_at = [], 0, -SLOW_EVERY_S
        while not self._stop.wait(self.period):
            if time.monotonic() - slow_at >= SLOW_EVERY_S:
                tree, slow_at = self._tree(root, known), time.monotonic()
                rss = self._tree_memory(tree)
            cpu = sum(_safe(p.cpu_percent) or 0.0 for p in tree)
            util, mem = gpu.read()
            self.rows.append([time.time(), cpu, int(rss), util, mem])
            self.peak_rss = max(self.peak_rss, int(rss))
            self.cpu_sum, self.n = self.cpu_sum + cpu, self.n + 1
            if time.monotonic() - last_flush > self.flush_every_s:
                self._flush()
                last_flush = time.monotonic()
        if not self.n and self.peak_rss:  # stopped before one period: the start's memory, no CPU reading
            self.rows.append([time.time(), None, self.peak_rss, None, None])

    def _tree_memory(self, tree: list[psutil.Process]) -> int:
        total = 0
        for p in tree:
            used, pss = _memory(p)
            total += used
            self.all_pss = self.all_pss and pss
        return total

    def _flush(self) -> None:
        rows, self.rows = self.rows, []
        if rows:
            self.log.write("samples", rows=rows)

    def summary(self) -> dict[str, Any]:
        return {
            "peak_rss_bytes": self.peak_rss or None,
            "mean_cpu_pct": self.cpu_sum / self.n if self.n else None,
            "peak_memory_kind": ("pss" if self.all_pss else "rss") if self.peak_rss else None,
        }


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except psutil.Error:
        return None
