"""The job queue's table: every read and write of `jobs`. engine/jobs/ decides what they mean.

A job row is JOB_COLUMNS (queued -> running -> done | failed | cancelled). Each call opens the store for
that one statement. Where a program outside LoaderLab (a user's notebook) holds the file, the calls
that a launch or the worker can do without raise StoreHeld after DEFER_AFTER_S instead of waiting:
the job queue then lives in its spool beside the store (engine/jobs/spool.py).

    insert_jobs(rows, db)          # submit
    take_next_job(pid, now, db)    # the worker: the oldest queued job, marked running
    close_job(job_id, "done", None, now, db)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd
import pyarrow as pa

from engine.errors import StoreBusy
from engine.paths import Db
from engine.store.connect import connect
from engine.store.ingest import DEFER_AFTER_S

__all__ = [
    "JOB_COLUMNS",
    "cancel_queued_job",
    "close_job",
    "finished_job_times",
    "get_job",
    "insert_jobs",
    "landed_runs",
    "queued_jobs",
    "recent_jobs",
    "running_jobs",
    "store_held",
    "sweep_jobs",
    "take_next_job",
    "upsert_jobs",
]

JOB_COLUMNS = pa.schema(
    [
        ("job_id", pa.string()),
        ("created_at", pa.timestamp("us")),
        ("status", pa.string()),
        ("config_json", pa.string()),
        ("sweep_id", pa.string()),
        ("run_id", pa.string()),
        ("device", pa.string()),
        ("pid", pa.int32()),
        ("error", pa.string()),
        ("started_at", pa.timestamp("us")),
        ("ended_at", pa.timestamp("us")),
    ]
)


def _row(cur: Any) -> dict[str, Any] | None:
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row)) if row else None


def _write_rows(rows: list[dict[str, Any]], statement: str, db: Db) -> None:
    table = pa.Table.from_pylist(rows, schema=JOB_COLUMNS)
    with connect(db, read_only=False, outside_wait_s=DEFER_AFTER_S) as conn:
        conn.register("_job_rows", table)
        try:
            conn.execute(statement)
        finally:
            conn.unregister("_job_rows")


def insert_jobs(rows: list[dict[str, Any]], db: Db) -> None:
    """New rows (columns left out are NULL). StoreHeld while a program outside LoaderLab holds the store."""
    _write_rows(rows, "INSERT INTO jobs BY NAME SELECT * FROM _job_rows", db)


def upsert_jobs(rows: list[dict[str, Any]], db: Db) -> None:
    """Whole rows, replacing any of the same job_id (the spool's rows are the newer). StoreHeld as insert_jobs."""
    _write_rows(rows, "INSERT OR REPLACE INTO jobs BY NAME SELECT * FROM _job_rows", db)


def recent_jobs(limit: int, db: Db) -> pd.DataFrame:
    """Newest first. StoreHeld while another program holds the store for writing."""
    with connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S) as conn:
        return conn.execute("SELECT * FROM jobs ORDER BY created_at DESC, job_id DESC LIMIT ?", [limit]).df()


def get_job(job_id: str, db: Db) -> dict[str, Any] | None:
    """The job's row, or None. StoreHeld while another program holds the store for writing."""
    with connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S) as conn:
        return _row(conn.execute("SELECT * FROM jobs WHERE job_id = ?", [job_id]))


def sweep_jobs(sweep_ids: list[str], db: Db) -> pd.DataFrame:
    """Every job of these sweeps, whatever recent_jobs' limit left out. StoreHeld as recent_jobs."""
    if not sweep_ids:
        return pd.DataFrame(columns=JOB_COLUMNS.names)
    with connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S) as conn:
        return conn.execute(
            "SELECT * FROM jobs WHERE list_contains(?, sweep_id) ORDER BY created_at DESC, job_id DESC",
            [list(sweep_ids)],
        ).df()


