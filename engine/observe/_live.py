"""The streams of this process, live: which are in an epoch, which contain another's epoch, and ending them all.

Torch-free and store-free: the streams (_stream.py), the trial's stop (_trial.py) and the hub (_hub.py) all read
this state, so it sits below each of them and none imports another to reach it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["enter", "finish_all", "leave", "open_streams", "store", "streams"]

log = logging.getLogger(__name__)

streams: list[Any] = []  # every stream of this process, in the order they started


def enter(stream: Any) -> list[tuple[Any, int]]:
    """A stream starts an epoch: the other streams in the middle of a step now contain it (a validation pass
    between two training steps), with the step each is in."""
    return [(s, s.step_id) for s in streams if s is not stream and s.in_step]


def leave(stream: Any, nested_in: list[tuple[Any, int]], t0: float) -> None:
    """A stream's epoch ended: the steps that contained it, still the same step, leave its time out."""
    now = time.perf_counter()
    for outer, step_id in nested_in:
        if outer.in_step and outer.step_id == step_id:
            outer.excluded += now - t0


def open_streams() -> list[Any]:
    """The streams in the middle of an epoch."""
    return [s for s in streams if not s.ended and s.open is not None]


def finish_all(status: str, error: str | None) -> None:
    """End every stream's run (the script ended: `status` as engine.status says it) and, under watch(), store it."""
    for stream in streams:
        if stream.ended:  # closed already (Watched.close)
            continue
        stream.finish(status, error)
        store(stream)


def store(stream: Any) -> None:
    """Store a finished stream's run with the function watch() was given (engine's face passes the store's);
    none under the observe command, whose parent stores the runs."""
    if stream.store_run is None:
        return
    try:
        stream.store_run(stream.dir, stream.db)
    except Exception as e:  # noqa: BLE001 - the user's training must not fail for the store: the RunLog keeps it
        log.warning("observed run %s not stored yet (%s); the next command that writes stores it", stream.dir.name, e)
