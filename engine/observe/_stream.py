"""One observed loader (a stream): its RunLog, its sampler, and the timing of each epoch it is iterated.

Per batch, two host times: the request (next() called) and the arrival (next() returned). The wait is request ->
arrival; the step is arrival -> the next request, less the time another observed loader's whole epoch took inside
it (a validation pass run between two training steps is the validation stream's, never folded into the training
step). The StopIteration that ends an epoch is no fetch and no step: its wait is the epoch's end wait (counted in
data_wait_s, as the lab's runs count it, never as a step). In the store a step is (data_wait_s, h2d_s = NULL: the
loop's copies are inside its step, compute_s = the step, total_s = both).

On CUDA (initialised by the script before the epoch), one event is recorded on the current stream at each arrival
and each request, read after one synchronize at the epoch's end: the GPU clock's gap from a step's request to the
next arrival is GPU idle, split into its data-wait part and the rest by engine/measure/idle.py (no copy part: the
loop's copies are not seen). The host time from an arrival to the step's first kernel is not seen as idle.

Loaded only once a stream starts (engine/observe/_hub.py), when the script has imported torch already.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sized

from engine.measure import Sampler, arrived, clock_offset, fingerprint, split_idle
from engine.observe import _live, _trial
from engine.observe._settings import read_settings
from engine.paths import Db
from engine.runlog import GPU_EPOCH_FIELDS, RunLog, claim

__all__ = ["Stream"]

log = logging.getLogger(__name__)

SAMPLE_HZ = 2.0  # NOTE: a fifth of the lab's rate: the observer's own cost must stay under 1 % of the user's loop


def batch_len(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (tuple, list or dict batches), else 1."""
    first = batch
    for _ in range(4):
        if isinstance(first, (list, tuple)) and first:
            first = first[0]
        elif isinstance(first, dict) and first:
            first = next(iter(first.values()))
        else:
            break
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else 1


class _Gpu:
    """CUDA events at the host's boundaries of one epoch (see the module doc); None of it on CPU."""

    def __init__(self, torch: Any):
        self.torch = torch
        self.events: list[Any] = []  # torch.cuda.Event, one per boundary
        self.enqueued: list[float] = []

    def mark(self) -> None:
        event = self.torch.cuda.Event(enable_timing=True)
        self.enqueued.append(time.perf_counter())  # NOTE: before the record: the event completes no earlier
        event.record()
        self.events.append(event)

    def idle(self, waits: list[tuple[float, float]]) -> dict[str, Any]:
        """Marks alternate arrival, request, arrival, ...: gaps are request_i -> arrival_i+1 on the GPU clock."""
        self.torch.cuda.synchronize()
        if not self.events:
            return dict.fromkeys(GPU_EPOCH_FIELDS)
        base = self.events[0]
        at = [base.elapsed_time(e) / 1000.0 for e in self.events]
        gaps = [(at[i], at[i + 1]) for i in range(1, len(at) - 1, 2)]
        parts = split_idle(gaps, [], waits, clock_offset(zip(self.enqueued, at)))
        return {
            "gpu_idle_s": parts.idle_s,
            "gpu_idle_data_s": parts.data_s,
            "gpu_idle_copy_s": None,
            "gpu_idle_other_s": parts.other_s,
            "copy_wait_s": None,
        }


class Stream:
    """One loader's run. `epoch(iterator)` wraps one pass; `finish(status)` ends the run."""

    def __init__(self, obj: Any, *, site: str, run_dir: Path, store: Path, name: str | None = None):
        self.site, self.dir, self.store = site, run_dir, store
        self.epochs: list[dict[str, Any]] = []
        self.open: _Epoch | None = None
        self.in_step, self.step_id, self.excluded = False, 0, 0.0
        config, settings = read_settings(obj)
        if _trial.ACTIVE:
            _trial.relabel(obj, config)
        config["workload"] = settings["dataset_class"] or settings["loader_class"]
        if name:
            config["tag"] = name
        claim(run_dir, store)
        self.log = RunLog(run_dir)
        self.log.write("start", run_id=run_dir.name, config=config, host=fingerprint(), pid=os.getpid())
        self.log.write(
            "summary",
            source="observed",
            observed_stream=site,
            observed_settings=json.dumps(settings, sort_keys=True, default=str),
        )
        self.sampler = Sampler(self.log, hz=SAMPLE_HZ)
        self.sampler.__enter__()
        self.ended = False
        self.db: Db = None  # the store watch() named; set by the hub
        self.store_run: Callable[[Path, Db], Any] | None = None  # stores the run when it ends; set by the hub

    def epoch(self, it: Iterator, t0: float, t_start: float) -> "_Epoch":
        if self.open is not None:  # the loop broke out of the last epoch and starts another: that one ended there
            self.open.close(t0, finished=True)
        self.open = _Epoch(self, it, t0, t_start)
        return self.open

    def record(self, rec: dict[str, Any]) -> None:
        rec.update(model_idx=0, rank=0, epoch=len(self.epochs), warmup=not self.epochs)
        self.epochs.append(rec)
        self.log.write("epoch", **rec)

    def finish(self, status: str, error: str | None) -> None:
        """End the run: an epoch the loop broke out of counts when the script ended well; one in flight at a
        failure is lost, as a kill loses it. A stream of one epoch has no warm-up to leave out."""
        if self.ended:
            return
        self.ended = True
        if self.open is not None:
            self.open.close(time.perf_counter(), finished=status == "done")
        if len(self.epochs) == 1:
            self.log.write("epoch", **{**self.epochs[0], "warmup": False})
        self.sampler.close()
        self.log.write("summary", **self.sampler.summary())
        self.log.write("end", status=status, error=error)
        self.log.close()


