"""`--trace`: a torch.profiler trace of ONE extra steady-state epoch, after the measured ones.

The traced epoch runs after the last measured epoch and writes no `epoch` event, and the system sampler
is stopped before it, so the profiler's overhead never reaches the stored figures (epochs, memory, CPU %).
The trace is a Chrome trace, gzipped (Perfetto, chrome://tracing
and TensorBoard's trace viewer open .json.gz directly), at <run_dir>/trace.json.gz.

    trace.extra_epoch(ctx, lambda e: train_epoch(model, opt, loader.epoch(e), device))   # a no-op without --trace

Modes whose epochs run in other threads or processes are refused by `check` (ConfigError naming `trace`):
one profiler in the run's main thread would miss their work and show a misleading picture.
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile

from engine.errors import ConfigError
from engine.paths import TRACE_FILE

__all__ = ["TRACE_FILE", "TRACED_MODES", "check", "extra_epoch", "trace_path"]

log = logging.getLogger(__name__)

# The modes whose whole epoch runs in the run's main thread, where the profiler sees it.
TRACED_MODES = ("single", "dual-sequential", "fused")


def check(cfg: Any) -> None:
    """--trace only where one in-process profiler sees the whole epoch."""
    if cfg.trace and cfg.mode not in TRACED_MODES:
        raise ConfigError(
            "trace",
            f"mode {cfg.mode} trains in other threads or processes, which one profiler in "
            f"the run would not see; trace a {', '.join(TRACED_MODES)} run instead",
        )


def trace_path(run_dir: str | os.PathLike) -> Path | None:
    """The run's trace file, or None when it has none."""
    path = Path(run_dir) / TRACE_FILE
    return path if path.is_file() else None


def extra_epoch(ctx: Any, run_epoch: Callable[[int], Any]) -> None:
    """With cfg.trace: run_epoch(cfg.epochs) once more under torch.profiler; write the trace to the run folder."""
    if not ctx.cfg.trace:
        return
    if ctx.sampler is not None:
        ctx.sampler.close()  # the sampler's figures (memory, CPU %) cover the measured epochs only, like the rest
    activities = [ProfilerActivity.CPU]
    if ctx.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=False) as prof:
        run_epoch(ctx.cfg.epochs)  # NOTE: an epoch index past the measured ones: same data order rules, no event
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)  # so the trace holds the epoch's kernels, not half of them
    out = ctx.log.dir / TRACE_FILE
    with tempfile.TemporaryDirectory(dir=ctx.log.dir) as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(Path(tmp) / TRACE_FILE, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(Path(tmp) / TRACE_FILE, out)  # whole or absent: a killed run leaves no half trace
    ctx.summary["trace_file"] = TRACE_FILE
    log.info("trace of one extra epoch written to %s (%d bytes)", out, out.stat().st_size)
