"""A run's speed: its median steady epoch and its samples per second, each defined once, for the bound's efficiency,
the modes' run figures and the store's runs table alike.

The aggregate throughput of docs/design.md: the samples of every model and rank over ONE span, from the first
epoch's start to the last epoch's end. Summing per-epoch spans instead would count twice the time two drifting processes
overlap, and leave out a single run's gaps between epochs. Pure: the store reads it without torch.

    rate = samples_per_s(steady_epochs)   # None when no epoch has a start and an end
    epoch = median_epoch_s(steady_epochs)  # None when no epoch has a wall time
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Mapping

__all__ = ["epoch_walls", "median_epoch_s", "samples_per_s", "span_s"]


def span_s(epochs: Iterable[Mapping[str, Any]]) -> float | None:
    """Seconds from the first `t_start` to the last `t_end` of these epoch records; None when either is missing."""
    epochs = list(epochs)
    starts = [e["t_start"] for e in epochs if e.get("t_start") is not None]
    ends = [e["t_end"] for e in epochs if e.get("t_end") is not None]
    return max(ends) - min(starts) if starts and ends else None


def samples_per_s(epochs: Iterable[Mapping[str, Any]], span: float | None = None) -> float | None:
    """All the epochs' samples over `span` (by default span_s of them); None when there is no positive span.

    A value is a number or None (missing, or malformed in a RunLog: the store coerces them first); None counts as
    no samples and no time."""
    epochs = list(epochs)
    span = span_s(epochs) if span is None else span
    if span is None or span <= 0:
        return None
    return sum(e.get("samples") or 0 for e in epochs) / span


def _seconds(value: Any) -> float | None:
    """A finite number of seconds, or None: a RunLog may hold a malformed value, and it must not fail the figure."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _epoch_wall(group: list[Mapping[str, Any]]) -> float | None:
    """One epoch's wall seconds: a single model/rank's own `wall_s`; several, from the first start to the last end
    (they ran side by side), or the longest `wall_s` where a start or an end is missing."""
    if len(group) == 1:
        return _seconds(group[0].get("wall_s"))
    starts = [_seconds(e.get("t_start")) for e in group]
    ends = [_seconds(e.get("t_end")) for e in group]
    if None not in starts and None not in ends:
        return max(x for x in ends if x is not None) - min(x for x in starts if x is not None)
    walls = [w for w in (_seconds(e.get("wall_s")) for e in group) if w is not None]
    return max(walls) if walls else None


def epoch_walls(epochs: Iterable[Mapping[str, Any]]) -> list[float]:
    """Per epoch number (in first-seen order), the wall seconds of its events (one per model and rank); an epoch
    with no reading is left out. Pass the steady epochs: warm-up is not filtered here."""
    by_epoch: dict[Any, list[Mapping[str, Any]]] = {}
    for e in epochs:
        by_epoch.setdefault(e.get("epoch"), []).append(e)
    return [w for w in (_epoch_wall(group) for group in by_epoch.values()) if w is not None]


def median_epoch_s(epochs: Iterable[Mapping[str, Any]]) -> float | None:
    """A run's epoch time: the median of epoch_walls over its steady epochs; None when none has a wall time.

    The one definition: the bound's efficiency divides by it where the run is measured, the run's summary carries
    it, and the store computes it the same way only for a run cut short before its summary (its finished epochs)."""
    walls = epoch_walls(epochs)
    return statistics.median(walls) if walls else None