class _Epoch:
    """The iterator the loop gets: times each next() (module doc); anything else goes to the loader's iterator."""

    def __init__(self, stream: Stream, it: Iterator, t0: float, t_start: float):
        self.stream, self.it, self.t0, self.t_start = stream, it, t0, t_start
        self.waits: list[float] = []
        self.steps: list[float] = []
        self.spans: list[tuple[float, float]] = []
        self.samples, self.done = 0, False
        self.arrived: float | None = None  # when the step's batch reached the loop; None between steps
        self.ttfb: float | None = None
        torch = sys.modules.get("torch")
        cuda = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
        self.gpu = _Gpu(torch) if cuda else None
        self.nested_in = _live.enter(stream)

    def __iter__(self) -> "_Epoch":
        return self

    def __len__(self) -> int:
        if not isinstance(self.it, Sized):  # as len() of the unwrapped iterator says it
            raise TypeError(f"object of type {type(self.it).__name__!r} has no len()")
        return len(self.it)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.it, name)

    def __next__(self) -> Any:
        t = time.perf_counter()
        if self.arrived is not None:
            self._end_step(t)
        if _trial.ACTIVE:
            _trial.check(self.stream)
        try:
            batch = next(self.it)
        except StopIteration:
            self.close(t, finished=True, end_wait=time.perf_counter() - t)
            raise
        now, self.ttfb = arrived(t, self.t0, self.ttfb, self.waits, self.spans)
        self.samples += batch_len(batch)
        if _trial.ACTIVE:
            _trial.arrived(self.stream)
        if self.gpu is not None:
            self.gpu.mark()
        self.arrived = now
        s = self.stream
        s.in_step, s.excluded = True, 0.0
        return batch

    def _end_step(self, t: float) -> None:
        if self.gpu is not None:
            self.gpu.mark()
        s = self.stream
        assert self.arrived is not None  # called only in a step (__next__ checks)
        self.steps.append(max(0.0, t - self.arrived - s.excluded))
        s.in_step, s.step_id, self.arrived = False, s.step_id + 1, None

    def close(self, t: float, *, finished: bool, end_wait: float = 0.0) -> None:
        """End the epoch at host time t: recorded when finished (StopIteration, or the loop broke out and went
        on), dropped when a failure cut it short."""
        if self.done:
            return
        self.done = True
        s = self.stream
        if self.arrived is not None:
            self._end_step(t)
        s.open = None
        _live.leave(s, self.nested_in, self.t0)
        if not finished:
            return
        wall = t + end_wait - self.t0
        steps = [[i, w, None, c, w + c] for i, (w, c) in enumerate(zip(self.waits, self.steps))]
        gpu = self.gpu.idle(self.spans) if self.gpu is not None else dict.fromkeys(GPU_EPOCH_FIELDS)
        s.record(
            {
                "wall_s": wall,
                "samples": self.samples,
                "samples_per_s": self.samples / wall if wall > 0 else 0.0,
                "ttfb_s": self.ttfb or 0.0,
                "data_wait_s": sum(self.waits) + end_wait,
                "h2d_s": None,
                "compute_s": sum(self.steps),
                "n_steps": len(steps),
                "t_start": self.t_start,
                "t_end": time.time(),
                "loss": None,
                "allreduce_s": None,
                "steps": steps,
                **gpu,
            }
        )
