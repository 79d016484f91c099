"""ProcessLoader: torch.utils.data.DataLoader with `workers` processes; sidesteps the GIL at a pickling cost.

The batch plan is the shared EpochBatchSampler, used as DataLoader's batch_sampler: it lives in
this process, so set_epoch before iter() reaches it even with persistent workers. DataLoader's
prefetch_factor is per worker, so up to workers * prefetch_depth batches are in flight.
DataLoader's own "timed out" error becomes LoaderTimeout; close() shuts the workers down.

A killed worker fails the epoch within POLL_S + 1 s, whatever worker_timeout_s is: the consumer waits for a
batch in POLL_S slices, and after each empty slice DataLoader checks its workers' liveness itself (it only
does so when a wait times out, and one wait of worker_timeout_s would hide the death that long). The
error names the worker id, its pid and the signal. DataLoader's SIGCHLD handler can report it sooner,
but only when the loop runs in the main thread.
"""

from __future__ import annotations

import functools
import multiprocessing
import queue
import signal
import time
from typing import Any, Iterator

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from engine.loaders._base import Collate, Device, LoaderTimeout, PooledLoader, note_pools
from engine.measure import cap_pools, hidden_pools

__all__ = ["POLL_S", "ProcessLoader"]

POLL_S = 0.5  # how often a waiting consumer checks that the workers are alive (bounds death detection)


def _init_worker(transform_threads: int, report: Any, worker_id: int) -> None:
    # Module level so that spawn/forkserver can pickle it. Workers must not oversubscribe the cores.
    torch.set_num_threads(1)
    cap_pools(transform_threads)  # the BLAS/OpenMP pools the dataset's imports brought (numpy is loaded by now)
    report.put((worker_id, hidden_pools()))