def finished_job_times(host: str, db: Db) -> list[dict[str, Any]]:
    """Done jobs whose run ran on `host`: the run's workload, model, n_samples, epochs, bound and the job's wall
    seconds from start to end (subprocess, dataset, calibration and ingest included): what a new job will take."""
    with connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S) as conn:
        cur = conn.execute(
            "SELECT r.workload, r.model, r.n_samples, r.epochs, r.bound, "
            "epoch(j.ended_at - j.started_at) AS job_s FROM jobs j JOIN runs r USING (run_id) "
            "WHERE j.status = 'done' AND r.host = ? AND j.started_at IS NOT NULL AND j.ended_at > j.started_at "
            "ORDER BY j.ended_at DESC LIMIT 2000",
            [host],
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, t)) for t in cur.fetchall()]


def landed_runs(sweep_id: str, db: Db) -> dict[str, int]:
    """A ray-sweep job's runs in the store so far (they carry its sweep_id), counted by status. StoreHeld as
    get_job."""
    with connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S) as conn:
        return dict(
            conn.execute("SELECT status, count(*) FROM runs WHERE sweep_id = ? GROUP BY status", [sweep_id]).fetchall()
        )


def cancel_queued_job(job_id: str, at: datetime, error: str, db: Db) -> str | None:
    """Cancel the job if it is still queued; returns its status now ("cancelled", or what it was: the worker
    may have taken it), None if there is no such job. StoreHeld as insert_jobs."""
    with connect(db, read_only=False, outside_wait_s=DEFER_AFTER_S) as conn:
        hit = conn.execute(
            "UPDATE jobs SET status = 'cancelled', ended_at = ?, error = ? WHERE job_id = ? "
            "AND status = 'queued' RETURNING job_id",
            [at, error, job_id],
        ).fetchone()
        if hit:
            return "cancelled"
        row = _row(conn.execute("SELECT * FROM jobs WHERE job_id = ?", [job_id]))
    return row["status"] if row else None


def take_next_job(pid: int, at: datetime, db: Db) -> dict[str, Any] | None:
    """Mark the oldest queued job running (by `pid`, from `at`) and return its row; a read-only peek first keeps
    idle polls lock-free. StoreHeld (a StoreError) while the store cannot be opened."""
    with connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S) as conn:
        (queued,) = conn.execute("SELECT count(*) FROM jobs WHERE status = 'queued'").fetchone() or (0,)
        if not queued:
            return None
    with connect(db, read_only=False, outside_wait_s=DEFER_AFTER_S) as conn:
        return _row(
            conn.execute(
                "UPDATE jobs SET status = 'running', pid = ?, started_at = ? WHERE job_id = (SELECT job_id FROM jobs "
                "WHERE status = 'queued' ORDER BY created_at, job_id LIMIT 1) AND status = 'queued' RETURNING *",
                [pid, at],
            )
        )


def queued_jobs(db: Db) -> list[dict[str, Any]]:
    """Every queued row, oldest first, read without waiting at all (raises any StoreError at once)."""
    with connect(db, read_only=True, outside_wait_s=0.0) as conn:
        cur = conn.execute("SELECT * FROM jobs WHERE status = 'queued' ORDER BY created_at, job_id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, t)) for t in cur.fetchall()]


def close_job(
    job_id: str, status: str, error: str | None, at: datetime, db: Db, *, outside_wait_s: float | None = None
) -> None:
    """Set the job's final status, error and end time."""
    with connect(db, read_only=False, outside_wait_s=outside_wait_s) as conn:
        conn.execute(
            "UPDATE jobs SET status = ?, error = ?, ended_at = ? WHERE job_id = ?", [status, error, at, job_id]
        )


def running_jobs(db: Db) -> list[tuple[str, str | None]]:
    """(job_id, run_id) of every job marked running."""
    with connect(db, read_only=True) as conn:
        return conn.execute("SELECT job_id, run_id FROM jobs WHERE status = 'running'").fetchall()


def store_held(db: Db) -> bool:
    """Whether a program outside LoaderLab holds the store now (a quick writer open, closed at once)."""
    try:
        with connect(db, read_only=False, outside_wait_s=DEFER_AFTER_S):
            return False
    except StoreBusy:
        return True
