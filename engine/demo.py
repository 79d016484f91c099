"""The first visit: `make run` (or `python -m engine demo`) queues a small demo sweep as a job when the
store is empty, and the dashboard serves at once while the job worker runs it; the Launch page shows
its progress live. About 2 minutes on 2 cores: 4 loader configs on generated JPEGs with a small CNN,
6 repeats each, the fewest that give a 95 % interval of the median (exact order statistics), so
Explore shows medians with intervals, a verdict and the advisor's pick, not four single dots.
"""

from __future__ import annotations

import logging
import os

from engine.config import SweepConfig
from engine.jobs import list_jobs, submit_sweep
from engine.store import list_runs

__all__ = ["DEMO_REPEATS", "DEMO_SWEEP", "demo_sweep", "ensure_demo"]

log = logging.getLogger(__name__)

DEMO_REPEATS = 6  # NOTE: engine.stats.median_ci_ranks gives no 95 % interval below 6 runs
DEMO_SWEEP = {
    "name": "demo",
    "repeats": DEMO_REPEATS,
    "seed": 0,
    # tiny on purpose: a run is mostly its subprocess start-up, so 24 runs fit in about 2 minutes
    "base": {"workload": "jpeg", "n_samples": 128, "image_size": 32, "model": "cnn", "width": 8, "depth": 1,
             "batch_size": 32, "epochs": 3, "warmup_epochs": 1, "tag": "demo"},
    "grid": {"loader": ["sync", "prefetch", "threads", "processes"], "workers": [2]},  # sync, prefetch: workers 0
}


def demo_sweep(**base_overrides: object) -> SweepConfig:
    """The demo sweep; overrides change its base (tests run a smaller one)."""
    spec = {**DEMO_SWEEP, "base": {**DEMO_SWEEP["base"], **base_overrides}}
    return SweepConfig.from_dict(spec)


def ensure_demo(db: str | os.PathLike | None = None, progress: bool = True, **base_overrides: object) -> bool:
    """Queue the demo sweep as jobs if the store has no runs and no jobs yet. Returns True if it queued.

    Never waits for the runs: the job worker (`make run` starts it) runs them while the dashboard serves.
    `progress` is kept for callers of the old synchronous demo; nothing is printed here."""
    if len(list_runs(db=db, limit=1, include_deleted=True)) or len(list_jobs(db=db, limit=1)):
        return False
    ids = submit_sweep(demo_sweep(**base_overrides), db=db, origin="cli")
    log.info("demo sweep queued: %d runs; watch it on the Launch page", len(ids))
    return True
