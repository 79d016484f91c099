"""The queue's side that pages and the CLI use: submit runs, sweeps and Ray sweeps, list them, cancel them.

A job row lives in the store's `jobs` table (engine/store/jobs.py), or, while a program outside LoaderLab
holds the store, in the spool beside it (engine/jobs/spool.py); readers lay the spool over the table.

    job_id = submit(cfg, origin="browser")                          # one run; the run id is fixed now
    job_ids = submit_sweep(sweep, origin="cli")                     # every planned run, in its seeded order
    job_id = submit_ray_sweep(sweep, address=default_ray_address(), origin="browser")  # ONE job, run through Ray
    list_jobs(); cancel(job_id)

NOTE: cancelling a running job drops a marker file `<jobs_dir>/<job_id>.cancel` that the worker watches,
so the page never waits for the writer lock while the worker ingests a run. A sweep job's position
(config_idx, repeat_idx) and the submitter's folder wait in `<jobs_dir>/<job_id>.json`, as the jobs table
has no columns for them. A ray-sweep job keeps its spec in config_json ({"kind", "sweep", "address", "runs"})
and has no run_id: its runs are the store's runs with its sweep_id.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from engine.config import RunConfig, SweepConfig
from engine.errors import ConfigError, StoreHeld
from engine.jobs import spool
from engine.paths import Db, jobs_dir
from engine.plugins.browser import check_browser_config
from engine.run.hostfit import check_machine, check_machine_all, check_rules
from engine.run.runner import new_run_id
from engine.status import RunStatus
from engine.store import jobs as job_table
from engine.sweeps.local import new_sweep_id
from engine.sweeps.ray import INSTALL_HINT, ray_available

__all__ = [
    "RAY_ADDRESS_ENV",
    "RAY_SWEEP",
    "cancel",
    "default_ray_address",
    "find_job",
    "job_spec",
    "list_jobs",
    "marker",
    "now",
    "submit",
    "submit_ray_sweep",
    "submit_sweep",
    "with_labels",
]

log = logging.getLogger(__name__)

RAY_SWEEP = "ray-sweep"  # config_json {"kind": RAY_SWEEP, "sweep": SweepConfig fields, "address", "runs"}
RAY_ADDRESS_ENV = "LOADERLAB_RAY_ADDRESS"  # the launch page's default Ray address; empty: a local instance
_ORIGINS = ("cli", "browser")


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # the store's TIMESTAMPs are naive UTC


def marker(db: Db, job_id: str, suffix: str = ".cancel") -> Path:
    return jobs_dir(db) / f"{job_id}{suffix}"


def job_spec(config_json: str) -> dict[str, Any]:
    """A job's config_json: a RunConfig's fields, or a ray-sweep spec (it has "kind")."""
    spec = json.loads(config_json)
    return spec if isinstance(spec, dict) else {}


# ---------------------------------------------------------------------------- submit


def submit(
    cfg: RunConfig, *, origin: str, sweep_id: str | None = None, db: Db = None, oversubscribe: bool = False
) -> str:
    """Queue one validated run; returns the job id. The run id is fixed now so the page can link to it.

    origin: "cli" (the CLI, a notebook, the engine itself) or "browser", which adds the browser's rules
    (engine.plugins.browser.check_browser_config) before anything is stored. A config this host cannot fit is refused
    (engine.run.hostfit.check_machine: its warnings are for the caller to show, through it); `oversubscribe` insists on
    heavy oversubscription, and the worker's run keeps that.
    """
    _check_origin([cfg], origin)
    check_machine(cfg, oversubscribe=oversubscribe)
    return _insert([(cfg, _insisted(None, oversubscribe))], sweep_id, db)[0]


def _insisted(position: dict[str, Any] | None, oversubscribe: bool) -> dict[str, Any] | None:
    """A job's .json gains "oversubscribe": the worker passes it to launch() (engine/jobs/worker.py)."""
    return {**(position or {}), "oversubscribe": True} if oversubscribe else position


