"""Exactly once, checked: what each part of a stream (rank, worker) delivered in one epoch, and the verdict.

Counts are always kept; keys (the stream's third item, or a hash of the item under check_samples) are kept when
the stream yields them. A sized stream whose epoch delivers other than each sample once fails with one line that
says how many, from which worker or rank, and what to do.

    tally = EpochTally(workers=2); tally.add(part, keys); tally.check(stream, epoch)   # raises StreamMismatch
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["EpochTally", "StreamMismatch"]


class StreamMismatch(RuntimeError):
    """An epoch of a stream delivered samples more than once, or not at all."""


class EpochTally:
    """Per part (rank x workers + worker): how many samples it delivered and, where known, their keys."""

    def __init__(self, workers: int, world: int = 1):
        self.workers, self.world = max(1, workers), world
        self.counts: Counter = Counter()
        self.keys: dict[int, list[Any]] = {}

    def add(self, part: int, keys: list[Any]) -> None:
        self.counts[part] += len(keys)
        if keys and keys[0] is not None:
            self.keys.setdefault(part, []).extend(keys)

    def merge(self, others: list["EpochTally"]) -> "EpochTally":
        """Every rank's tally as one (ddp: gathered from the ranks)."""
        out = EpochTally(self.workers, len(others))
        for t in others:
            out.counts.update(t.counts)
            for part, keys in t.keys.items():
                out.keys.setdefault(part, []).extend(keys)
        return out

    def who(self, part: int) -> str:
        rank, worker = divmod(part, self.workers)
        if self.world > 1 and self.workers > 1:
            return f"rank {rank} worker {worker}"
        return f"rank {rank}" if self.world > 1 else f"worker {worker}"

    def check(self, stream: Any, epoch: int) -> None:
        """Raise StreamMismatch when this epoch repeated or dropped samples of `stream` (a StreamDataset)."""
        total, n = sum(self.counts.values()), stream.total
        fix = (
            "shard with get_worker_info() and the rank, or drop shards_itself"
            if stream.split == "self"
            else "make every iter() yield each sample once, or fix __len__"
        )
        parts = self.world * self.workers
        many = "ranks x workers" if self.world > 1 and self.workers > 1 else "ranks" if self.world > 1 else "workers"
        if n is not None and parts > 1 and all(self.counts[p] == n for p in range(parts)):
            raise StreamMismatch(
                f"{parts} {many} each yielded all {n} samples of the stream '{stream.spec}' in epoch {epoch}: {fix}"
            )
        seen = Counter(k for keys in self.keys.values() for k in keys)
        repeated = sum(c - 1 for c in seen.values() if c > 1)
        if repeated:
            where = sorted({self.who(p) for p, keys in self.keys.items() if any(seen[k] > 1 for k in keys)})
            raise StreamMismatch(
                f"epoch {epoch} of the stream '{stream.spec}' repeated {repeated} of its samples "
                f"(keys seen twice, from {', '.join(where)}): {fix}"
            )
        if n is not None and total != n:
            counts = ", ".join(f"{self.who(p)}: {self.counts[p]}" for p in range(parts))
            what = "repeated" if total > n else "dropped"
            raise StreamMismatch(
                f"epoch {epoch} of the stream '{stream.spec}' delivered {total} samples for its "
                f"{n} ({what} {abs(total - n)}; {counts}): {fix}"
            )
