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

from engine.loaders._base import Loader, LoaderTimeout

__all__ = ["ProcessLoader"]


def _init_worker(worker_id: int) -> None:
    # Module level so that spawn/forkserver can pickle it. Workers must not oversubscribe the cores.
    torch.set_num_threads(1)


class ProcessLoader(Loader):
    name = "processes"
    uses_workers = True

    def __init__(self, dataset, cfg, device):
        super().__init__(dataset, cfg, device)
        self._dl = DataLoader(
            dataset, batch_sampler=self.sampler, num_workers=cfg.workers, prefetch_factor=cfg.prefetch_depth,
            persistent_workers=cfg.persistent_workers, pin_memory=self.pin,
            multiprocessing_context=cfg.start_method, timeout=cfg.worker_timeout_s, worker_init_fn=_init_worker,
        )
        self._it = None  # the DataLoader iterator that owns the worker processes

    def _epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.set_epoch(e)
        try:
            # NOTE: inside the try: with persistent workers, iter() waits for every worker to resume
            self._it = iter(self._dl)  # persistent workers: the same iterator, reset for the new epoch
            while True:
                try:
                    x, y = next(self._it)
                except StopIteration:
                    return
                yield x, y
        except RuntimeError as err:
            if "DataLoader timed out" not in str(err):
                raise self._worker_death(err) or err
            # NOTE: stuck or frozen workers are killed at once: DataLoader's shutdown joins each for 5 s,
            # and one stopped by SIGSTOP never dies of the SIGTERM that follows (its exit would hang)
            self._kill_workers()
            raise LoaderTimeout.after(self.name, self.cfg.worker_timeout_s) from None
        except (EOFError, OSError) as err:
            # NOTE: a worker killed while handing over a batch's shared memory surfaces as a bare EOFError
            # or "connection reset" from the pipe: name the dead worker instead
            raise self._worker_death(err) or err
        finally:
            if not self.cfg.persistent_workers:
                self._stop_workers()

    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (best effort: empty between non-persistent epochs)."""
        workers = getattr(self._it, "_workers", None) or []
        return [w.pid for w in workers if w.pid is not None and w.is_alive()]

    def _worker_death(self, err: BaseException) -> RuntimeError | None:
        """A clear error if a worker process has died (what `err` really means then), else None."""
        it = self._it or getattr(self._dl, "_iterator", None)
        for w in getattr(it, "_workers", None) or []:
            w.join(timeout=0.5)  # reaps a dead worker; a live one costs at most this wait, on an error path
            if w.exitcode is not None:
                how = f"signal {-w.exitcode}" if w.exitcode < 0 else f"exit status {w.exitcode}"
                return RuntimeError(f"processes loader: worker pid {w.pid} died ({how}) while loading "
                                    f"({type(err).__name__}: {err}); check its memory use, or what killed it")
        return None

    def _kill_workers(self) -> None:
        it = self._it or getattr(self._dl, "_iterator", None)
        if getattr(it, "_worker_pids_set", False):
            # unregister first, or DataLoader's SIGCHLD handler reports the kill as the error instead
            torch.utils.data._utils.signal_handling._remove_worker_pids(id(it))
            it._worker_pids_set = False
        for w in getattr(it, "_workers", None) or []:
            if w.is_alive():
                w.kill()

    def _stop_workers(self) -> None:
        it, self._it = self._it, None
        if it is not None and hasattr(it, "_shutdown_workers"):
            # NOTE: private but stable since torch 1.x; waiting for garbage collection instead would leave
            # workers alive whenever a traceback still references the iterator.
            it._shutdown_workers()

    def _shutdown(self) -> None:
        self._stop_workers()  # persistent workers: the DataLoader's cached iterator is this same one
