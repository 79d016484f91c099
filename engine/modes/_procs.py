"""ChildGroup: n spawned training processes whose epoch records reach the parent through one queue.

Used by dual-processes and ddp. Children never write the RunLog: they `emit` each epoch event's payload,
and the parent writes it (one writer, whole lines). A child's exception fails the group with that
exception's message; the others are terminated (torch.multiprocessing's ProcessContext does it), so
nothing is left running.

    with ChildGroup(child_fn, n=2, args=(cfg_dict,), on_record=recorder.write) as group:
        group.wait()                     # child_fn(i, cfg_dict, link) runs in process i

A child calls link.ready() when it is built and about to train: it returns once every child is, so
that process start-up skew (seconds, when n processes import torch at once) does not leak into the
wall time from the first start to the last end. link.emit(payload) sends one epoch event's fields.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
from typing import Any, Callable

import torch.multiprocessing as tmp
from torch.multiprocessing.spawn import ProcessException

__all__ = ["ChildGroup", "Link"]

log = logging.getLogger(__name__)

_DONE, _ERROR, _RECORD = "done", "error", "record"


class Link:
    """A child's side of the group: emit records, and meet the other children before training."""

    def __init__(self, i: int, q: Any, barrier: Any):
        self.i, self._q, self._barrier = i, q, barrier

    def emit(self, payload: dict[str, Any]) -> None:
        self._q.put((_RECORD, self.i, payload))

    def ready(self) -> None:
        self._barrier.wait()  # a sibling that fails first gets the group terminated, this wait included


def _child_main(i: int, fn: Callable[..., None], args: tuple, q: Any, barrier: Any) -> None:
    """Entry point of child i (module level so spawn can pickle it)."""
    try:
        fn(i, *args, Link(i, q, barrier))
    except BaseException as e:
        q.put((_ERROR, i, f"{type(e).__name__}: {e}"))
        raise  # torch's wrapper records the traceback and exits non-zero; the parent sees both
    q.put((_DONE, i, None))
    # NOTE: done: flush the queue, then exit without the interpreter's teardown, as a run child does
    # (engine/run/runner.py). Teardown has nothing left to save here, and it is where torch's C++ threads
    # (gloo's, the CUDA caching allocator's) meet a half-finalised interpreter and can abort the process.
    q.close()
    q.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class ChildGroup:
    def __init__(
        self,
        fn: Callable[..., None],
        n: int,
        args: tuple,
        on_record: Callable[[dict[str, Any]], None],
        who: str = "process",
    ):
        self.n, self.on_record, self.who = n, on_record, who
        mp = tmp.get_context("spawn")
        self._q, self._barrier = mp.Queue(), mp.Barrier(n)  # kept: the children attach to them as they start
        self._errors: dict[int, str] = {}
        self._done: set[int] = set()
        self._pc = tmp.start_processes(
            _child_main, args=(fn, args, self._q, self._barrier), nprocs=n, join=False, start_method="spawn"
        )

    def wait(self, poll_s: float = 0.1) -> None:
        """Forward records until every child has finished; raise the first child error with its message."""
        try:
            while not self._pc.join(timeout=poll_s, grace_period=0.5):
                self._drain()
        except ProcessException as e:
            self._drain()
            msg = self._errors.get(e.error_index) or str(e).strip().splitlines()[-1]
            raise RuntimeError(f"{self.who} {e.error_index} failed: {msg}") from None
        # every child exited 0, so each put its final marker; collect the records still in the pipe
        while len(self._done) < self.n:
            self._drain(block_s=5.0)

    def _drain(self, block_s: float = 0.0) -> None:
        while True:
            try:
                kind, i, payload = self._q.get(timeout=block_s) if block_s else self._q.get_nowait()
            except queue.Empty:
                if block_s:
                    raise RuntimeError(f"{self.who}es exited without reporting their last records") from None
                return
            if kind == _RECORD:
                self.on_record(payload)
            elif kind == _ERROR:
                self._errors.setdefault(i, payload)
            else:
                self._done.add(i)
                if len(self._done) == self.n:
                    return

    def close(self) -> None:
        """Terminate children still running (an error in the parent, or Ctrl-C), then reap them."""
        for p in self._pc.processes:
            if p.is_alive():
                p.terminate()
        for p in self._pc.processes:
            p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join()
        self._q.close()

    def __enter__(self) -> "ChildGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