def _check_origin(configs: list[RunConfig], origin: str) -> None:
    if origin not in _ORIGINS:
        raise ValueError(f"origin must be 'cli' or 'browser', not {origin!r}")
    if origin == "browser":
        for cfg in configs:
            check_browser_config(cfg)


def submit_sweep(sweep: SweepConfig, *, origin: str, db: Db = None, oversubscribe: bool = False) -> list[str]:
    """Queue every planned run of a sweep, in its seeded random order; returns the job ids in that order. Every
    config is checked against this host first (engine.run.hostfit.check_machine_all), as submit() does."""
    _check_origin(sweep.configs(), origin)
    check_machine_all(sweep.configs(), oversubscribe=oversubscribe)
    repeats: dict[int, int] = {}
    items = []
    for config_idx, cfg in sweep.plan():
        repeats[config_idx] = repeats.get(config_idx, -1) + 1
        items.append((cfg, _insisted({"config_idx": config_idx, "repeat_idx": repeats[config_idx]}, oversubscribe)))
    return _insert(items, new_sweep_id(sweep.name), db)


def default_ray_address() -> str:
    """$LOADERLAB_RAY_ADDRESS ("auto", "host:port" or "ray://host:port"), or "" for a local Ray instance."""
    return os.environ.get(RAY_ADDRESS_ENV, "").strip()


def submit_ray_sweep(sweep: SweepConfig | RunConfig, *, origin: str, address: str | None = None, db: Db = None) -> str:
    """Queue a whole sweep (or one run) as ONE job the worker runs on a Ray cluster; returns the job id.

    address: "auto", "host:port" or "ray://host:port"; None or "" starts a local Ray instance (127.0.0.1).
    """
    if not ray_available():
        raise ConfigError("target", f"a Ray cluster target needs Ray, which is not installed: `{INSTALL_HINT}`")
    if isinstance(sweep, RunConfig):
        sweep = SweepConfig.from_dict({"name": "run", "base": sweep.to_dict()})
    _check_origin(sweep.configs(), origin)
    check_rules(sweep.configs())  # the registry's rules here; a node's runs check the host's limits (launch)
    address = (address or "").strip() or None
    if address and any(c.isspace() for c in address):
        raise ConfigError("ray_address", f"{address!r} has spaces; use auto, host:port or ray://host:port")
    spec = {
        "kind": RAY_SWEEP,
        "sweep": dataclasses.asdict(sweep),
        "address": address,
        "runs": len(sweep.plan()),
        "cwd": os.getcwd(),
    }  # the submitter's folder: its runs import a user's module from there
    row: dict[str, Any] = {
        "job_id": _job_ids(1)[0],
        "created_at": now(),
        "status": RunStatus.QUEUED,
        "config_json": json.dumps(spec),
        "sweep_id": new_sweep_id(sweep.name),
        "run_id": None,
        "device": f"ray:{address or 'local'}",
    }
    _write([row], db)
    log.info("queued ray-sweep job %s: %d runs of sweep %s", row["job_id"], spec["runs"], row["sweep_id"])
    return row["job_id"]


def _job_ids(n: int) -> list[str]:
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    return [f"job-{stamp}-{i:04d}" for i in range(n)]  # NOTE: the index orders a sweep's jobs within one created_at


def _insert(items: list[tuple[RunConfig, dict | None]], sweep_id: str | None, db: Db) -> list[str]:
    # NOTE: imported here: engine.devices imports torch, and the dashboard imports this module (engine.api)
    # without loading it
    from engine.devices import resolve  # noqa: PLC0415

    created, run_ids = now(), set()
    rows: list[dict[str, Any]] = []
    jobs_dir(db).mkdir(parents=True, exist_ok=True)
    for job_id, (cfg, position) in zip(_job_ids(len(items)), items):
        while (run_id := new_run_id()) in run_ids:
            pass
        run_ids.add(run_id)
        # the submitter's folder too: the run imports a user's module from there, as a CLI run would (meta cwd)
        marker(db, job_id, ".json").write_text(json.dumps({"cwd": os.getcwd(), **(position or {})}))
        rows.append(
            {
                "job_id": job_id,
                "created_at": created,
                "status": RunStatus.QUEUED,
                "config_json": cfg.to_json(),
                "sweep_id": sweep_id,
                "run_id": run_id,
                "device": str(resolve(cfg.device)),
            }
        )
    _write(rows, db)
    log.info("queued %d job(s)%s", len(rows), f" of sweep {sweep_id}" if sweep_id else "")
    return [r["job_id"] for r in rows]


