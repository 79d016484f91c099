"""SpdlLoader: an SPDL pipeline (Meta's spdl.pipeline, spdl_core) fetches samples on `workers` threads.

A dataset that offers SPDL's own decoders (`spdl_fetch()`: the jpeg workload, where spdl_io and FFmpeg load,
engine/workloads/_spdl_decode.py) is fetched through them, GIL-free; any other through its own __getitem__.

Pipeline, built per epoch:
    source(the epoch's batch plan, flattened to (epoch, index) keys)
    -> pipe(fetch one sample, concurrency=workers, output_order="input")
    -> aggregate(batch_size)          # consecutive keys of the plan: exactly its batches, the last one short
    -> pipe(collate [+ pin on CUDA])
    -> sink(prefetch_depth)

Stage functions run on this loader's pool of `workers` threads, each with torch.set_num_threads(1), under
SPDL's asyncio event loop thread: like `threads`, it wins when the dataset releases the GIL and loses to
processes on pure-Python work. SPDL's own failure handling skips a failed item by default; here a stage's
exception travels down the pipeline as a value and is re-raised in the consumer with its original message
(max_failures=0 halts the pipeline on anything else). No batch within timeout_s (a run's worker_timeout_s) raises
LoaderTimeout naming the stage that holds calls in flight; a pipeline that ends short of the plan (stopped,
cancelled) fails the epoch.

NOTE: SPDL orchestrates each *sample* (an asyncio task and two thread hand-offs), where torchdata's ParallelMapper
hands over whole batches: its cost per sample is SPDL's own, and bench/loaders.py --versus measures it.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import torch
from spdl.pipeline import Pipeline, PipelineBuilder
from torch import Tensor
from torch._utils import ExceptionWrapper

from engine.loaders._base import LoaderTimeout, PooledLoader

__all__ = ["SpdlLoader"]

log = logging.getLogger(__name__)
STOP_S = 3.0  # how long close() waits for SPDL's event loop to wind down (a stuck stage call is not waited for)


class _Watch:
    """One epoch's stage bookkeeping: the calls in flight per stage, and the stage threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: dict[str, dict[int, float]] = {}  # stage -> {call id: start time}
        self.threads: list[threading.Thread] = []  # the pool's threads, joined at close()

    def wrap(self, stage: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """fn, timed in flight; its exception becomes an ExceptionWrapper *value* that travels down the pipeline.

        NOTE: a value, not a raise: SPDL logs every failed task's traceback (ERROR, to stderr), and a run that
        fails must say so in one line. A batch holding a wrapped error is that error (see _first_error)."""

        def run(arg: Any) -> Any:
            call = id(arg)
            with self._lock:
                self._busy.setdefault(stage, {})[call] = time.monotonic()
            try:
                return _first_error(arg) or fn(arg)
            except Exception:
                return ExceptionWrapper(where=f"in the spdl loader's '{stage}' stage")
            finally:
                with self._lock:
                    self._busy[stage].pop(call, None)

        return run

    def started(self) -> None:  # the pool's initializer: runs on each new stage thread
        torch.set_num_threads(1)  # a stage thread must not compete with the training loop's intra-op threads
        self.threads.append(threading.current_thread())

    def stuck(self) -> str:
        """Which stage holds the oldest call in flight, in words."""
        with self._lock:
            calls = [(t0, stage) for stage, busy in self._busy.items() for t0 in busy.values()]
        if not calls:
            return "no stage call is running (the pipeline waits on its source or a full queue)"
        t0, stage = min(calls)
        n = sum(1 for _, s in calls if s == stage)
        return f"stuck in stage '{stage}' ({n} call(s) running, the oldest for {time.monotonic() - t0:.1f} s)"


class SpdlLoader(PooledLoader):
    """Takes PooledLoader's knobs: workers (the pool's threads) and prefetch_depth (the sink) besides every loader's."""

    name = "spdl"

    def _open(self) -> None:
        self._watches: list[_Watch] = []  # epochs' pools whose threads close() joins
        self.pipeline: Pipeline | None = None  # the epoch in flight (tests stop it to kill its stages)
        # NOTE: a dataset that offers SPDL's own decoders (the jpeg workload, where spdl_io loads) is read through
        # them, GIL-free, as SPDL's users run it; any other (a plugin's) through its own __getitem__
        offer = getattr(self.dataset, "spdl_fetch", None)
        own = offer() if callable(offer) else None
        self.fetch_one: Callable[[Any], Any] = own or self.dataset.__getitem__
        self.decoders = own is not None

    def _epoch(self, e: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.set_epoch(e)
        watch = _Watch()
        self._watches = [w for w in self._watches if any(t.is_alive() for t in w.threads)] + [watch]
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="loaderlab-spdl", initializer=watch.started)
        self.pipeline = pipeline = self._build(watch, pool)
        delivered = 0
        try:
            pipeline.start(timeout=self.timeout_s)
            while True:
                try:
                    batch = pipeline.get_item(timeout=self.timeout_s)
                except EOFError:
                    break
                except TimeoutError:
                    raise LoaderTimeout(f"{LoaderTimeout.after(self.name, self.timeout_s)}; {watch.stuck()}") from None
                except Exception as err:  # noqa: BLE001 - SPDL's own failure (a stage's errors come as values)
                    raise RuntimeError(f"spdl loader: the pipeline failed ({type(err).__name__}: {err})") from err
                if isinstance(batch, ExceptionWrapper):
                    batch.reraise()  # the stage's exception, its original message and traceback text
                delivered += 1
                yield batch
            if delivered != self.num_batches:
                raise RuntimeError(
                    f"spdl loader: the pipeline ended after {delivered} of {self.num_batches} "
                    f"batches (stopped or cancelled); {watch.stuck()}"
                )
        finally:
            self.pipeline = None
            _stop(pipeline)
            pool.shutdown(wait=False, cancel_futures=True)  # a stuck call finishes on its own; close() joins

    def _build(self, watch: _Watch, pool: ThreadPoolExecutor) -> Pipeline:
        keys = [k for batch in self.sampler for k in batch]  # the plan, flattened; aggregate cuts it again
        return (
            PipelineBuilder[tuple[int, int], Any]()  # keys in, batches out
            .add_source(keys)
            .pipe(
                watch.wrap("fetch", self.fetch_one),
                concurrency=self.workers,
                executor=pool,
                name="fetch",
                output_order="input",
            )
            .aggregate(self.batch_size)
            .pipe(watch.wrap("collate", self.assemble), executor=pool, name="collate")
            .add_sink(self.prefetch_depth)
            # NOTE: max_failures=0: SPDL's default (-1) logs a failed sample and drops it, which would
            # hand the training loop a short batch instead of the dataset's error.
            .build(num_threads=1, max_failures=0)
        )

    def _shutdown(self) -> None:
        for watch in self._watches:
            for t in watch.threads:
                t.join(timeout=STOP_S)
                if t.is_alive():
                    log.warning(
                        "spdl loader: stage thread %s still busy after %.1f s; leaving it to finish", t.name, STOP_S
                    )
        self._watches.clear()


def _first_error(arg: Any) -> ExceptionWrapper | None:
    """The error a fetched sample carries into the collate stage (a list of samples), if any."""
    if isinstance(arg, list):
        return next((a for a in arg if isinstance(a, ExceptionWrapper)), None)
    return None


def _stop(pipeline: Pipeline) -> None:
    try:
        pipeline.stop(timeout=STOP_S)
    except Exception as err:  # noqa: BLE001 - the consumer has its error already; this is only the echo
        log.debug("spdl loader: stopping the pipeline raised %s: %s", type(err).__name__, err)
