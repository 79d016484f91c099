"""Job rows the store cannot take now: one JSON file per job under `<jobs_dir>/spool/`.

DuckDB lets one process write a file, or many read it. A user's notebook or `duckdb` shell may hold the
store for hours, and the job queue lives in the store, so without this a job launched meanwhile would
wait for them. Instead a job never waits for a program outside LoaderLab:

    submit      writes its rows here when such a program holds the store (StoreHeld)
    the worker  takes queued jobs from here (and from the store, while it can still read it), runs them
                (their RunLogs wait for the store as any run's do), and records their status here
    flush()     moves every row into the jobs table as soon as the store can be written (the worker's loop)
    rows()      what readers (list_jobs, job_progress, cancel) lay over the store's rows

A spooled row is a whole jobs row (engine.store.jobs.JOB_COLUMNS); the file is replaced atomically, so a
reader never sees half of one.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.paths import Db, jobs_dir
from engine.store.jobs import JOB_COLUMNS, upsert_jobs

__all__ = ["flush", "put", "row", "rows", "spool_dir"]

log = logging.getLogger(__name__)

_TIMES = ("created_at", "started_at", "ended_at")


def spool_dir(db: Db) -> Path:
    return jobs_dir(db) / "spool"


def put(db: Db, job: dict[str, Any]) -> None:
    """Write (or replace) one job's row."""
    folder = spool_dir(db)
    folder.mkdir(parents=True, exist_ok=True)
    data = {name: job.get(name) for name in JOB_COLUMNS.names}
    for name in _TIMES:
        if isinstance(when := data[name], datetime):
            data[name] = when.isoformat()
    target = folder / f"{data['job_id']}.json"
    tmp = folder / f".{data['job_id']}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, target)  # NOTE: atomic: the worker and the pages read these while they change


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # replaced or removed meanwhile: the next look finds it again, or its row
        return None
    for name in _TIMES:
        if data.get(name):
            data[name] = datetime.fromisoformat(data[name])
    return data


def rows(db: Db) -> list[dict[str, Any]]:
    """Every spooled row (those being flushed included: they are in neither place for a moment), oldest first."""
    folder = spool_dir(db)
    paths = {p.stem: p for p in folder.glob("job-*.flushing")} if folder.is_dir() else {}
    paths.update({p.stem: p for p in folder.glob("job-*.json")} if folder.is_dir() else {})  # the newer write
    found = [r for r in (_read(p) for p in paths.values()) if r]
    return sorted(found, key=lambda r: (r["created_at"] or datetime.min, r["job_id"]))


def row(db: Db, job_id: str) -> dict[str, Any] | None:
    folder = spool_dir(db)
    return _read(folder / f"{job_id}.json") or _read(folder / f"{job_id}.flushing")


def flush(db: Db) -> int:
    """Upsert every spooled row into the jobs table; drop the files it stored. StoreHeld while the store is held
    (the claimed rows are then still read by rows(), and stored by the next flush).

    Each file is first renamed to `<job_id>.flushing` (atomic), so a row written meanwhile (a cancel, the
    worker closing its job) lands in a new `.json` that the next flush stores: the last write wins, as in
    the store, and none is lost. `.flushing` files left by a flush that died are stored by the next one.
    """
    folder = spool_dir(db)
    if not folder.is_dir():
        return 0
    for path in folder.glob("job-*.json"):
        os.replace(path, path.with_suffix(".flushing"))
    claimed = sorted(folder.glob("job-*.flushing"))
    batch = [r for r in (_read(p) for p in claimed) if r]
    if batch:
        upsert_jobs(batch, db)
        log.info("stored %d job(s) queued or closed while the store was held", len(batch))
    for path in claimed:
        path.unlink(missing_ok=True)
    return len(batch)
