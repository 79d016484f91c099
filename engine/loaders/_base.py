"""What every loader shares: the per-epoch batch plan, the Loader base class, and a timed hand-off thread.

Every loader yields the same batches in the same order for a given (seed, epoch): the plan comes
from `epoch_batches`, and only *who* fetches and collates the samples differs between loaders.

    with ThreadLoader(dataset, "cpu", batch_size=32, workers=4) as loader:   # the rest as RunConfig's defaults
        for e in range(3):
            for x, y in loader.epoch(e):   # x [B, ...] float32, y [B] long
                ...

Each loader takes the knobs it uses as keyword arguments, after (dataset, device); a run builds its loader from
its RunConfig with engine.loaders.open_loader, the one place a config's fields become a loader's arguments.
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
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import Tensor
from torch._utils import ExceptionWrapper  # NOTE: what DataLoader and torchdata use to carry worker errors
from torch.utils.data import Sampler, default_collate

from engine.loaders._stream import close_stream, stream_epoch
from engine.measure import cap_pools, hidden_pools
from engine.names import WORKER_LOADERS, check_workers
from engine.plugins import resolve
from engine.workloads import is_stream

__all__ = [
    "BackgroundIterator",
    "Collate",
    "Device",
    "EpochBatchSampler",
    "Loader",
    "LoaderTimeout",
    "PooledLoader",
    "epoch_batches",
    "seen_pools",
    "to_device",
]

log = logging.getLogger(__name__)
Key = tuple[int, int]  # (epoch, index): what a dataset's __getitem__ takes
Device = torch.device | str
Collate = str | Callable[[list], Any]  # a 'module.path:callable' spec or the callable itself; '': default_collate
_END = object()
_SEEN: dict[str, list[dict[str, Any]]] = {}  # the pools this process's loaders saw where items load, by place


def seen_pools() -> dict[str, list[dict[str, Any]]]:
    """{place: pools} as the loaders of this process last saw them (engine/measure/pools.py): `training` (sync),
    `producer` (prefetch, threads), `worker` (a processes loader's workers), after transform_threads applied."""
    return dict(_SEEN)


def note_pools(place: str, pools: list[dict[str, Any]]) -> None:
    _SEEN[place] = pools


class LoaderTimeout(RuntimeError):
    """No batch arrived within the loader's timeout_s (a run's worker_timeout_s) seconds.
    Build it with LoaderTimeout.after(...)."""

    @classmethod
    def after(cls, who: str, timeout_s: float) -> "LoaderTimeout":
        return cls(
            f"{who} loader: no batch arrived within {timeout_s:g} s (worker_timeout_s); a worker is "
            f"stuck or the dataset is too slow: raise worker_timeout_s or check the dataset"
        )


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[Key]]:
    """A permutation of range(n) seeded by (seed, epoch), cut into batches of (epoch, index) keys."""
    # NOTE: torch's CPU generator (mt19937) keeps only the low 32 bits of a seed, so (seed, epoch)
    # is hashed into 32 bits rather than packed into disjoint bit ranges (which would drop the seed).
    mixed = int.from_bytes(hashlib.sha256(f"loaderlab:{seed}:{epoch}".encode()).digest()[:4], "little")
    g = torch.Generator().manual_seed(mixed)
    order = torch.randperm(n, generator=g).tolist()
    return [[(epoch, i) for i in order[s : s + batch_size]] for s in range(0, n, batch_size)]


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
        assert self._source is not None  # set before the thread starts; only this method's end drops it
        try:
            for item in self._source:
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


def _collate_for(collate: Collate) -> Callable[[list], Any]:
    """The loader's collate: a callable as given, a user's 'module:callable' resolved, '' torch's default_collate."""
    if callable(collate):
        return collate
    return resolve(collate, "collate") if collate else default_collate


class Loader:
    """Base class: `epoch(e)` yields collated (x, y) batches; close() releases threads and processes.

    The knobs every loader takes, keyword-only, each default the RunConfig field's: batch_size and seed (the batch
    plan), timeout_s (RunConfig's worker_timeout_s: how long a consumer waits for a batch; sync waits on nobody),
    pin_memory (pin batches bound for a CUDA device), collate (a 'module:callable' spec or a callable; '' is torch's
    default_collate) and transform_threads (the BLAS/OpenMP pools where items load; 0: as they are). A loader that
    takes more sets its own knobs, then calls this: PooledLoader (workers, prefetch_depth) and PrefetchLoader."""

    name = "base"
    uses_workers = False  # per loader, from engine.names.WORKER_LOADERS (threads, processes, spdl): workers >= 1
    loads_here = True  # items load in this process (processes: in its workers, which cap their own pools)
    workers = 0  # the threads or processes items load on (0: the loader's own thread)
    prefetch_depth = 0  # batches kept ready by a background producer (sync has none)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.uses_workers = cls.name in WORKER_LOADERS

    def __init__(
        self,
        dataset: Any,
        device: Device = "cpu",
        *,
        batch_size: int = 64,
        seed: int = 0,
        timeout_s: float = 120.0,
        pin_memory: bool = True,
        collate: Collate = "",
        transform_threads: int = 0,
    ):
        check_workers(self.name, self.workers)  # before anything starts: the same error a config's check gives
        self.dataset, self.device = dataset, torch.device(device)
        self.batch_size, self.seed, self.timeout_s = batch_size, seed, timeout_s
        self.pin_memory, self.transform_threads = pin_memory, transform_threads
        self.stream = is_stream(dataset)  # the user's iterable: read in parts (engine/loaders/_stream.py)
        # NOTE: a plugin dataset finds out here, in the building thread, whether its items need the lock, not in the
        # first loading thread (the check seeds the global generators and restores them)
        if callable(decide := getattr(dataset, "decide_lock", None)):
            decide()
        self.sampler = EpochBatchSampler(0 if self.stream else len(dataset), batch_size, seed)
        self.pin = bool(pin_memory) and self.device.type == "cuda"  # pinning only helps a CUDA copy
        self.collate = _collate_for(collate)
        self._active: weakref.ref | None = None  # the epoch generator in flight, if any
        self._producers: list[BackgroundIterator] = []  # finished epochs' producers, joined at close()
        self._closed = False
        self._here = threading.local()  # whether this thread has applied transform_threads yet
        self._caps: list[Any] = []  # threadpoolctl limiters to undo at close(), oldest first
        if self.loads_here:
            self._cap_pools()  # NOTE: here too, not only in the loading threads: see _pools_here
        self._open()

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
        producer = BackgroundIterator(source, self.prefetch_depth, self.timeout_s, self.name)
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
        if (cap := cap_pools(self.transform_threads)) is not None:
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

    def _open(self) -> None:
        """Subclasses set up what outlives one epoch (close() calls _shutdown to release it)."""

    def _shutdown(self) -> None:
        """Subclasses release what outlives one epoch (e.g. persistent worker processes)."""

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PooledLoader(Loader):
    """A loader whose items load on `workers` threads or processes (at least one), with `prefetch_depth` batches
    kept ready: threads and spdl as they are; processes takes its own knobs besides."""

    def __init__(
        self,
        dataset: Any,
        device: Device = "cpu",
        *,
        workers: int = 2,
        prefetch_depth: int = 2,
        batch_size: int = 64,
        seed: int = 0,
        timeout_s: float = 120.0,
        pin_memory: bool = True,
        collate: Collate = "",
        transform_threads: int = 0,
    ):
        self.workers, self.prefetch_depth = workers, prefetch_depth
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
