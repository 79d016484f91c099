"""PrefetchLoader: one background thread keeps `prefetch_depth` batches ready; on CUDA the copy overlaps too.

Pipeline: torchdata.nodes SamplerWrapper(batch keys) -> Mapper(fetch + collate [+ pin]) drained by a
BackgroundIterator (a bounded queue of prefetch_depth batches that honours timeout_s, a run's worker_timeout_s).

On CUDA the loader also moves batches to the device itself, on a side CUDA stream (non_blocking,
from pinned memory). Batch i is handed out as soon as its copy is issued; the copy of batch i+1 is
issued when the consumer asks for it, i.e. after it has queued step i's kernels, so the copy runs on
the GPU while step i computes. (Issuing i+1 before handing out i would make the consumer wait for two
batches: TTFB would cover two, and every wait would be shifted by one.) At hand-over the consumer's
current stream waits on the copy stream, which then holds only this batch's copy, and record_stream
tells the caching allocator the tensors are used on that stream. Each batch is a DeviceBatch that
carries the copy's span on the copy stream and the compute stream's wait for it (EpochTimer reads
them: h2d_s is the real copy time, copy_wait_s what of it the compute stream saw). On CPU it yields
CPU tensors.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import torch
import torchdata.nodes as nodes
from torch import Tensor

from engine.loaders._base import Collate, Device, EpochBatchSampler, Loader
from engine.measure import cuda_events

__all__ = ["PrefetchLoader"]

Batch = tuple[Tensor, Tensor]


class PrefetchLoader(Loader):
    name = "prefetch"

    def __init__(
        self,
        dataset: Any,
        device: Device = "cpu",
        *,
        prefetch_depth: int = 2,
        batch_size: int = 64,
        seed: int = 0,
        timeout_s: float = 120.0,
        pin_memory: bool = True,
        collate: Collate = "",
        transform_threads: int = 0,
    ):
        self.prefetch_depth = prefetch_depth
        super().__init__(
            dataset,
            device,
            batch_size=batch_size,
            seed=seed,
            timeout_s=timeout_s,
            pin_memory=pin_memory,
            collate=collate,
            transform_threads=transform_threads,
        )
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
        keys = nodes.SamplerWrapper(EpochBatchSampler(len(self.dataset), self.batch_size, self.seed), initial_epoch=e)
        return nodes.Mapper(keys, self.fetch)

    def _overlap_copy(self, host: Iterable[Batch]) -> Iterator[Batch]:
        """Yield device batches; batch i+1's copy is issued only after batch i has been handed out."""
        for batch in host:
            yield self._hand_over(*self._issue_copy(batch))

    def _issue_copy(self, batch: Batch) -> tuple[Batch, cuda_events.Span]:
        span = cuda_events.pool(self.device).span()
        with torch.cuda.stream(self._copy_stream):
            span.start.record(self._copy_stream)
            x, y = (t.to(self.device, non_blocking=True) for t in batch)  # x [B, ...], y [B]
            span.end.record(self._copy_stream)
        return (x, y), span

    def _hand_over(self, batch: Batch, copy_span: cuda_events.Span) -> cuda_events.DeviceBatch:
        compute = torch.cuda.current_stream(self.device)
        wait = cuda_events.pool(self.device).span()
        wait.start.record(compute)
        assert self._copy_stream is not None  # batches are handed over only on CUDA, where the stream is made
        compute.wait_stream(self._copy_stream)  # only this batch's copy: the next one is not issued yet
        wait.end.record(compute)
        for t in batch:
            t.record_stream(compute)  # don't let the allocator reuse it while compute still reads it
        out = cuda_events.DeviceBatch(batch)
        out.copy_span, out.wait_span = copy_span, wait
        return out
