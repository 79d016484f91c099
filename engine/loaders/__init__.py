"""Loaders: how batches get from a map-style dataset to the training loop.

    sync       the training thread fetches and collates each batch itself
    prefetch   one background thread keeps batches ready; on CUDA it also overlaps the host-to-device copy
    threads    N threads (torchdata.nodes.ParallelMapper) build batches in parallel
    processes  N worker processes (torch DataLoader)
    spdl       an SPDL pipeline (spdl.pipeline): N threads fetch samples, then aggregate and collate

LOADERS maps each name to its class. Each takes (dataset, device) and, as keyword arguments, the knobs it uses, with
the RunConfig field's default (workers: 2): every loader batch_size, seed, timeout_s (a run's worker_timeout_s),
pin_memory, collate and transform_threads; prefetch prefetch_depth; threads and spdl workers and prefetch_depth;
processes those and start_method and persistent_workers. A notebook builds one by hand, a run with `open_loader`,
the one place a RunConfig's fields become a loader's arguments:

    ThreadLoader(dataset, "cpu", batch_size=32, workers=4)
    open_loader(dataset, cfg, device)                  # LOADERS[cfg.loader] with the knobs it takes from cfg
    open_loader(dataset, cfg, device, loader="sync")   # cfg's knobs, on the sync loader (a pass of the lab's own)

All yield the same batches in the same order for a given seed and epoch via `loader.epoch(e)`, raise LoaderTimeout
when no batch arrives within timeout_s, and are context managers whose close() stops their threads and processes.
`to_device(batch, device)` is the copy every mode makes (a no-op for batches a loader already placed).
Every loader caps the BLAS/OpenMP pools where its items load at transform_threads (0: as they are) and notes
them: `seen_pools()` is what the run records (engine/measure/pools.py). A stream (the user's iterable) is read in
parts by the same loaders (_stream.py); ddp checks it with check_ranks.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from engine.loaders._base import Device, Loader, LoaderTimeout, epoch_batches, seen_pools, to_device
from engine.loaders._stream import check_ranks, stream_fetch
from engine.loaders.prefetch import PrefetchLoader
from engine.loaders.processes import ProcessLoader
from engine.loaders.spdl import SpdlLoader
from engine.loaders.sync import SyncLoader
from engine.loaders.threads import ThreadLoader
from engine.names import unique

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = [
    "LOADERS",
    "Loader",
    "LoaderTimeout",
    "PrefetchLoader",
    "ProcessLoader",
    "SpdlLoader",
    "SyncLoader",
    "ThreadLoader",
    "check_ranks",
    "epoch_batches",
    "loader_args",
    "open_loader",
    "seen_pools",
    "stream_fetch",
    "to_device",
]

LOADERS = unique(
    "loader",
    [
        ("sync", SyncLoader),
        ("prefetch", PrefetchLoader),
        ("threads", ThreadLoader),
        ("processes", ProcessLoader),
        ("spdl", SpdlLoader),
    ],
)

_FIELDS = {"timeout_s": "worker_timeout_s"}  # a loader's knob -> the RunConfig field it is read from, where they differ


def loader_args(cls: type[Loader], cfg: RunConfig) -> dict[str, Any]:
    """The knobs `cls` takes (its constructor's keyword-only parameters), read from cfg's fields of those names."""
    params = inspect.signature(cls).parameters.values()
    return {p.name: getattr(cfg, _FIELDS.get(p.name, p.name)) for p in params if p.kind is p.KEYWORD_ONLY}


def open_loader(dataset: Any, cfg: RunConfig, device: Device, *, loader: str | None = None) -> Loader:
    """cfg's loader (or the one named `loader`) over `dataset` on `device`, given only the knobs it takes."""
    cls = LOADERS[loader or cfg.loader]
    return cls(dataset, device, **loader_args(cls, cfg))
