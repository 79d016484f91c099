"""Data-wait percentiles: the one definition behind the runs table, the run detail and engine.analysis.stats.

Over the steps of steady (non-warm-up) epochs, each epoch's first step left out (its wait is the time to
first batch, reported apart as ttfb_s), all models and ranks pooled. pQ is the nearest-rank percentile:
the smallest wait that at least Q% of the steps do not exceed (a wait that happened, not an interpolation).
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["QUANTILES", "wait_percentiles"]

QUANTILES = (50, 90, 99)


def wait_percentiles(sorted_waits: Sequence[float]) -> dict[str, float | None]:
    """data_wait_p50_s, _p90_s, _p99_s of already sorted, finite waits (None when there are none)."""
    n = len(sorted_waits)
    return {
        f"data_wait_p{q}_s": float(sorted_waits[max(0, math.ceil(q / 100 * n) - 1)]) if n else None for q in QUANTILES
    }
