"""The `pyloop` workload: like `tensor`, but the per-sample work is pure Python that holds the GIL.

Thread workers cannot overlap this work (on a GIL build of CPython); process workers can. Running the
same sweep with `--workload tensor` and `--workload pyloop` shows the difference.

    python -m engine run --workload pyloop --work-us 200 --loader threads --workers 4
"""

from __future__ import annotations

import functools

from engine.workloads._base import BankWorkload, best_seconds

__all__ = ["PyloopWorkload"]


def _spin(iterations: int) -> int:
    """Integer arithmetic in a Python loop: never releases the GIL, never touches memory."""
    acc = 0
    for i in range(iterations):
        acc = (acc * 1103515245 + i) & 0x7FFFFFFF
    return acc


@functools.cache
def _iterations_per_second() -> float:
    """Calibrated once per process, on one uncontended core."""
    return 20_000 / best_seconds(lambda: _spin(20_000))


class PyloopWorkload(BankWorkload):
    """Random tensors from the seed; `work_us` of GIL-holding Python arithmetic per sample: a fixed iteration count
    (BankWorkload says why)."""

    WORK_UNIT = "iterations"
    work_rate = staticmethod(_iterations_per_second)

    def _work(self) -> None:
        if self.work_units:
            _spin(self.work_units)
