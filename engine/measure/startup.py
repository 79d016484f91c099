"""Where a run's start-up goes: the phases from launch() to the first batch, for the RunLog's `startup` event.

    launch() called --imports--> engine imported in the child --cuda--> --build--> first epoch starts
        --first_batch--> its first batch arrives

    imports      the child's interpreter start and its imports (torch, the engine); a warm fork pays only the fork
    cuda         CUDA initialisation (context on the run device); None on CPU, or where the mode's own
                 processes initialise it (dual-processes, ddp)
    build        config, host fingerprint, sampler, dataset, model, optimizer, loader: up to the first epoch
                 (in a cold child, mostly torch._dynamo, which torch.optim imports when the first optimizer is made)
    first_batch  the first epoch's time to first batch (loader workers starting, the first fetch)

The phases are consecutive, so they add up to startup_s, launch to first batch (engine.devices.init_cuda times
CUDA's). The bound's passes run after the epochs and are stored apart (calibration_s). Times are unix times
(time.time()): launch() runs in another process, so a monotonic clock would not compare.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PHASES", "phases"]

# the stored column of each phase, in order, with the words the run page and bench/startup.py use for it
PHASES = {
    "startup_imports_s": "interpreter and imports",
    "startup_cuda_s": "CUDA initialisation",
    "startup_build_s": "dataset, model and loader",
    "startup_first_batch_s": "first batch",
}


def phases(
    launched_at: float | None, imported_at: float, cuda_s: float | None, first_epoch: dict[str, Any]
) -> dict[str, float | None]:
    """The `startup` event's fields from the child's marks and its first recorded epoch (see the module doc).

    launched_at None (a child not started by launch(), e.g. a torchrun rank): no imports phase, no total."""
    first_at = float(first_epoch["t_start"])
    out = {
        "startup_imports_s": None if launched_at is None else max(0.0, imported_at - launched_at),
        "startup_cuda_s": cuda_s,
        "startup_build_s": max(0.0, first_at - imported_at - (cuda_s or 0.0)),
        "startup_first_batch_s": float(first_epoch.get("ttfb_s") or 0.0),
    }
    out["startup_s"] = None if launched_at is None else sum(v or 0.0 for v in out.values())
    return out
