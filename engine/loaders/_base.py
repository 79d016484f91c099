"""What every loader shares: the per-epoch batch plan, the Loader base class, and a timed hand-off thread.

Every loader yields the same batches in the same order for a given (seed, epoch): the plan comes
from `epoch_batches`, and only *who* fetches and collates the samples differs between loaders.

    with ThreadLoader(dataset, cfg, device) as loader:
        for e in range(cfg.epochs):
            for x, y in loader.epoch(e):   # x [B, ...] float32, y [B] long
                ...
"""

from __future__ import annotations

import hashlib
import logging
import math
import queue
import sys
import threading
import traceback
import weakref
from typing import Any, Iterable, Iterator

import torch
from torch import Tensor
from torch._utils import ExceptionWrapper  # NOTE: what DataLoader and torchdata use to carry worker errors
from torch.utils.data import Sampler, default_collate

from engine.errors import ConfigError
from engine.loaders._stream import close_stream, stream_epoch
from engine.measure.pools import cap_pools, hidden_pools
from engine.plugins import resolve
from engine.workloads import is_stream

__all__ = ["BackgroundIterator", "EpochBatchSampler", "Loader", "LoaderTimeout", "epoch_batches", "seen_pools",
           "to_device"]

log = logging.getLogger(__name__)
Key = tuple[int, int]  # (epoch, index): what a dataset's __getitem__ takes
_END = object()
_SEEN: dict[str, list[dict[str, Any]]] = {}  # the pools this process's loaders saw where items load, by place


def seen_pools() -> dict[str, list[dict[str, Any]]]:
    """{place: pools} as the loaders of this process last saw them (engine/measure/pools.py): `training` (sync),
    `producer` (prefetch, threads), `worker` (a processes loader's workers), after transform_threads applied."""
    return dict(_SEEN)


def note_pools(place: str, pools: list[dict[str, Any]]) -> None:
    _SEEN[place] = pools


class LoaderTimeout(RuntimeError):
    """No batch arrived within cfg.worker_timeout_s seconds. Build it with LoaderTimeout.after(...)."""

    @classmethod
    def after(cls, who: str, timeout_s: float) -> "LoaderTimeout":
        return cls(f"{who} loader: no batch arrived within {timeout_s:g} s (worker_timeout_s); a worker is "
                   f"stuck or the dataset is too slow: raise worker_timeout_s or check the dataset")


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[Key]]:
    """A permutation of range(n) seeded by (seed, epoch), cut into batches of (epoch, index) keys."""
    # NOTE: torch's CPU generator (mt19937) keeps only the low 32 bits of a seed, so (seed, epoch)
    # is hashed into 32 bits rather than packed into disjoint bit ranges (which would drop the seed).
    mixed = int.from_bytes(hashlib.sha256(f"loaderlab:{seed}:{epoch}".encode()).digest()[:4], "little")
    g = torch.Generator().manual_seed(mixed)
    order = torch.randperm(n, generator=g).tolist()
    return [[(epoch, i) for i in order[s:s + batch_size]] for s in range(0, n, batch_size)]


def to_device(batch: tuple[Tensor, Tensor], device: torch.device) -> tuple[Tensor, Tensor]:
    """Copy a batch to the device; a no-op for batches a prefetching loader already placed there."""
    x, y = batch
    if x.device == device:
        return x, y
    non_blocking = device.type == "cuda"
    return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)


class EpochBatchSampler(Sampler[list[Key]]):
    """Yields epoch_batches for the epoch last given to set_epoch (DataLoader's batch_sampler protocol)."""

    def __init__(self, n: int, batch_size: int, seed: int, epoch: int = 0):
        self.n, self.batch_size, self.seed, self.epoch = n, batch_size, seed, epoch

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[Key]]:
        return iter(epoch_batches(self.n, self.batch_size, self.seed, self.epoch))

    def __len__(self) -> int:
        return math.ceil(self.n / self.batch_size)


