"""Helpers for the mode tests: tiny configs, a run through the real runner, and its epoch events.

A module (not a conftest) so that each mode's test file imports what it uses by name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import psutil
import torch

from engine.config import RunConfig
from engine.run.warm import shared_pid
from engine.runlog import RunLog, read_events

__all__ = ["TINY", "assert_no_orphans", "epochs_of", "launch_mode", "our_children", "run_in_process", "summary_of"]

# tensor workload, 128 samples of 3x8x8, width 8, two epochs (one warm-up), four steps per epoch; on the CPU,
# as the tests that use it check CPU runs (device auto would be cuda:0 on a GPU box): CUDA tests say device="cuda"
TINY: dict[str, Any] = dict(
    workload="tensor",
    n_samples=128,
    image_size=8,
    width=8,
    epochs=2,
    batch_size=32,
    bound=False,
    sample_hz=2.0,
    device="cpu",
)


def launch_mode(store: Path, **fields: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Run TINY + fields through engine.run.runner.launch; return the result and the run's events."""
    from engine.run.runner import launch  # noqa: PLC0415

    result = launch(RunConfig.from_dict({**TINY, **fields}), db=store)
    return result, read_events(result.run_dir)


def run_in_process(mode: str, **fields: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run a mode's loop in this process (no runner, no store): its epoch events and summary."""
    from engine.modes import RunContext  # noqa: PLC0415
    from engine.registry import MODES  # noqa: PLC0415

    cfg = RunConfig.from_dict({**TINY, "mode": mode, **fields})
    with tempfile.TemporaryDirectory() as d, RunLog(d) as log:
        ctx = RunContext(cfg=cfg, log=log, device=torch.device("cpu"))
        MODES[mode].run(ctx)
        return [e for e in read_events(d) if e["type"] == "epoch"], ctx.summary


def epochs_of(events: list[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """(model_idx, rank) -> that model's epoch events in epoch order."""
    out: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in events:
        if e["type"] == "epoch":
            out.setdefault((e["model_idx"], e["rank"]), []).append(e)
    return {k: sorted(v, key=lambda e: e["epoch"]) for k, v in out.items()}


def summary_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["type"] == "summary")


def our_children() -> list[psutil.Process]:
    """Live children of this process, except multiprocessing's resource tracker and forkserver (helpers that a
    spawn or forkserver context starts once per interpreter and that live as long as it does, by design) and the
    process's shared warm parent (kept between sweeps by design: engine/run/warm.py)."""
    out, shared = [], shared_pid()
    for p in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(p.cmdline())
            if "resource_tracker" not in cmdline and "forkserver" not in cmdline and p.pid != shared:
                out.append(p)
        except psutil.Error:
            continue
    return out


def assert_no_orphans(result: Any) -> None:
    """Nothing the run started is still alive: no child of ours, nobody left in the run's process group."""
    assert our_children() == []
    pgid = int((Path(result.run_dir) / "pid").read_text())
    stray = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.info["pid"]) == pgid and p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                stray.append(p.info["pid"])
        except (ProcessLookupError, psutil.Error):
            continue
    assert stray == [], f"processes of run {result.run_id} still alive: {stray}"
