"""RunLog -> DuckDB. One run per transaction, batched (Arrow tables, never row-by-row), idempotent, incremental.

    run_id = ingest_run("data/runs/<run_id>")        # after a run ends (or while it runs)
    ingest_pending()                                  # cheap: only logs that grew, and stale running runs

A run without an `end` event is `running` while its heartbeat is fresh, and `killed` once it is older
than `stale_after_s`; its finished epochs are kept either way. A `cancelled`, `failed` or `done` status
set by another part of LoaderLab is kept until the log itself says how the run ended.

Incremental: `runs.ingested_bytes` is the offset of the log the store holds; a log that grew is read
from there, whole lines only (a line being written waits for the next ingest). Rows are keyed on
(run_id, model_idx, rank, epoch[, step]) and replaced, never appended twice, so re-ingest changes nothing.
A program outside LoaderLab holding the file (a notebook) makes ingest raise StoreHeld after
DEFER_AFTER_S instead of waiting: the RunLog is the record, and the next ingest_pending() stores it.

A RunLog belongs to the one store it names (engine/store/pending.py, belongs): ingest_pending() takes only
those, and ingest_run() refuses a RunLog that names another store.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from engine.paths import Db, db_path, runs_dir
from engine.runlog import first_event, heartbeat_age, read_span
from engine.status import RunStatus
from engine.store import _events as ev
from engine.store import version
from engine.store._runrow import run_row
from engine.store._stored import previous, prior_events, stored_epochs, stored_samples, stored_waits
from engine.store.connect import connect
from engine.store.pending import belongs, check_owner, write_marker

__all__ = ["DEFER_AFTER_S", "ingest_pending", "ingest_run"]

log = logging.getLogger(__name__)

_TABLES = {"epochs": ev.epochs_table, "steps": ev.steps_table}
_KEEP_ON_CONFLICT = {"run_id", "tags", "notes", "deleted"}  # the user's edits survive re-ingest
DEFER_AFTER_S = 2.0  # how long an ingest waits for a program outside LoaderLab before leaving the log for later


def ingest_run(
    run_dir: str | os.PathLike,
    *,
    db: Db = None,
    job_id: str | None = None,
    sweep_meta: dict[str, Any] | None = None,
    stale_after_s: float | None = None,
    outside_wait_s: float | None = DEFER_AFTER_S,
    extra_events: list[dict[str, Any]] | None = None,
) -> str:
    """Write one RunLog into the store (one transaction) and return its run_id.

    `extra_events` follow the log's own: those its disk had no room for (the runner's `end` of a run that
    failed on a full disk). Raises StoreHeld after `outside_wait_s` when a program outside LoaderLab holds
    the file: the RunLog stays on disk and the next ingest_pending() stores it (None: wait as long as any
    other write).
    A RunLog that names another store is refused (ValueError): it is that store's to ingest.
    """
    check_owner(Path(run_dir), db)
    with connect(db, read_only=False, outside_wait_s=outside_wait_s) as conn:
        run_id, wrote = _ingest(conn, Path(run_dir), job_id, sweep_meta, stale_after_s, extra_events)
    if wrote:
        version.bump(db)  # the dashboard's cached charts are keyed on it
    return run_id


def ingest_pending(
    runs_root: Db = None, *, db: Db = None, stale_after_s: float = 30.0, outside_wait_s: float | None = DEFER_AFTER_S
) -> list[str]:
    """Ingest every RunLog under runs_root that grew since the store saw it, or whose run went stale.

    Only RunLogs that belong to this store (pending.belongs) are looked at. Cheap when nothing changed: one stat
    per run directory and one read-only query. Raises StoreHeld as ingest_run does; what is not stored now is
    found again by the next call. A store that does not exist is created only when a RunLog of its own waits.
    """
    root = Path(runs_root) if runs_root is not None else runs_dir(db)
    if not root.is_dir():
        return []
    dirs = sorted(d.resolve() for d in root.iterdir() if (d / "events.jsonl").is_file())
    if not dirs:
        return []
    seen: dict[str, tuple[int, str]] = {}
    if db_path(db).exists():
        with connect(db, read_only=True, outside_wait_s=outside_wait_s) as conn:
            seen = {
                r[0]: (r[1], r[2])
                for r in conn.execute(
                    "SELECT run_dir, ingested_bytes, status FROM runs WHERE run_dir IS NOT NULL"
                ).fetchall()
            }
    pending = []
    for d in dirs:
        size, status = seen.get(str(d), (None, None))
        if size != (d / "events.jsonl").stat().st_size:
            pending.append(d)
        elif status == RunStatus.RUNNING and (heartbeat_age(d) or 0.0) > stale_after_s:
            pending.append(d)
    pending = [d for d in pending if belongs(d, db)]  # NOTE: after the cheap stat: one small read per candidate
    done: list[str] = []
    if not pending:
        return done
    with connect(db, read_only=False, outside_wait_s=outside_wait_s) as conn:
        for d in pending:
            try:
                run_id, wrote = _ingest(conn, d, None, None, stale_after_s)
                if wrote:
                    done.append(run_id)
            except _NotStarted:
                log.debug("%s has no start event yet; skipped", d)
            except (duckdb.Error, OSError, ValueError) as e:  # one bad log must not block the others
                log.warning("could not ingest the run log %s: %s", d, e)
    if done:
        version.bump(db)  # the dashboard's cached charts are keyed on it
    return done


class _NotStarted(ValueError):
    pass


def _ingest(
    conn: duckdb.DuckDBPyConnection,
    run_dir: Path,
    job_id: str | None,
    sweep_meta: dict[str, Any] | None,
    stale_after_s: float | None,
    extra: list[dict[str, Any]] | None = None,
) -> tuple[str, bool]:
    """Read the RunLog from the byte offset the store holds (or whole), write what is new, update the run row.

    Returns the run_id and whether anything was written."""
    log_file = run_dir / "events.jsonl"
    if not log_file.is_file() and not extra:
        raise ValueError(f"{run_dir} is not a run log directory: it has no events.jsonl")
    size = log_file.stat().st_size if log_file.is_file() else 0  # bytes appended after this: the next ingest's
    prev = previous(conn, str(run_dir.resolve()))  # under the writer lock: no other ingest moves it meanwhile
    offset = prev["ingested_bytes"] or 0 if prev else 0
    start = first_event(log_file) if 0 < offset <= size and _line_start(log_file, offset) else None
    resumable = prev is not None and start is not None and start.get("type") == "start" and not extra
    new, consumed = read_span(log_file, offset, size) if resumable else ([], 0)
    if prev is not None and resumable and not new and not _went_stale(prev, run_dir, stale_after_s):
        return prev["run_id"], False  # no whole new line: the store is up to date
    if new:  # incremental: only the new lines are parsed; the summary reads the rest back from the store
        assert prev is not None and start is not None  # new lines are read only where resumable
        run_id, events = prev["run_id"], [*prior_events(prev), *new]
    else:  # first ingest, a log rewritten or cut short, or nothing new (a status to re-check): read it whole
        events, consumed = read_span(log_file, 0, size) if size else ([], 0)
        events += extra or []
        start = next((e for e in events if e.get("type") == "start"), None)
        if start is None:
            raise _NotStarted(f"{log_file} has no start event yet; nothing to ingest")
        run_id = str(start.get("run_id") or run_dir.name)
    epochs = ev.unique_epochs(new or events)
    tables = {name: fn(run_id, epochs) for name, fn in _TABLES.items()}
    tables["samples"] = ev.samples_table(run_id, new or events)
    tables["calibrations"] = ev.calibrations_table(run_id, new or events)
    conn.execute("BEGIN TRANSACTION")
    try:
        _write_tables(conn, run_id, tables, replace_all=not new)
        waits = None
        if new:
            epochs, samples = stored_epochs(conn, run_id), stored_samples(conn, run_id)
            waits = stored_waits(conn, run_id)
        else:
            samples = tables["samples"]
        row = run_row(
            run_id,
            run_dir,
            [start, *events] if new else events,
            start,
            epochs,
            samples,
            job_id=job_id,
            sweep_meta=sweep_meta,
            heartbeat_age=heartbeat_age(run_dir),
            stale_after_s=stale_after_s,
            waits=waits,
        )
        _keep_status(conn, run_id, row, events)
        # NOTE: a run that is over never completes a torn last line; the whole size is done with
        row["ingested_bytes"] = consumed if row["status"] == RunStatus.RUNNING else size
        _upsert_run(conn, row)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    write_marker(run_dir, row["ingested_bytes"])
    log.info(
        "ingested run %s (%s, %d new epochs%s)",
        run_id,
        row["status"],
        len(ev.unique_epochs(new or events)),
        f", from byte {offset}" if new else "",
    )
    return run_id, True


def _line_start(log_file: Path, offset: int) -> bool:
    """Whether the stored offset is just past a newline (a store written before offsets were whole lines
    may hold one in mid-line: that log is read whole once)."""
    with open(log_file, "rb") as fh:
        fh.seek(offset - 1)
        return fh.read(1) == b"\n"


def _went_stale(prev: dict[str, Any], run_dir: Path, stale_after_s: float | None) -> bool:
    """A run stored as running whose heartbeat stopped: re-read it whole to store it as killed."""
    age = heartbeat_age(run_dir)
    return prev["status"] == RunStatus.RUNNING and stale_after_s is not None and age is not None and age > stale_after_s


def _write_tables(
    conn: duckdb.DuckDBPyConnection, run_id: str, tables: dict[str, pa.Table], *, replace_all: bool
) -> None:
    """Insert the tables' rows; replace the run's rows (all, or those of the epochs read again)."""
    for name, table in tables.items():
        if replace_all:
            conn.execute(f"DELETE FROM {name} WHERE run_id = ?", [run_id])
        elif name in _TABLES and table.num_rows:  # an epoch written again: last one wins, as in a full read
            conn.register("_ingest_keys", table.select(["model_idx", "rank", "epoch"]))
            try:
                conn.execute(
                    f"DELETE FROM {name} WHERE run_id = ? AND (model_idx, rank, epoch) IN "
                    "(SELECT (model_idx, rank, epoch) FROM _ingest_keys)",
                    [run_id],
                )
            finally:
                conn.unregister("_ingest_keys")
        if table.num_rows:
            conn.register("_ingest_rows", table)
            try:
                conn.execute(f"INSERT INTO {name} BY NAME SELECT * FROM _ingest_rows")
            finally:
                conn.unregister("_ingest_rows")


def _keep_status(conn: duckdb.DuckDBPyConnection, run_id: str, row: dict[str, Any], events: list[dict]) -> None:
    """A cancelled, failed or done status set elsewhere stands until the log itself says how the run ended."""
    found = conn.execute("SELECT status, error, ended_at FROM runs WHERE run_id = ?", [run_id]).fetchall()
    before = found[0] if found else None
    if before and not any(e.get("type") == "end" for e in events):
        kept = (RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.DONE)
        if before[0] in kept or (before[0] == RunStatus.KILLED and row["status"] == RunStatus.KILLED):
            row["status"], row["error"], row["ended_at"] = before


def _upsert_run(conn: duckdb.DuckDBPyConnection, row: dict[str, Any]) -> None:
    cols = list(row)
    quoted = ", ".join(f'"{c}"' for c in cols)
    updates = ", ".join(f'"{c}" = excluded."{c}"' for c in cols if c not in _KEEP_ON_CONFLICT)
    conn.execute(
        f"INSERT INTO runs ({quoted}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT (run_id) DO UPDATE SET {updates}",
        list(row.values()),
    )
