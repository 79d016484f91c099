"""Samples per second of a run: the one definition behind the modes' run figures and the store's runs table.

The aggregate throughput of docs/design.md: the samples of every model and rank over ONE span, from the first
epoch's start to the last epoch's end. Summing per-epoch spans instead would count twice the time two drifting processes
overlap, and leave out a single run's gaps between epochs. Pure: the store reads it without torch.

    rate = samples_per_s(steady_epochs)   # None when no epoch has a start and an end
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["samples_per_s", "span_s"]


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
