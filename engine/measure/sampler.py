"""System sampler: a thread that records CPU % and RSS of the whole process tree (loader workers
included) and, with a GPU, its utilisation and memory, about `hz` times a second.

Rows go to the RunLog in batches (`samples` events) so sampling never costs an fsync per row.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psutil

from engine.runlog import RunLog

__all__ = ["Sampler"]

log = logging.getLogger(__name__)


class _Gpu:
    """NVML handle for one GPU, or nothing when there is no GPU or no NVML."""

    def __init__(self, index: int | None):
        self.handle = None
        if index is None:
            return
        try:
            import pynvml  # noqa: PLC0415

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as e:  # noqa: BLE001 - metrics are best effort; the run goes on without them
            log.debug("no NVML: %s", e)

    def read(self) -> tuple[float | None, int | None]:
        if self.handle is None:
            return None, None
        util = self._nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
        mem = self._nvml.nvmlDeviceGetMemoryInfo(self.handle).used
        return float(util), int(mem)


class Sampler:
    def __init__(self, log_: RunLog, hz: float = 10.0, gpu_index: int | None = None, flush_every_s: float = 2.0):
        self.log, self.period, self.flush_every_s = log_, 1.0 / hz if hz > 0 else 0.0, flush_every_s
        self.gpu_index = gpu_index
        self.rows: list[list[Any]] = []
        self.peak_rss = 0
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
        root, known, gpu = psutil.Process(), {}, _Gpu(self.gpu_index)
        last_flush = time.monotonic()
        for p in self._tree(root, known):
            _safe(p.cpu_percent)
        while not self._stop.wait(self.period):
            cpu = rss = 0.0
            for p in self._tree(root, known):
                cpu += _safe(p.cpu_percent) or 0.0
                rss += getattr(_safe(p.memory_info), "rss", 0)
            util, mem = gpu.read()
            self.rows.append([time.time(), cpu, int(rss), util, mem])
            self.peak_rss = max(self.peak_rss, int(rss))
            self.cpu_sum, self.n = self.cpu_sum + cpu, self.n + 1
            if time.monotonic() - last_flush > self.flush_every_s:
                self._flush()
                last_flush = time.monotonic()

    def _flush(self) -> None:
        rows, self.rows = self.rows, []
        if rows:
            self.log.write("samples", rows=rows)

    def summary(self) -> dict[str, Any]:
        return {"peak_rss_bytes": self.peak_rss or None,
                "mean_cpu_pct": self.cpu_sum / self.n if self.n else None}


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except psutil.Error:
        return None
