"""Changes a user makes to stored runs: tags, notes, soft delete and restore, purge, and export to files.

Re-ingesting a run keeps its tags, notes and deleted flag. Purge is the only hard delete; it also
removes the purged runs' RunLog folders under the store's runs/ folder, or ingest would bring them back.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from pathlib import Path

import duckdb

from engine.errors import ConfigError
from engine.paths import Db, db_path, runs_dir
from engine.store import version
from engine.store.connect import connect
from engine.store.schema import TABLES

__all__ = ["export", "purge", "restore", "set_notes", "set_tags", "soft_delete"]

log = logging.getLogger(__name__)

_RUN_TABLES = ("epochs", "steps", "samples", "calibrations")


def _update_one(run_id: str, column: str, value: str | None, db: Db) -> None:
    with connect(db, read_only=False) as conn:
        hit = conn.execute(
            f"UPDATE runs SET {column} = ? WHERE run_id = ? RETURNING run_id", [value, run_id]
        ).fetchall()
    if not hit:
        raise ValueError(f"run '{run_id}' is not in the store {db_path(db)}; check the id in the runs list")
    version.bump(db)  # from the CLI or a notebook too: the dashboard's cached tables are keyed on it


def set_tags(run_id: str, tags: str | list[str], db: Db = None) -> str | None:
    """Replace the run's tags (a comma-separated string or a list); returns the stored form."""
    items = tags.split(",") if isinstance(tags, str) else [str(t) for t in tags]
    clean = list(dict.fromkeys(t.strip() for t in items if t.strip()))  # strip, drop empties, dedupe in order
    value = ",".join(clean) or None
    _update_one(run_id, "tags", value, db)
    return value


def set_notes(run_id: str, notes: str, db: Db = None) -> None:
    _update_one(run_id, "notes", notes or None, db)


def _set_deleted(run_ids: str | list[str], deleted: bool, db: Db) -> int:
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    if not ids:
        return 0
    with connect(db, read_only=False) as conn:
        hit = conn.execute(
            f"UPDATE runs SET deleted = ? WHERE run_id IN ({', '.join('?' * len(ids))}) RETURNING run_id",
            [deleted, *ids],
        ).fetchall()
    version.bump(db)
    return len(hit)


def soft_delete(run_ids: str | list[str], db: Db = None) -> int:
    """Hide runs from lists and charts (kept until purge). Returns how many runs were found."""
    return _set_deleted(run_ids, True, db)


def restore(run_ids: str | list[str], db: Db = None) -> int:
    """Undo soft_delete."""
    return _set_deleted(run_ids, False, db)


def purge(db: Db = None) -> int:
    """Delete soft-deleted runs, their rows and their RunLogs for good. Returns how many runs went."""
    with connect(db, read_only=False) as conn:
        conn.execute("BEGIN TRANSACTION")
        try:
            gone = conn.execute("SELECT run_id, run_dir FROM runs WHERE deleted").fetchall()
            for table in _RUN_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM runs WHERE deleted)")
            conn.execute("DELETE FROM runs WHERE deleted")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    version.bump(db)
    root = runs_dir(db).resolve()
    for run_id, run_dir in gone:
        folder = Path(run_dir).resolve() if run_dir else root / run_id
        if folder.parent == root and folder.is_dir():  # never remove anything outside the store's runs/
            shutil.rmtree(folder, ignore_errors=True)
        elif run_dir:
            log.warning("purged run %s; its RunLog %s is outside %s and was left in place", run_id, folder, root)
    return len(gone)


def export(path: str | os.PathLike, fmt: str, db: Db = None, table: str = "runs") -> Path:
    """Write one table (deleted runs left out) to a Parquet or CSV file and return its path.

    The file appears whole or not at all: it is written beside the target under a temporary name and renamed
    over it once complete. A target that cannot be written is a ConfigError naming `out` (the CLI's --out).
    """
    if fmt not in ("parquet", "csv"):
        raise ValueError(f"export format '{fmt}' is unknown; choose parquet or csv")
    if table not in ("runs", *TABLES):
        raise ValueError(f"table '{table}' is unknown; choose one of: {', '.join(['runs', *TABLES])}")
    out = Path(path).expanduser().resolve()
    if out.exists() and not out.is_file():
        raise ConfigError("out", f"'{out}' exists and is not a regular file; give --out a file path")
    if table == "runs":
        query = "SELECT * FROM runs WHERE NOT deleted ORDER BY created_at"
    elif table in _RUN_TABLES:
        query = f"SELECT * FROM {table} WHERE run_id IN (SELECT run_id FROM runs WHERE NOT deleted)"
    else:
        query = f"SELECT * FROM {table}"
    options = "FORMAT parquet" if fmt == "parquet" else "FORMAT csv, HEADER true"
    partial = _partial_file(out)
    try:
        with connect(db, read_only=True) as conn:  # COPY TO a file works on a read-only connection
            conn.execute(
                f"COPY ({query}) TO '{str(partial).replace(chr(39), chr(39) * 2)}' ({options}, USE_TMP_FILE false)"
            )
        os.replace(partial, out)
    except (duckdb.IOException, OSError) as e:
        raise ConfigError(
            "out",
            f"could not write '{out}' ({_first_line(e)}); nothing was written there; "
            "check the free space, or give --out another file",
        ) from None
    finally:
        partial.unlink(missing_ok=True)
    return out


def _partial_file(out: Path) -> Path:
    """An empty file beside `out` that the export is written to, or a ConfigError saying why there can be none."""
    partial = out.with_name(f".{out.name}.{secrets.token_hex(4)}.partial")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask's mode, as open() gives
    except OSError as e:
        raise ConfigError(
            "out",
            f"cannot write '{out}': no file can be created in '{out.parent}' ({e.strerror}); "
            "give --out a file in a folder you can write",
        ) from None
    return partial


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