class BackgroundIterator:
    """Drains `source` on a daemon thread into a queue of `depth` items; the consumer waits at most timeout_s.

    NOTE: torchdata.nodes.Prefetcher does the same job but its next() waits forever, so a stuck
    worker would hang the run; this is the one piece we write ourselves to get worker_timeout_s.
    A producer error is re-raised in the consumer with its original message and traceback text.
    """

    def __init__(self, source: Iterable[Any], depth: int, timeout_s: float, who: str):
        self.who, self.timeout_s = who, timeout_s
        self._source: Iterable[Any] | None = source
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.ended = False  # the consumer saw the end of the epoch
        self._thread = threading.Thread(target=self._run, name=f"loaderlab-{who}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        torch.set_num_threads(1)  # a producer must not compete with the training loop's intra-op threads
        try:
            for item in self._source:  # type: ignore[union-attr]
                if not self._put(item):
                    return
            self._put(_END)
        except Exception:
            self._put(ExceptionWrapper(where=f"in the {self.who} loader's producer"))
            # The re-raise inside torchdata leaves a traceback <-> frame cycle that would keep the graph
            # (and its worker threads) alive until the next gc run; clearing the frames breaks it now.
            traceback.clear_frames(sys.exc_info()[2])
        finally:
            self._source = None  # drops a torchdata.nodes graph here, which shuts its worker threads down

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            item = self._q.get(timeout=self.timeout_s)
        except queue.Empty:
            raise LoaderTimeout.after(self.who, self.timeout_s) from None
        if item is _END:
            self.ended = True
            self._q.put_nowait(_END)  # later next() calls stop too instead of timing out
            raise StopIteration
        if isinstance(item, ExceptionWrapper):
            item.reraise()
        return item

    def close(self, wait_s: float = 2.0) -> None:
        self._stop.set()
        if self.ended:
            # NOTE: after a complete epoch the producer only has torchdata's worker threads left to stop,
            # which poll at 0.1 s; joining here would charge that to every epoch. Loader.close() joins it.
            return
        self.join(wait_s)

    def join(self, wait_s: float = 2.0) -> None:
        self._thread.join(timeout=wait_s)
        if self._thread.is_alive():
            # It is inside a slow dataset call; it exits (daemon) as soon as that call returns.
            log.warning("%s loader: producer thread still busy after %.1f s; leaving it to finish", self.who, wait_s)


def _collate_for(cfg: Any) -> Any:
    """The run's `collate` (a user's 'module:callable'), else torch's default_collate."""
    spec = getattr(cfg, "collate", "")
    if not spec:
        return default_collate
    return resolve(spec, "collate")


class Loader:
    """Base class: `epoch(e)` yields collated (x, y) batches; close() releases threads and processes."""

    name = "base"
    uses_workers = False  # threads and processes need cfg.workers >= 1
    loads_here = True  # items load in this process (processes: in its workers, which cap their own pools)

    def __init__(self, dataset: Any, cfg: Any, device: torch.device | str):
        if self.uses_workers and cfg.workers < 1:
            raise ConfigError("workers", f"the {self.name} loader needs workers >= 1, got {cfg.workers}")
        self.dataset, self.cfg, self.device = dataset, cfg, torch.device(device)
        self.stream = is_stream(dataset)  # the user's iterable: read in parts (engine/loaders/_stream.py)
        self.sampler = EpochBatchSampler(0 if self.stream else len(dataset), cfg.batch_size, cfg.seed)
        self.pin = bool(cfg.pin_memory) and self.device.type == "cuda"  # pinning only helps a CUDA copy
        self.collate = _collate_for(cfg)
        self._active: weakref.ref | None = None  # the epoch generator in flight, if any
        self._producers: list[BackgroundIterator] = []  # finished epochs' producers, joined at close()
        self._closed = False
        self._here = threading.local()  # whether this thread has applied transform_threads yet
        self._caps: list[Any] = []  # threadpoolctl limiters to undo at close(), oldest first
        if self.loads_here:
            self._cap_pools()  # NOTE: here too, not only in the loading threads: see _pools_here

    @property
    def num_batches(self) -> int:
        return len(self.sampler)

    def epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        if self._closed:
            raise RuntimeError(f"{self.name} loader is closed; build a new one to load more epochs")
        self._finish_active()  # an abandoned earlier epoch must not keep producing
        gen = stream_epoch(self, e) if self.stream else self._epoch(e)
        self._active = weakref.ref(gen)
        return gen

    def _epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        raise NotImplementedError

    def _background(self, source: Iterable[Any]) -> BackgroundIterator:
        """A producer thread for one epoch, owned by this loader so close() can join it."""
        self._producers = [p for p in self._producers if p._thread.is_alive()]
        producer = BackgroundIterator(source, self.cfg.prefetch_depth, self.cfg.worker_timeout_s, self.name)
        self._producers.append(producer)
        return producer

    def fetch(self, keys: list[Key]) -> tuple[Tensor, Tensor]:
        """One batch: the samples of `keys`, collated (pinned when it will be copied to CUDA)."""
        if not getattr(self._here, "pools", False):
            self._pools_here()
        return self.assemble([self.dataset[k] for k in keys])

    def assemble(self, samples: list[Any]) -> tuple[Tensor, Tensor]:
        """Collate fetched samples into one batch (pinned when it will be copied to CUDA)."""
        x, y = self.collate(samples)
        y = y if y.is_floating_point() else y.long()  # NOTE: float labels are a user's soft targets: keep them
        if self.pin:
            x, y = x.pin_memory(), y.pin_memory()
        return x, y

    def _pools_here(self) -> None:
        """Once per loading thread: cap the transform's pools at transform_threads (0: as they are), and note them.

        NOTE: per thread, because an OpenMP runtime's limit is the calling thread's; BLAS limits are the
        process's, and close() undoes them (a loader in a test or notebook must not leave them capped). The
        constructing thread caps them first: OpenBLAS ignores a cap set from a new thread once an earlier cap
        was undone (threadpoolctl 3.8, scipy-openblas 0.3.x), but not one set from the thread that undid it."""
        self._here.pools = True
        self._cap_pools()
        note_pools("training" if self.name == "sync" else "producer", hidden_pools())

    def _cap_pools(self) -> None:
        if (cap := cap_pools(getattr(self.cfg, "transform_threads", 0))) is not None:
            self._caps.append(cap)

    def _finish_active(self) -> None:
        gen = self._active() if self._active is not None else None
        self._active = None
        if gen is not None:
            gen.close()  # runs the generator's finally: stops its producer

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._finish_active()
        for producer in self._producers:
            producer.join()
        self._producers.clear()
        close_stream(self)
        self._shutdown()
        for cap in reversed(self._caps):  # newest first: the oldest holds the pools' original sizes
            cap.restore_original_limits()
        self._caps.clear()

    def _shutdown(self) -> None:
        """Subclasses release what outlives one epoch (e.g. persistent worker processes)."""

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
