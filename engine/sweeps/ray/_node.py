"""What runs on a Ray node: a trial (the normal runner into a node-local scratch store) and its salvage.

The scratch store is `<tmp>/loaderlab-ray/<run_id>/`, named by the run id the driver chose, so that a
salvage task sent to the same node after the trial's worker died finds the orphaned run there.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psutil

from engine.config import RunConfig
from engine.run.runner import kill_group, launch

__all__ = ["salvage", "scratch_dir", "trial"]

_STDERR_TAIL_BYTES = 8192


def scratch_dir(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / "loaderlab-ray" / run_id


def _read(path: Path, tail: int | None = None) -> str:
    if not path.is_file():
        return ""
    data = path.read_bytes()
    return (data[-tail:] if tail else data).decode("utf-8", "replace")


def _collect(run_id: str, kill: bool) -> dict[str, Any] | None:
    """The trial's RunLog as text; kill=True first kills the run's process group if it outlived its worker."""
    run_dir = scratch_dir(run_id) / "runs" / run_id
    if not run_dir.is_dir():
        return None
    pid = run_dir / "pid"
    if kill and pid.is_file():
        kill_group(int(pid.read_text()))
    events = _read(run_dir / "events.jsonl")
    return {
        "events": events[: events.rfind("\n") + 1],  # a torn last line (killed mid-write) is dropped
        "stderr": _read(run_dir / "stderr.log", _STDERR_TAIL_BYTES),
        "host": socket.gethostname(),
    }


@contextmanager
def _node_thread_env() -> Iterator[None]:
    """The run sees the node's own OMP_NUM_THREADS, as a local run would, not the one Ray sets in its workers.

    Ray sets it (to the task's CPU count) when the node did not; the fingerprint keys thread settings, so a
    Ray run would otherwise never match a local run of the same machine. The raylet's environment is the
    node's: when it has no OMP_NUM_THREADS, Ray's is dropped for the run, and put back after it."""
    ours = os.environ.get("OMP_NUM_THREADS")
    try:
        node_env = psutil.Process(int(os.environ["RAY_RAYLET_PID"])).environ()
    except (KeyError, ValueError, psutil.Error):
        node_env = {"OMP_NUM_THREADS": ours}  # unknown: leave it as it is
    if ours is not None and "OMP_NUM_THREADS" not in node_env:
        del os.environ["OMP_NUM_THREADS"]
    try:
        yield
    finally:
        if ours is not None:
            os.environ["OMP_NUM_THREADS"] = ours


def trial(cfg: dict[str, Any], meta: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    """One run through engine.run.runner.launch on this node, returned as {"events", "stderr", "host"}."""
    scratch = scratch_dir(run_id)
    with _node_thread_env():
        launch(RunConfig.from_dict(cfg), db=scratch / "scratch.duckdb", meta={**meta, "run_id": run_id})
    payload = _collect(run_id, kill=False)
    shutil.rmtree(scratch, ignore_errors=True)
    return payload


def salvage(run_id: str) -> dict[str, Any] | None:
    """Sent to the node of a trial whose worker died: stop its orphaned run and return what it logged."""
    payload = _collect(run_id, kill=True)
    shutil.rmtree(scratch_dir(run_id), ignore_errors=True)
    return payload
