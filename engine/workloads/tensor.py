"""The `tensor` workload: in-memory random tensors, plus optional GIL-releasing CPU work per sample.

With work_us = 0 a sample costs almost nothing, so the loader's own overhead is what gets measured.
With work_us > 0 each sample also runs about that much torch compute, which releases the GIL, so
thread workers can overlap it: compare with the `pyloop` workload, whose work holds the GIL.

    python -m engine run --workload tensor --work-us 200 --loader threads --workers 4
"""

from __future__ import annotations

import functools
import threading

import torch

from engine.workloads._base import BankWorkload, best_seconds

__all__ = ["TensorWorkload"]

# NOTE: the work is cumsum over a 1-D float32 buffer. A 1-D scan runs on one thread whatever
# torch.get_num_threads() says (elementwise ops would be split across threads above 32k elements),
# and Python holds the GIL only to dispatch each call: almost all of the work runs with the GIL released.
_CHUNK = 65536
# NOTE: per-thread buffers: allocating 2 x 256 KiB per sample would mmap fresh pages each time, and the
# page faults would be paid per sample, outside the calibration. Module-level: the dataset stays picklable.
_buffers = threading.local()


def _work_buffers() -> tuple[torch.Tensor, torch.Tensor]:
    if not hasattr(_buffers, "src"):
        _buffers.src, _buffers.out = torch.ones(_CHUNK), torch.empty(_CHUNK)
    return _buffers.src, _buffers.out


@functools.cache
def _elements_per_second() -> float:
    """Calibrated once per process: cumsum throughput on one uncontended core, call overhead included."""
    src, out = _work_buffers()

    def ten_calls() -> None:
        for _ in range(10):
            torch.cumsum(src, 0, out=out)

    return 10 * _CHUNK / best_seconds(ten_calls)


class TensorWorkload(BankWorkload):
    """Random tensors from the seed; `work_us` of GIL-releasing torch work per sample: a fixed number of cumsum
    elements (BankWorkload says why)."""

    WORK_UNIT = "cumsum elements"
    work_rate = staticmethod(_elements_per_second)

    def _work(self) -> None:
        left = self.work_units
        if not left:
            return
        src, out = _work_buffers()
        while left > 0:
            n = min(left, _CHUNK)
            torch.cumsum(src[:n], 0, out=out[:n])
            left -= n