class ProcessLoader(PooledLoader):
    """PooledLoader's knobs, and start_method (fork, spawn, forkserver) and persistent_workers (kept between epochs)."""

    name = "processes"
    loads_here = False

    def __init__(
        self,
        dataset: Any,
        device: Device = "cpu",
        *,
        workers: int = 2,
        prefetch_depth: int = 2,
        start_method: str = "fork",
        persistent_workers: bool = True,
        batch_size: int = 64,
        seed: int = 0,
        timeout_s: float = 120.0,
        pin_memory: bool = True,
        collate: Collate = "",
        transform_threads: int = 0,
    ):
        self.start_method, self.persistent_workers = start_method, persistent_workers
        super().__init__(
            dataset,
            device,
            workers=workers,
            prefetch_depth=prefetch_depth,
            batch_size=batch_size,
            seed=seed,
            timeout_s=timeout_s,
            pin_memory=pin_memory,
            collate=collate,
            transform_threads=transform_threads,
        )
        # each worker reports the pools it runs the transform with (engine/measure/pools.py)
        self._reports = multiprocessing.get_context(start_method).Queue()
        init = functools.partial(_init_worker, transform_threads, self._reports)
        self._dl = DataLoader(
            dataset,
            batch_sampler=self.sampler,
            num_workers=workers,
            prefetch_factor=prefetch_depth,
            persistent_workers=persistent_workers,
            pin_memory=self.pin,
            multiprocessing_context=start_method,
            timeout=timeout_s,
            worker_init_fn=init,
            collate_fn=self.collate,
        )
        # the DataLoader iterator that owns the worker processes; Any: its fields used here are private, undeclared
        self._it: Any = None

    def _epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.set_epoch(e)
        try:
            # NOTE: inside the try: with persistent workers, iter() waits for every worker to resume
            prev = getattr(self._dl, "_iterator", None)
            if prev is not None:
                prev._timeout = self.timeout_s  # for the resume handshake iter() waits on
            self._it = iter(self._dl)  # persistent workers: the same iterator, reset for the new epoch
            # NOTE: private but stable since torch 1.x: the resume handshake in iter() waits the full
            # worker_timeout_s; batch waits use POLL_S slices (see _next) so a dead worker is seen at once.
            self._it._timeout = POLL_S
            while True:
                try:
                    x, y = self._next()
                except StopIteration:
                    self.worker_pools()  # the workers have run by now: their reports are in
                    return
                yield x, y
        except RuntimeError as err:
            if "DataLoader timed out" not in str(err):
                raise self._worker_death(err) or err
            # NOTE: stuck or frozen workers are killed at once: DataLoader's shutdown joins each for 5 s,
            # and one stopped by SIGSTOP never dies of the SIGTERM that follows (its exit would hang)
            self._kill_workers()
            raise LoaderTimeout.after(self.name, self.timeout_s) from None
        except Exception as err:  # noqa: BLE001 - re-raised as it came unless a dead worker explains it
            # NOTE: a worker killed while handing over a batch's shared memory surfaces as a bare EOFError or
            # "connection reset" from the pipe, or as a KeyError naming multiprocessing's QueueFeederThread (a
            # worker killed in the first epoch): name the dead worker instead
            raise self._worker_death(err) or err
        finally:
            if not self.persistent_workers:
                self._stop_workers()

    def _next(self) -> tuple[Tensor, Tensor]:
        """The next batch, waiting at most worker_timeout_s in POLL_S slices.

        Retrying next() after DataLoader's "timed out" is safe: it raises before touching any of the
        iterator's bookkeeping (nothing was received), and each empty slice runs its liveness check."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return next(self._it)
            except RuntimeError as err:
                if "DataLoader timed out" not in str(err) or time.monotonic() >= deadline:
                    raise

    def worker_pools(self) -> list[dict[str, Any]]:
        """The pools the workers reported as they started (the largest), noted for the run's record too."""
        seen: list[list[dict[str, Any]]] = []  # one list of pools per worker
        while True:
            try:
                seen.append(self._reports.get_nowait()[1])
            except (queue.Empty, OSError, ValueError):
                break
        largest = max(seen, key=lambda pools: max((p["threads"] for p in pools), default=0), default=[])
        if seen:
            note_pools("worker", largest)
        return largest

    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (best effort: empty between non-persistent epochs)."""
        workers = getattr(self._it, "_workers", None) or []
        return [w.pid for w in workers if w.pid is not None and w.is_alive()]

    def _worker_death(self, err: BaseException) -> RuntimeError | None:
        """A clear error if a worker process has died (what `err` really means then), else None."""
        it: Any = self._it or getattr(self._dl, "_iterator", None) or _iterator_in(err)
        workers = list(enumerate(getattr(it, "_workers", None) or []))
        dead = [(i, w) for i, w in workers if not w.is_alive()]  # is_alive() reaps a dead worker, no wait
        if not dead:
            # a worker killed mid-hand-over may break the pipe a moment before it can be reaped
            deadline = time.monotonic() + 1.0
            for i, w in workers:
                w.join(timeout=max(0.0, deadline - time.monotonic()))
            dead = [(i, w) for i, w in workers if w.exitcode is not None]
        if not dead:
            return None
        i, w = dead[0]
        return RuntimeError(
            f"processes loader: worker {i} (pid {w.pid}) {_how(w.exitcode)} while loading "
            f"({type(err).__name__}: {err}); check its memory use (the OOM killer sends "
            f"SIGKILL), or what killed it"
        )

    def _kill_workers(self) -> None:
        it: Any = self._it or getattr(self._dl, "_iterator", None)
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
        self.worker_pools()
        self._reports.close()


def _iterator_in(err: BaseException) -> Any:
    """The DataLoader iterator that was being built when `err` came, from its traceback's frames, else None.

    NOTE: a worker killed while iter() starts its workers (killed in the first epoch) interrupts the iterator's
    __init__, with a KeyError naming multiprocessing's QueueFeederThread: neither self._it nor the DataLoader's
    _iterator is set yet, and only the frames hold the workers to ask which one died."""
    tb = err.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if candidate is not None and hasattr(candidate, "_workers") and hasattr(candidate, "_index_queues"):
            return candidate
        tb = tb.tb_next
    return None


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "died"
    if exitcode < 0:
        try:
            return f"was killed by signal {-exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"
