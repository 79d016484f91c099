"""The demo result set `make run` shows on a fresh machine: a small loader sweep on generated JPEGs.

Runs only when the store has no runs yet, so `make run` is quick the second time.
"""

from __future__ import annotations

import logging
import os

from engine.config import SweepConfig

__all__ = ["DEMO_SWEEP", "ensure_demo"]

log = logging.getLogger(__name__)

DEMO_SWEEP = {
    "name": "demo",
    "repeats": 1,
    "seed": 0,
    "base": {"workload": "jpeg", "n_samples": 256, "image_size": 32, "model": "cnn", "width": 8, "depth": 1,
             "batch_size": 64, "epochs": 2, "warmup_epochs": 1, "tag": "demo"},
    "grid": {"loader": ["sync", "prefetch", "threads", "processes"], "workers": [2]},  # sync, prefetch: workers 0
}


def ensure_demo(db: str | os.PathLike | None = None, progress: bool = True) -> bool:
    """Generate the demo dataset and results if the store is empty. Returns True if it ran."""
    from engine.store import list_runs  # noqa: PLC0415
    from engine.sweep import run_sweep  # noqa: PLC0415

    if len(list_runs(db=db, limit=1, include_deleted=True)):
        return False
    run_sweep(SweepConfig.from_dict(DEMO_SWEEP), db=db, progress=progress)
    log.info("demo results stored")
    return True
