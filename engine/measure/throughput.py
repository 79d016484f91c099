"""Samples per second of a run: the one definition behind the modes' run figures and the store's runs table.

DESIGN's aggregate throughput: the samples of every model and rank over ONE span, from the first epoch's start
to the last epoch's end. Summing per-epoch spans instead would count twice the time two drifting processes
overlap, and leave out a single run's gaps between epochs. Pure: the store reads it without torch.

    rate = samples_per_s(steady_epochs)   # None when no epoch has a start and an end
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

__all__ = ["samples_per_s", "span_s"]


def span_s(epochs: Iterable[Mapping[str, Any]]) -> float | None:
    """Seconds from the first `t_start` to the last `t_end` of these epoch records; None when either is missing."""
    epochs = list(epochs)
    starts = [t for t in (_finite(e.get("t_start")) for e in epochs) if t is not None]
    ends = [t for t in (_finite(e.get("t_end")) for e in epochs) if t is not None]
    return max(ends) - min(starts) if starts and ends else None


def samples_per_s(epochs: Iterable[Mapping[str, Any]], span: float | None = None) -> float | None:
    """All the epochs' samples over `span` (by default span_s of them); None when there is no positive span.

    NOTE: a malformed or missing value (a RunLog written by hand, a torn line) counts as no samples and no time,
    rather than failing the run's figures."""
    epochs = list(epochs)
    span = span_s(epochs) if span is None else span
    if span is None or span <= 0:
        return None
    return sum(_finite(e.get("samples")) or 0.0 for e in epochs) / span


def _finite(v: Any) -> float | None:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None
