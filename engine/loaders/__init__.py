"""Loaders: how batches get from a map-style dataset to the training loop.

    sync       the training thread fetches and collates each batch itself
    prefetch   one background thread keeps batches ready; on CUDA it also overlaps the host-to-device copy
    threads    N threads (torchdata.nodes.ParallelMapper) build batches in parallel
    processes  N worker processes (torch DataLoader)

All take (dataset, cfg, device), yield the same batches in the same order for a given seed and
epoch via `loader.epoch(e)`, raise LoaderTimeout when no batch arrives within
cfg.worker_timeout_s, and are context managers whose close() stops their threads and processes.
"""

from engine.loaders._base import Loader, LoaderTimeout, epoch_batches
from engine.loaders.prefetch import PrefetchLoader
from engine.loaders.processes import ProcessLoader
from engine.loaders.sync import SyncLoader
from engine.loaders.threads import ThreadLoader

__all__ = ["Loader", "LoaderTimeout", "PrefetchLoader", "ProcessLoader", "SyncLoader", "ThreadLoader",
           "epoch_batches"]
