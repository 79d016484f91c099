"""Sweeps: a grid × repeats, run one at a time in a seeded random order, with a progress bar.

Random order so slow drift of the machine (thermal, other tenants) does not favour one config.
This is the `local` executor: this machine, one run at a time, each forked from one warm parent
(engine/run/warm.py). The `ray` executor, the same plan spread over a cluster, is engine/sweeps/ray/
(run_sweep_ray); both return a SweepResult. `python -m engine sweep FILE.toml [--executor ray]`.
"""

from __future__ import annotations

import logging
import secrets
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tqdm import tqdm

from engine.config import SweepConfig
from engine.paths import Db
from engine.run.hostfit import check_machine_all
from engine.run.preflight import preflight_all
from engine.run.runner import RunResult, launch
from engine.run.warm import borrowed
from engine.status import RunStatus

__all__ = ["SweepResult", "new_sweep_id", "run_sweep"]

log = logging.getLogger(__name__)


@dataclass
class SweepResult:
    sweep_id: str
    results: list[RunResult] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out


def new_sweep_id(name: str) -> str:
    return f"{name}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def run_sweep(
    sweep: SweepConfig,
    *,
    db: Db = None,
    progress: bool = True,
    sweep_id: str | None = None,
    meta: dict[str, Any] | None = None,
) -> SweepResult:
    """Run every planned config locally; a failed run is recorded and the sweep goes on."""
    plan = sweep.plan()
    # a config this host cannot fit, or a bad plugin, anywhere in the grid fails before the first run is stored
    check_machine_all(sweep.configs())  # (its warnings are the front end's to show: the CLI prints them, the form too)
    preflight_all(sweep.configs(), cwd=(meta or {}).get("cwd"))  # one preflight child for them all
    result = SweepResult(sweep_id or new_sweep_id(sweep.name))
    repeats_seen: dict[int, int] = {}
    bar = tqdm(
        total=len(plan),
        desc=f"sweep {sweep.name}",
        unit="run",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    # one warm parent for the sweep, the process's shared one: each run forks from it instead of importing torch
    # again, and a later sweep or tune in this process forks from it too (engine/run/warm.py)
    with bar, borrowed(enabled=len(plan) > 1) as warm:
        for config_idx, cfg in plan:
            repeat_idx = repeats_seen.get(config_idx, 0)
            repeats_seen[config_idx] = repeat_idx + 1
            bar.set_postfix_str(f"{cfg.loader} w={cfg.workers} {cfg.mode} {cfg.model}", refresh=True)
            run = launch(
                cfg,
                db=db,
                meta={**(meta or {}), "sweep_id": result.sweep_id, "config_idx": config_idx, "repeat_idx": repeat_idx},
                warm=warm,
            )
            result.results.append(run)
            if run.status != RunStatus.DONE:
                log.warning("run %s %s: %s", run.run_id, run.status, run.error)
            bar.update(1)
            bar.set_postfix(result.counts, refresh=True)
    return result
