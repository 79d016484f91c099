"""How every loader runs a stream (engine/workloads/stream.py): the same loaders, reading parts instead of keys.

    sync       the training thread reads the one part (a rank's, under ddp) itself
    prefetch   one background thread reads it
    threads    one background thread per worker, each its own part, batches taken round-robin (a stream that
               splits itself sees no worker info in a thread: it is read by one thread)
    processes  torch's DataLoader over an IterableDataset whose workers each read their own part; the epoch
               reaches persistent workers through a shared value

Batches come from each part whole (a part's last batch may be short), with the keys of their items, so the
EpochTally of every epoch counts each part's samples; the epoch's end checks it (ddp: across ranks, check_ranks).

    for x, y in stream_epoch(loader, e): ...
"""

from __future__ import annotations

import math
import multiprocessing
import threading
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from engine.workloads import EpochTally, StreamMismatch

__all__ = ["check_ranks", "close_stream", "stream_epoch", "stream_fetch", "stream_workers"]

Batch = tuple[torch.Tensor, torch.Tensor, list, int]  # x [B, ...], y [B], the items' keys, the part
_UNSIZED_BATCHES = 16  # what the probe takes an epoch of a stream without a length to be (its figures are per batch)


def stream_workers(loader: Any) -> int:
    """The parts this loader reads a rank's stream in: its workers; one for sync, prefetch, and for threads over a
    stream that splits itself (get_worker_info() is None in a thread, so each thread would read all of it)."""
    if not loader.uses_workers or (loader.name == "threads" and loader.dataset.split == "self"):
        return 1
    return max(1, int(loader.workers))


def part_batches(stream: Any, epoch: int, worker: int, workers: int, batch_size: int, collate: Any) -> Iterator[Batch]:
    """Part (stream.rank, worker)'s items in batches of batch_size, collated, with their keys."""
    part, items = stream.rank * workers + worker, []
    for item in stream.part(epoch, worker, workers):
        items.append(item)
        if len(items) == batch_size:
            yield _collated(items, part, collate)
            items = []
    if items:
        yield _collated(items, part, collate)


def _collated(items: list, part: int, collate: Any) -> Batch:
    x, y = collate([(x, y) for x, y, _ in items])
    return x, (y if y.is_floating_point() else y.long()), [k for _, _, k in items], part


def stream_epoch(loader: Any, e: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of the loader's stream; at its end the tally is checked (one rank: here; ddp: check_ranks)."""
    stream, workers = loader.dataset, stream_workers(loader)
    tally = EpochTally(workers)
    for x, y, keys, part in _batches(loader, e, workers):
        tally.add(part, keys)
        if loader.pin:
            x, y = x.pin_memory(), y.pin_memory()
        yield x, y
    loader.stream_tally = tally
    delivered = sum(tally.counts.values())
    earlier: int = getattr(loader, "stream_delivered", 0)  # the most an earlier epoch delivered
    if not delivered and earlier:
        raise StreamMismatch(
            f"epoch {e} of the stream '{stream.spec}' delivered nothing after earlier epochs did: "
            "its iter() does not start over; return an iterable whose __iter__ starts a new pass"
        )
    loader.stream_delivered = max(delivered, earlier)
    if stream.world == 1:
        tally.check(stream, e)


def _batches(loader: Any, e: int, workers: int) -> Iterator[Batch]:
    stream = loader.dataset
    if loader.name == "processes":
        yield from _process_batches(loader, e)
        return
    parts = [part_batches(stream, e, w, workers, loader.batch_size, loader.collate) for w in range(workers)]
    if loader.name == "sync":
        yield from parts[0]
        return
    live = [loader._background(p) for p in parts]
    try:
        while live:  # NOTE: round-robin, as DataLoader takes its workers' batches: the order is the same every run
            for it in list(live):
                try:
                    yield next(it)
                except StopIteration:
                    live.remove(it)
    finally:
        for it in live:
            it.close()


class _Parts(IterableDataset):
    """What the processes loader's DataLoader iterates: in worker w, part (rank, w) of the epoch in `epoch`."""

    def __init__(self, stream: Any, workers: int, batch_size: int, collate: Any, start_method: str):
        self.stream, self.workers, self.batch_size, self.collate = stream, workers, batch_size, collate
        self.epoch = multiprocessing.get_context(start_method).Value("q", 0, lock=False)

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        return part_batches(
            self.stream, int(self.epoch.value), info.id if info else 0, self.workers, self.batch_size, self.collate
        )


def _as_is(batch: Any) -> Any:  # torch types collate_fn for batched loading; batch_size=None passes one Batch
    return batch


def _one_thread(worker_id: int) -> None:
    torch.set_num_threads(1)  # workers must not oversubscribe the cores


def _process_batches(loader: Any, e: int) -> Iterator[Batch]:
    if getattr(loader, "_stream_dl", None) is None:
        parts = _Parts(loader.dataset, stream_workers(loader), loader.batch_size, loader.collate, loader.start_method)
        loader._stream_dl = DataLoader(
            parts,
            batch_size=None,
            num_workers=stream_workers(loader),
            prefetch_factor=loader.prefetch_depth,
            persistent_workers=loader.persistent_workers,
            multiprocessing_context=loader.start_method,
            timeout=loader.timeout_s,
            worker_init_fn=_one_thread,
            collate_fn=_as_is,
        )
    loader._stream_dl.dataset.epoch.value = e  # before iter(): (persistent) workers read it when they start the part
    it = iter(loader._stream_dl)
    try:
        yield from it
    finally:
        if not loader.persistent_workers:
            it._shutdown_workers()  # NOTE: private but stable since torch 1.x (processes.py says why)


def close_stream(loader: Any) -> None:
    """Stop the processes loader's persistent stream workers, if it started any."""
    dl = getattr(loader, "_stream_dl", None)
    it = getattr(dl, "_iterator", None)
    if it is not None:
        it._shutdown_workers()


def stream_fetch(loader: Any) -> tuple[list[int], Callable[[Any], tuple[torch.Tensor, torch.Tensor]]]:
    """The probe's view of a stream: an epoch's batch numbers, and a fetch that returns the next batch of its own
    pass over the stream (a fresh iter(), started over at its end: the run's epochs are never consumed)."""
    stream = loader.dataset
    n = math.ceil(stream.total / loader.batch_size) if stream.total else _UNSIZED_BATCHES
    state: dict[str, Any] = {"it": None}
    lock = threading.Lock()  # NOTE: the probe fetches from two threads at once; a generator takes one at a time

    def fetch(_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        with lock:
            for _ in range(2):
                if state["it"] is None:
                    state["it"] = part_batches(stream, 1, 0, 1, loader.batch_size, loader.collate)
                batch = next(state["it"], None)
                if batch is not None:
                    return batch[0], batch[1]
                state["it"] = None
        raise StreamMismatch(f"the stream '{stream.spec}' delivered nothing on a fresh iter()")

    return list(range(n)), fetch


def check_ranks(loader: Any, epoch: int) -> None:
    """ddp, after every rank's epoch: the ranks' tallies gathered and checked as one (each rank raises the same)."""
    stream = loader.dataset
    tallies: list[Any] = [None] * stream.world
    dist.all_gather_object(tallies, loader.stream_tally)
    EpochTally(stream_workers(loader)).merge(tallies).check(stream, epoch)
