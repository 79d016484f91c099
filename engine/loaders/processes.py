"""ProcessLoader: torch.utils.data.DataLoader with `workers` processes; sidesteps the GIL at a pickling cost.

The batch plan is the shared EpochBatchSampler, used as DataLoader's batch_sampler: it lives in
this process, so set_epoch before iter() reaches it even with persistent workers. DataLoader's
prefetch_factor is per worker, so up to workers * prefetch_depth batches are in flight.
DataLoader's own "timed out" error becomes LoaderTimeout; close() shuts the workers down.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from engine.config import ConfigError
from engine.loaders._base import Loader, LoaderTimeout

__all__ = ["ProcessLoader"]


def _init_worker(worker_id: int) -> None:
    # Module level so that spawn/forkserver can pickle it. Workers must not oversubscribe the cores.
    torch.set_num_threads(1)


class ProcessLoader(Loader):
    name = "processes"

    def __init__(self, dataset, cfg, device):
        if cfg.workers < 1:
            raise ConfigError("workers", f"the processes loader needs workers >= 1, got {cfg.workers}")
        super().__init__(dataset, cfg, device)
        self._dl = DataLoader(
            dataset, batch_sampler=self.sampler, num_workers=cfg.workers, prefetch_factor=cfg.prefetch_depth,
            persistent_workers=cfg.persistent_workers, pin_memory=self.pin,
            multiprocessing_context=cfg.start_method, timeout=cfg.worker_timeout_s, worker_init_fn=_init_worker,
        )
        self._it = None  # the DataLoader iterator that owns the worker processes

    def _epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.set_epoch(e)
        self._it = iter(self._dl)  # persistent workers: the same iterator, reset for the new epoch
        try:
            while True:
                try:
                    x, y = next(self._it)
                except StopIteration:
                    return
                except RuntimeError as err:
                    if "DataLoader timed out" in str(err):
                        raise LoaderTimeout.after(self.name, self.cfg.worker_timeout_s) from None
                    raise
                yield x, y
        finally:
            if not self.cfg.persistent_workers:
                self._stop_workers()

    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (best effort: empty between non-persistent epochs)."""
        workers = getattr(self._it, "_workers", None) or []
        return [w.pid for w in workers if w.pid is not None and w.is_alive()]

    def _stop_workers(self) -> None:
        it, self._it = self._it, None
        if it is not None and hasattr(it, "_shutdown_workers"):
            # NOTE: private but stable since torch 1.x; waiting for garbage collection instead would leave
            # workers alive whenever a traceback still references the iterator.
            it._shutdown_workers()

    def _shutdown(self) -> None:
        self._stop_workers()  # persistent workers: the DataLoader's cached iterator is this same one
