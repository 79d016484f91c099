"""RunLog -> DuckDB. One run per transaction, batched (Arrow tables, never row-by-row), idempotent.

    run_id = ingest_run("data/runs/<run_id>")        # after a run ends (or while it runs)
    ingest_pending()                                  # cheap: only logs that grew, and stale running runs

A run without an `end` event is `running` while its heartbeat is fresh, and `killed` once it is older
than `stale_after_s`; its finished epochs are kept either way. A `cancelled`, `failed` or `done` status
set by another part of LoaderLab is kept until the log itself says how the run ended.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import duckdb

from engine.paths import runs_dir
from engine.runlog import heartbeat_age, read_events
from engine.store import _events as ev
from engine.store._runrow import run_row
from engine.store.connect import connect
from engine.store.pending import write_marker

__all__ = ["ingest_pending", "ingest_run"]

log = logging.getLogger(__name__)

_TABLES = {"epochs": ev.epochs_table, "steps": ev.steps_table}
_KEEP_ON_CONFLICT = {"run_id", "tags", "notes", "deleted"}  # the user's edits survive re-ingest


def ingest_run(run_dir: str | os.PathLike, *, db: str | os.PathLike | None = None, job_id: str | None = None,
               sweep_meta: dict[str, Any] | None = None, stale_after_s: float | None = None) -> str:
    """Write one RunLog into the store (one transaction) and return its run_id."""
    with connect(db, read_only=False) as conn:
        return _ingest(conn, Path(run_dir), job_id, sweep_meta, stale_after_s)


def ingest_pending(runs_root: str | os.PathLike | None = None, *, db: str | os.PathLike | None = None,
                   stale_after_s: float = 30.0) -> list[str]:
    """Ingest every RunLog under runs_root that grew since the store saw it, or whose run went stale.

    Cheap when nothing changed: one stat per run directory and one read-only query.
    """
    root = Path(runs_root) if runs_root is not None else runs_dir(db)
    if not root.is_dir():
        return []
    dirs = sorted(d.resolve() for d in root.iterdir() if (d / "events.jsonl").is_file())
    if not dirs:
        return []
    with connect(db, read_only=True) as conn:
        seen = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT run_dir, ingested_bytes, status FROM runs WHERE run_dir IS NOT NULL").fetchall()}
    pending = []
    for d in dirs:
        size, status = seen.get(str(d), (None, None))
        if size != (d / "events.jsonl").stat().st_size:
            pending.append(d)
        elif status == "running" and (heartbeat_age(d) or 0.0) > stale_after_s:
            pending.append(d)
    done: list[str] = []
    if not pending:
        return done
    with connect(db, read_only=False) as conn:
        for d in pending:
            try:
                done.append(_ingest(conn, d, None, None, stale_after_s))
            except _NotStarted:
                log.debug("%s has no start event yet; skipped", d)
            except (duckdb.Error, OSError, ValueError) as e:  # one bad log must not block the others
                log.warning("could not ingest the run log %s: %s", d, e)
    return done


class _NotStarted(ValueError):
    pass


def _ingest(conn: duckdb.DuckDBPyConnection, run_dir: Path, job_id: str | None,
            sweep_meta: dict[str, Any] | None, stale_after_s: float | None) -> str:
    log_file = run_dir / "events.jsonl"
    if not log_file.is_file():
        raise ValueError(f"{run_dir} is not a run log directory: it has no events.jsonl")
    size = log_file.stat().st_size  # before reading: bytes appended meanwhile trigger the next ingest
    events = read_events(run_dir)
    start = next((e for e in events if e.get("type") == "start"), None)
    if start is None:
        raise _NotStarted(f"{log_file} has no start event yet; nothing to ingest")
    run_id = str(start.get("run_id") or run_dir.name)
    epochs = ev.unique_epochs(events)
    tables = {name: fn(run_id, epochs) for name, fn in _TABLES.items()}
    tables["samples"] = ev.samples_table(run_id, events)
    tables["calibrations"] = ev.calibrations_table(run_id, events)
    row = run_row(run_id, run_dir, events, start, epochs, tables["samples"],
                  job_id=job_id, sweep_meta=sweep_meta, heartbeat_age=heartbeat_age(run_dir),
                  stale_after_s=stale_after_s)
    row["ingested_bytes"] = size
    conn.execute("BEGIN TRANSACTION")
    try:
        found = conn.execute("SELECT status, error, ended_at FROM runs WHERE run_id = ?", [run_id]).fetchall()
        before = found[0] if found else None
        if before and not any(e.get("type") == "end" for e in events):
            if before[0] in ("cancelled", "failed", "done") or (before[0] == "killed" and row["status"] == "killed"):
                row["status"], row["error"], row["ended_at"] = before  # keep it: the log says nothing newer
        for name, table in tables.items():
            conn.execute(f"DELETE FROM {name} WHERE run_id = ?", [run_id])
            if table.num_rows:
                conn.register("_ingest_rows", table)
                try:
                    conn.execute(f"INSERT INTO {name} BY NAME SELECT * FROM _ingest_rows")
                finally:
                    conn.unregister("_ingest_rows")
        _upsert_run(conn, row)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    write_marker(run_dir, size)
    log.info("ingested run %s (%s, %d epochs)", run_id, row["status"], len(epochs))
    return run_id


def _upsert_run(conn: duckdb.DuckDBPyConnection, row: dict[str, Any]) -> None:
    cols = list(row)
    quoted = ", ".join(f'"{c}"' for c in cols)
    updates = ", ".join(f'"{c}" = excluded."{c}"' for c in cols if c not in _KEEP_ON_CONFLICT)
    conn.execute(f"INSERT INTO runs ({quoted}) VALUES ({', '.join('?' * len(cols))}) "
                 f"ON CONFLICT (run_id) DO UPDATE SET {updates}", list(row.values()))

