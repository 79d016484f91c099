"""The Ray executor: a sweep's runs spread over a Ray cluster, each run with its device to itself.

    python -m engine sweep FILE.toml --executor ray                               # local instance, 127.0.0.1 only
    python -m engine sweep FILE.toml --executor ray --address auto                # the cluster `ray start` runs here
    python -m engine sweep FILE.toml --executor ray --address ray://head:10001    # through Ray Client

Placement. Trials that share a device corrupt each other's timings, so:
- a CUDA trial holds whole GPUs (num_gpus = the GPUs its config uses, never fractional) and one CPU;
- a CPU trial holds every CPU of its node (num_cpus = the node's CPU count): one trial per CPU-only node,
  and none beside GPU trials.
The driver picks each trial's node (NodeAffinitySchedulingStrategy, hard) from a table of what runs where;
Ray's resource accounting enforces the same rule. Nodes that join during a sweep are used within seconds.

On its node a trial is the normal runner (engine.run.runner.launch into a node-local scratch store). Its
RunLog (events.jsonl + stderr tail) goes back to the driver, which writes it under its own runs/ folder
and ingests it, so a Ray run lands in the store exactly like a local one. A trial whose worker or node
dies is recorded as a failed run with the reason; when the node is still up, a salvage task first kills
the orphaned run there and hands back its finished epochs. The sweep goes on.

Every node needs this checkout and its venv (`pip install -r requirements-cluster.txt`), with `ray start`
run from the checkout and PYTHONPATH set to it, so that Ray workers import this `engine`. (A local
instance and `--address auto` work without that: Ray puts the driver's working directory on sys.path.)
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from tqdm import tqdm

from engine.config import SweepConfig
from engine.paths import Db
from engine.run.preflight import preflight_all
from engine.sweeps.local import SweepResult, new_sweep_id
from engine.sweeps.ray._cluster import INSTALL_HINT, connect_ray, ray_available, require_ray
from engine.sweeps.ray._driver import Driver, Trial, gpus_needed
from engine.sweeps.ray._session import reap_leftovers, sessions_dir

__all__ = [
    "INSTALL_HINT",
    "connect_ray",
    "gpus_needed",
    "ray_available",
    "reap_leftovers",
    "require_ray",
    "run_sweep_ray",
]


def run_sweep_ray(
    sweep: SweepConfig,
    *,
    db: Db = None,
    address: str | None = None,
    progress: bool = True,
    sweep_id: str | None = None,
    meta: dict[str, Any] | None = None,
    cancel: threading.Event | None = None,
    num_cpus: int | None = None,
) -> SweepResult:
    """Run every planned config on a Ray cluster; a failed or lost run is recorded and the sweep goes on.

    address: None (a local instance; num_cpus caps it), "auto", "host:port" or "ray://host:port"; a
    process already connected (ray.init) is used as it is. cancel: set it (from another thread, e.g. a
    job worker) to stop dispatching and cancel running trials; their finished epochs are kept.
    Ctrl-C does the same, then re-raises. Returns the same SweepResult as engine.sweeps.local.run_sweep.
    """
    require_ray()
    meta = {**(meta or {}), "cwd": (meta or {}).get("cwd") or os.getcwd()}  # each run imports user modules from here
    # a bad plugin fails here, on the submitter's machine, before any trial is sent
    preflight_all(sweep.configs(), cwd=meta["cwd"])
    result = SweepResult(sweep_id or new_sweep_id(sweep.name))
    trials: list[Trial] = []
    repeats: dict[int, int] = {}
    for config_idx, cfg in sweep.plan():
        repeats[config_idx] = repeats.get(config_idx, -1) + 1
        trials.append(
            Trial(
                cfg,
                {
                    **(meta or {}),
                    "sweep_id": result.sweep_id,
                    "config_idx": config_idx,
                    "repeat_idx": repeats[config_idx],
                    "executor": "ray",
                },
            )
        )
    # a local instance is recorded next to the store: the next job worker stops it if this process is killed
    with (
        connect_ray(address, num_cpus=num_cpus, record_in=sessions_dir(db)) as ray,
        tqdm(
            total=len(trials),
            desc=f"sweep {sweep.name} (ray)",
            unit="run",
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar,
    ):
        Driver(ray, db, result, bar, cancel).run(trials)
    return result