def _write(rows: list[dict[str, Any]], db: Db) -> None:
    """Into the jobs table; while a program outside LoaderLab holds the store, into the spool, which the worker
    runs from at once and moves into the store when it can: a launch never waits for a notebook."""
    try:
        job_table.insert_jobs(rows, db)
    except StoreHeld as e:
        for row in rows:
            spool.put(db, row)
        log.info(
            "the store is held (%s): %d job(s) queued beside it; they run now and are stored later",
            e.holder or "another program",
            len(rows),
        )


# ---------------------------------------------------------------------------- list, find, cancel


def list_jobs(db: Db = None, limit: int = 100) -> pd.DataFrame:
    """Newest first, with a `kind` ("run" or "ray-sweep") and a short `label` of the config.

    Jobs spooled while the store was held are laid over the store's rows."""
    try:
        df = job_table.recent_jobs(limit, db)
    except StoreHeld:  # held for writing by another program: the spool is all that can be read
        df = pd.DataFrame(columns=job_table.JOB_COLUMNS.names)
    spooled = spool.rows(db)
    if spooled:
        extra = pd.DataFrame(spooled, columns=job_table.JOB_COLUMNS.names)
        df = pd.concat([df[~df["job_id"].isin(extra["job_id"])], extra], ignore_index=True) if len(df) else extra
        df = df.sort_values(["created_at", "job_id"], ascending=False).head(limit).reset_index(drop=True)
    return with_labels(df)


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    """Job rows with a `kind` ("run" or "ray-sweep") and a short `label` of the config."""
    specs = [job_spec(c) for c in df["config_json"]]
    return df.assign(kind=[s.get("kind", "run") for s in specs], label=[_label(s) for s in specs])


def _label(c: dict[str, Any]) -> str:
    if c.get("kind") == RAY_SWEEP:
        runs = f"{c.get('runs')} run{'' if c.get('runs') == 1 else 's'}"
        return f"Ray sweep {c['sweep'].get('name')}: {runs} on {c.get('address') or 'a local instance'}"
    workers = f"×{c.get('workers')}" if c.get("workers") else ""
    return f"{c.get('workload')}/{c.get('loader')}{workers}/{c.get('model')}/{c.get('mode')}"


def find_job(job_id: str, db: Db) -> dict[str, Any]:
    """The job's row: its spooled row if it has one (the newer), else the store's. ValueError if there is none
    (or the store is held by another program and the job is not spooled)."""
    row = spool.row(db, job_id)
    if row is None:
        try:
            row = job_table.get_job(job_id, db)
        except StoreHeld:
            row = None
    if row is None:
        raise ValueError(f"job '{job_id}' does not exist; list_jobs() shows the queue")
    return row


def cancel(job_id: str, db: Db = None) -> str:
    """Cancel a job; returns its status now. Queued: cancelled at once. Running: the worker kills the
    run's process group (or cancels the Ray sweep's trials) within a second and marks it cancelled
    (finished epochs kept). Ended: unchanged."""
    job = find_job(job_id, db)
    status = job["status"]
    if status == RunStatus.QUEUED:
        try:
            if spool.row(db, job_id) is not None:
                raise StoreHeld("spooled")  # it lives in the spool until the worker can store it
            status = job_table.cancel_queued_job(job_id, now(), "cancelled before it started", db)
            if status is None:
                raise ValueError(f"job '{job_id}' does not exist; list_jobs() shows the queue")
        except StoreHeld:
            spool.put(
                db, {**job, "status": RunStatus.CANCELLED, "ended_at": now(), "error": "cancelled before it started"}
            )
            status = RunStatus.CANCELLED
    if status == RunStatus.RUNNING:
        marker(db, job_id).touch()
    return status
