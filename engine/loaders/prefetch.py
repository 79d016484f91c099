"""PrefetchLoader: one background thread keeps `prefetch_depth` batches ready; on CUDA the copy overlaps too.

Pipeline: torchdata.nodes SamplerWrapper(batch keys) -> Mapper(fetch + collate [+ pin]) drained by a
BackgroundIterator (a bounded queue of prefetch_depth batches that honours worker_timeout_s).

On CUDA the loader also moves batches to the device itself: while the training loop computes on
batch i, batch i+1 is already being copied (non_blocking, from pinned memory) on a side CUDA
stream. The compute stream waits on the copy stream only when it takes the batch, and
record_stream tells the caching allocator the tensors are used on the compute stream. The
yielded tensors are already on the device, so the training loop's h2d time is ~0: the copy was
overlapped with the previous step. On CPU it yields CPU tensors.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch
import torchdata.nodes as nodes
from torch import Tensor

from engine.loaders._base import EpochBatchSampler, Loader

__all__ = ["PrefetchLoader"]

Batch = tuple[Tensor, Tensor]


class PrefetchLoader(Loader):
    name = "prefetch"

    def __init__(self, dataset, cfg, device):
        super().__init__(dataset, cfg, device)
        self._copy_stream = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None

    def _epoch(self, e: int) -> Iterator[Batch]:
        # NOTE: the graph is passed straight in (no local name) so that it dies with the producer thread.
        host = self._background(self._graph(e))
        try:
            if self._copy_stream is None:
                yield from host
            else:
                yield from self._overlap_copy(host)
        finally:
            host.close()

    def _graph(self, e: int) -> nodes.BaseNode:
        keys = nodes.SamplerWrapper(EpochBatchSampler(len(self.dataset), self.cfg.batch_size, self.cfg.seed),
                                    initial_epoch=e)
        return nodes.Mapper(keys, self.fetch)

    def _overlap_copy(self, host: Iterable[Batch]) -> Iterator[Batch]:
        """Yield device batches; the next batch's copy is issued before the current one is handed out."""
        it = iter(host)
        current = self._issue_copy(next(it, None))
        while current is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_stream(self._copy_stream)  # only this batch's copy: the next one is not issued yet
            for t in current:
                t.record_stream(compute)  # don't let the allocator reuse it while compute still reads it
            upcoming = self._issue_copy(next(it, None))  # overlaps the step the consumer is about to run
            yield current
            current = upcoming

    def _issue_copy(self, batch: Batch | None) -> Batch | None:
        if batch is None:
            return None
        with torch.cuda.stream(self._copy_stream):
            x, y = (t.to(self.device, non_blocking=True) for t in batch)  # x [B, ...], y [B]
        return x, y
