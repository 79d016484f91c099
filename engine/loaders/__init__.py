"""Loaders: how batches get from a map-style dataset to the training loop.

    sync       the training thread fetches and collates each batch itself
    prefetch   one background thread keeps batches ready; on CUDA it also overlaps the host-to-device copy
    threads    N threads (torchdata.nodes.ParallelMapper) build batches in parallel
    processes  N worker processes (torch DataLoader)
    spdl       an SPDL pipeline (spdl.pipeline): N threads fetch samples, then aggregate and collate

LOADERS maps each name to its class. All take (dataset, cfg, device), yield the same batches in the same
order for a given seed and epoch via `loader.epoch(e)`, raise LoaderTimeout when no batch arrives within
cfg.worker_timeout_s, and are context managers whose close() stops their threads and processes.
`to_device(batch, device)` is the copy every mode makes (a no-op for batches a loader already placed).
Every loader caps the BLAS/OpenMP pools where its items load at cfg.transform_threads (0: as they are) and notes
them: `seen_pools()` is what the run records (engine/measure/pools.py). A stream (the user's iterable) is read in
parts by the same loaders (_stream.py); ddp checks it with check_ranks.
"""

from engine.loaders._base import Loader, LoaderTimeout, epoch_batches, seen_pools, to_device
from engine.loaders._stream import check_ranks, stream_fetch
from engine.loaders.prefetch import PrefetchLoader
from engine.loaders.processes import ProcessLoader
from engine.loaders.spdl import SpdlLoader
from engine.loaders.sync import SyncLoader
from engine.loaders.threads import ThreadLoader
from engine.names import unique

__all__ = ["LOADERS", "Loader", "LoaderTimeout", "PrefetchLoader", "ProcessLoader", "SpdlLoader", "SyncLoader",
           "ThreadLoader", "check_ranks", "epoch_batches", "seen_pools", "stream_fetch", "to_device"]

LOADERS = unique("loader", [
    ("sync", SyncLoader), ("prefetch", PrefetchLoader), ("threads", ThreadLoader), ("processes", ProcessLoader),
    ("spdl", SpdlLoader),
])
