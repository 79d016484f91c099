"""The first visit: `make run` (or `python -m engine demo`) queues a small demo sweep as jobs when the
store is empty, and the dashboard serves at once while the job worker runs it; the Launch page shows
its progress live. The sweep is examples/demo.toml (35 runs; how long depends on the machine and its load, and the
sweep's card estimates it from its own finished runs), the 4 loaders on torch's
default threads and the setting the lab itself recommends (processes, 2 workers, 1 intra-op thread: predict's
top setting on a small CPU box), on 384 generated JPEGs with a small CNN, 7 repeats each: 6 give a median its
95 % interval (exact order statistics) and 7 on each side give the advisor's speedup over sync one too, so
Explore (coloured by threads) shows medians with intervals, a difference and its cause, and the advisor's pick,
not four equal dots.
"""

from __future__ import annotations

import logging

from engine.config import SweepConfig, load_toml
from engine.jobs import list_jobs, submit_sweep
from engine.paths import ROOT, Db
from engine.store import list_runs

__all__ = ["DEMO_FILE", "demo_sweep", "ensure_demo"]

log = logging.getLogger(__name__)

DEMO_FILE = ROOT / "examples" / "demo.toml"  # NOTE: the checkout's: `pip install -e` keeps it where it is


def demo_sweep(**base_overrides: object) -> SweepConfig:
    """The demo sweep (examples/demo.toml); overrides change its base (tests run a smaller one)."""
    spec = load_toml(DEMO_FILE)
    return SweepConfig.from_dict({**spec, "base": {**spec.get("base", {}), **base_overrides}})


def ensure_demo(db: Db = None, progress: bool = True, **base_overrides: object) -> bool:
    """Queue the demo sweep as jobs if the store has no runs and no jobs yet. Returns True if it queued.

    Never waits for the runs: the job worker (`make run` starts it) runs them while the dashboard serves.
    `progress` is kept for callers of the old synchronous demo; nothing is printed here."""
    if len(list_runs(db=db, limit=1, include_deleted=True)) or len(list_jobs(db=db, limit=1)):
        return False
    ids = submit_sweep(demo_sweep(**base_overrides), db=db, origin="cli")
    log.info("demo sweep queued: %d runs; watch it on the Launch page", len(ids))
    return True
