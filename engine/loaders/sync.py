"""SyncLoader: the training thread fetches and collates every batch itself; the baseline the others beat.

Nothing runs in the background, so there is nothing to time out or shut down: a slow dataset
simply makes each step slower (timeout_s, a run's worker_timeout_s, does not apply). It takes Loader's knobs:

    SyncLoader(dataset, "cpu", batch_size=32, seed=0)
"""

from __future__ import annotations

from typing import Iterator

from torch import Tensor

from engine.loaders._base import Loader

__all__ = ["SyncLoader"]


class SyncLoader(Loader):
    name = "sync"

    def _epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.set_epoch(e)
        for keys in self.sampler:
            yield self.fetch(keys)
