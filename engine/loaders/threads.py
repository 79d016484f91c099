"""ThreadLoader: `workers` threads fetch and collate whole batches in parallel, delivered in order.

Pipeline: torchdata.nodes SamplerWrapper(batch keys) -> ParallelMapper(fetch + collate [+ pin],
method="thread", in_order=True) drained by a BackgroundIterator that keeps `prefetch_depth`
finished batches ready and raises LoaderTimeout when none arrives within worker_timeout_s.

Threads share the GIL: this wins when the dataset releases it (file I/O, decoding in C, torch ops,
sleeps) and loses to processes when the per-sample work is pure Python. Each worker thread runs
torch.set_num_threads(1) (torchdata does it; with OpenMP it is per thread, the trainer keeps its own).
"""

from __future__ import annotations

from typing import Iterator

import torchdata.nodes as nodes
from torch import Tensor

from engine.loaders._base import EpochBatchSampler, PooledLoader

__all__ = ["ThreadLoader"]


class ThreadLoader(PooledLoader):
    """Takes PooledLoader's knobs: workers and prefetch_depth besides every loader's."""

    name = "threads"

    def _epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        # NOTE: the graph is passed straight in (no local name) so that it dies with the producer thread,
        # and torchdata's worker threads stop with it.
        batches = self._background(self._graph(e))
        try:
            yield from batches
        finally:
            batches.close()

    def _graph(self, e: int) -> nodes.BaseNode:
        keys = nodes.SamplerWrapper(EpochBatchSampler(len(self.dataset), self.batch_size, self.seed), initial_epoch=e)
        # max_concurrent=workers: every worker busy, and finished batches wait in our bounded queue
        # (prefetch_depth) instead of piling up inside torchdata.
        return nodes.ParallelMapper(
            keys,
            map_fn=self.fetch,
            num_workers=self.workers,
            in_order=True,
            method="thread",
            max_concurrent=self.workers,
        )
