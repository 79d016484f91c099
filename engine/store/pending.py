"""RunLogs on disk that the store does not hold yet, and who holds the store: cheap, never a write lock.

    store.pending_summary()   # {"count": 2, "holder": "pid 4242 (duckdb)"}

A run goes ahead whatever holds the store (its RunLog is the record); when the store cannot be written
its log waits here until the next command that can write ingests it. This module answers "how many are
waiting, and why" for the dashboard and the CLI while a user's DuckDB session holds the file, so it
never waits: it reads the store's offsets read-only when that opens at once, and otherwise the
`ingested` marker each ingest leaves in the run's folder (the byte offset it stored).

A RunLog belongs to one store, the one it names (engine.runlog.claim): stores that share a folder share its
runs/, and each one takes only its own RunLogs (belongs). A RunLog written before RunLogs named their store
is left to the store of the default name beside it (`loaderlab.duckdb`), where every such log was meant to go
unless --db said otherwise; any other store takes one only on an explicit `python -m engine import RUN_DIR`.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from engine.paths import Db, db_path, runs_dir
from engine.runlog import heartbeat_age, held_by_launcher, owner
from engine.store._lock import proc_lock_holders
from engine.store.connect import connect
from engine.errors import StoreError

__all__ = [
    "LEGACY_STORE",
    "MARKER",
    "belongs",
    "check_owner",
    "lock_holders",
    "pending_runs",
    "pending_summary",
    "read_marker",
    "write_marker",
]

log = logging.getLogger(__name__)

MARKER = "ingested"  # <run_dir>/ingested: the byte offset of events.jsonl the store holds
LEGACY_STORE = "loaderlab.duckdb"  # the store that takes RunLogs naming none (written before they named one)
STALE_AFTER_S = 30.0  # as the job worker: a run silent for longer is over, and waits to be stored as killed
_PROBE_S = 0.3  # how long the read-only look at the store may wait for a LoaderLab writer


def pending_summary(db: Db = None) -> dict[str, object]:
    """{"count": RunLogs of finished (or dead) runs not fully in the store, "holder": who holds the file or None}."""
    return {"count": len(pending_runs(db)), "holder": holder(db)}


def pending_runs(db: Db = None, stale_after_s: float = STALE_AFTER_S) -> list[Path]:
    """Run folders of this store whose run is over (an `end` event, or a stale heartbeat), whose log the store
    lacks, and whose launcher is done with them (stored them or gave up, or died)."""
    root = runs_dir(db)
    if not root.is_dir():
        return []
    stored = _stored_offsets(db)
    out = []
    for d in sorted(root.iterdir()):
        try:
            size = (d / "events.jsonl").stat().st_size
        except OSError:
            continue
        have = stored.get(str(d.resolve())) if stored is not None else read_marker(d)
        if size and have != size and _over(d, stale_after_s) and belongs(d, db) and not held_by_launcher(d):
            out.append(d)  # NOTE: a run whose launcher is alive is stored by it, or counted once it gave up
    return out


def belongs(run_dir: Path, db: Db = None) -> bool:
    """Whether this store is the one to ingest the RunLog: the store it names, or for a RunLog naming none, the
    store of the default name in the folder that holds its runs/."""
    named, path = owner(run_dir), db_path(db)
    if named is not None:
        return named == str(path)
    return path.name == LEGACY_STORE and Path(run_dir).resolve().parent == runs_dir(db)


def check_owner(run_dir: Path, db: Db = None) -> None:
    """Refuse (ValueError) a RunLog that names another store: an explicit ingest or import may take a RunLog that
    names none, never another store's."""
    named = owner(run_dir)
    if named is None or named == str(db_path(db)):
        return
    if not named:
        raise ValueError(
            f"the RunLog {run_dir} names its store in {Path(run_dir) / 'store'}, which cannot be read; "
            "make it readable, then retry"
        )
    raise ValueError(
        f"the RunLog {run_dir} belongs to the store {named}, not {db_path(db)}; only that store stores it: --db {named}"
    )


def holder(db: Db = None) -> str | None:
    """'pid 1234 (duckdb)' for each other process with the DuckDB file open (Linux /proc/locks), or None."""
    pids = [p for p in lock_holders(db_path(db)) if p != os.getpid()]
    if not pids:
        return None
    return ", ".join(f"pid {p} ({_comm(p)})" for p in pids)


def lock_holders(path: Path) -> list[int]:
    """Pids with a POSIX lock (DuckDB's) on this file; [] where /proc/locks is unavailable."""
    try:
        inode = path.stat().st_ino
    except OSError:
        return []
    return proc_lock_holders(inode, "POSIX")


def read_marker(run_dir: Path) -> int | None:
    try:
        return int((run_dir / MARKER).read_text().strip() or -1)
    except (OSError, ValueError):
        return None


def write_marker(run_dir: Path, size: int) -> None:
    """Record the stored offset; written after the commit, so a marker never claims more than the store has."""
    tmp = run_dir / f".{MARKER}.{os.getpid()}"
    try:
        tmp.write_text(str(size))
        os.replace(tmp, run_dir / MARKER)
    except OSError as e:  # the marker is only a hint for pending_summary; the store is the truth
        log.debug("could not write %s: %s", run_dir / MARKER, e)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or "?"
    except OSError:
        return "?"


def _stored_offsets(db: Db) -> dict[str, int] | None:
    """run_dir -> ingested_bytes from the store read-only, or None when it does not open at once."""
    if not db_path(db).exists():
        return {}
    try:
        with connect(db, read_only=True, timeout_s=_PROBE_S) as conn:
            rows = conn.execute("SELECT run_dir, ingested_bytes FROM runs WHERE run_dir IS NOT NULL").fetchall()
    except StoreError as e:  # an outside writer, or a long LoaderLab write: fall back to the markers
        log.debug("store not readable now (%s); using the ingested markers", e)
        return None
    return {r[0]: r[1] for r in rows}


def _over(run_dir: Path, stale_after_s: float) -> bool:
    """Whether the run has ended: its last whole line is the `end` event, or it stopped beating."""
    try:
        with open(run_dir / "events.jsonl", "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            tail = fh.read()
    except OSError:
        return False
    lines = tail[: tail.rfind(b"\n") + 1].splitlines()
    try:
        if lines and json.loads(lines[-1]).get("type") == "end":
            return True
    except (json.JSONDecodeError, AttributeError):
        pass
    return (heartbeat_age(run_dir) or 0.0) > stale_after_s
