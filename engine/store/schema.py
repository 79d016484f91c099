"""The store's tables, its version and its migrations.

`ensure_schema(conn, path)` runs on every writer open. It applies the migrations the file lacks, in
order, after copying the file to `<db>.bak-v<old>`, and adds a `runs` column for every RunConfig field
the table lacks, so the config schema and the store stay one schema: a new field needs no migration.
"""

from __future__ import annotations

import json
import logging
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import duckdb
import pandas as pd

from engine.config import config_fields
from engine.errors import StoreVersionError
from engine.measure import machine_id
from engine.store.tables import (
    BUILTIN_QUERIES,
    EPOCH_COLUMNS_V4,
    RUN_COLUMNS,
    STORED_BUILTINS,
    SUMMARY_COLUMNS,
    SUMMARY_COLUMNS_V2,
    SUMMARY_COLUMNS_V4,
    SUMMARY_COLUMNS_V5,
    SUMMARY_COLUMNS_V6,
    TABLES,
)

__all__ = [
    "MIGRATIONS",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "SUMMARY_COLUMNS",
    "TABLES",
    "config_columns",
    "ensure_schema",
    "needs_upgrade",
    "schema_version",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 9

_SQL_TYPES = {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "str": "VARCHAR", "list[str]": "VARCHAR"}


def config_columns() -> dict[str, str]:
    """RunConfig field -> SQL type, in declaration order. list[str] fields hold JSON text."""
    out = {}
    for f in config_fields():
        if f.name in RUN_COLUMNS:
            raise RuntimeError(
                f"RunConfig field '{f.name}' collides with the store column of that name; rename the field"
            )
        out[f.name] = _SQL_TYPES.get(_type_name(f.type), "VARCHAR")
    return out


def _type_name(t: object) -> str:
    """'int', 'list[str]', ... whether annotations are strings (PEP 563) or real types."""
    if isinstance(t, str):
        return t.replace(" ", "")
    return str(t) if hasattr(t, "__origin__") else getattr(t, "__name__", str(t))


def _v1(conn: duckdb.DuckDBPyConnection) -> None:
    cols = ", ".join(f'"{k}" {v}' for k, v in RUN_COLUMNS.items())
    conn.execute(f"CREATE TABLE IF NOT EXISTS runs ({cols})")
    for name, body in TABLES.items():
        conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({body})")
    now = _now()
    for name in STORED_BUILTINS:
        conn.execute("INSERT OR IGNORE INTO saved_queries VALUES (?, ?, true, ?)", [name, BUILTIN_QUERIES[name], now])


def _v2(conn: duckdb.DuckDBPyConnection) -> None:
    """The bound per mode: overlap, serial bound, calibration age, its note and error on the run row."""
    for name in SUMMARY_COLUMNS_V2:  # a file made at v2 got them from _v1's CREATE already
        conn.execute(f'ALTER TABLE runs ADD COLUMN IF NOT EXISTS "{name}" {SUMMARY_COLUMNS[name]}')


def _v3(conn: duckdb.DuckDBPyConnection) -> None:
    """The fingerprint of a plugin run's code, so results of changed code never pool with the old ones."""
    conn.execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS code_hash {RUN_COLUMNS['code_hash']}")


def _v4(conn: duckdb.DuckDBPyConnection) -> None:
    """GPU idle split by cause per epoch and per run, NVML beside it, the run's start-up phases, and the
    bound's CPU side (CPU-seconds of each pass, usable cores, runnable threads, the verdict's help).

    NOTE: added as NULL for the runs and epochs already stored: not measured, which 0 would misstate."""
    for name in EPOCH_COLUMNS_V4:
        conn.execute(f'ALTER TABLE epochs ADD COLUMN IF NOT EXISTS "{name}" DOUBLE')
    for name in SUMMARY_COLUMNS_V4:
        conn.execute(f'ALTER TABLE runs ADD COLUMN IF NOT EXISTS "{name}" {SUMMARY_COLUMNS[name]}')


def _v5(conn: duckdb.DuckDBPyConnection) -> None:
    """The predicted epoch beside the measured one (engine/predict/model.py): its value, what it came from, its limit.

    NOTE: NULL for the runs already stored: never predicted, and no probe of theirs is left to predict them now."""
    for name in SUMMARY_COLUMNS_V5:
        conn.execute(f'ALTER TABLE runs ADD COLUMN IF NOT EXISTS "{name}" {SUMMARY_COLUMNS[name]}')


def _v6(conn: duckdb.DuckDBPyConnection) -> None:
    """The predicted epoch's range (predicted_lo_s, predicted_hi_s), from the probe's spread or the residuals'; runs of
    the user's own loop (engine/observe/): their source, the stream observed, the loader's settings; the pools the lab
    did not set and the threads they add, a plugin's items loaded one at a time, the steady epochs' CPU %; a stream's
    split (self, shard, item) and its note.

    NOTE: NULL for the runs already stored: not measured or not recorded (an empty list or 0 would misstate it), and
    every one of them is the lab's own."""
    for name in SUMMARY_COLUMNS_V6:
        conn.execute(f'ALTER TABLE runs ADD COLUMN IF NOT EXISTS "{name}" {SUMMARY_COLUMNS[name]}')


def _v7(conn: duckdb.DuckDBPyConnection) -> None:
    """One host is one machine: host_fingerprint hashed the thread settings in until v6, so a run at 1 intra-op thread
    read as another host. Each stored run whose host facts name its machine gets that machine's fingerprint
    (engine/measure/machine.py); a run stored without them (imported, merged from elsewhere) keeps its own.

    NOTE: the thread settings stay in host_json, and `threads` is a run field: nothing of what was measured is lost."""
    rows = conn.execute("SELECT run_id, host_json FROM runs WHERE host_json IS NOT NULL").fetchall()
    fixed = []
    for run_id, host_json in rows:
        try:
            facts = json.loads(host_json)
        except ValueError:
            continue
        machine = facts.get("machine") or machine_id(facts) if isinstance(facts, dict) else None
        if machine:
            fixed.append((run_id, str(machine)))
    if fixed:
        conn.register("_v7_hosts", pd.DataFrame(fixed, columns=["run_id", "fp"]))
        try:
            conn.execute("UPDATE runs SET host_fingerprint = h.fp FROM _v7_hosts h WHERE runs.run_id = h.run_id")
        finally:
            conn.unregister("_v7_hosts")


def _v8(conn: duckdb.DuckDBPyConnection) -> None:
    """A script's tune answered (`engine tune -- python train.py`): the `tunes` table; its trials are runs already.

    NOTE: a file made at v8 got the table from _v1's CREATE already; the runs of an older file are untouched."""
    conn.execute(f"CREATE TABLE IF NOT EXISTS tunes ({TABLES['tunes']})")


def _v9(conn: duckdb.DuckDBPyConnection) -> None:
    """A tune's comparison of its answer with the script's own setting is its `difference`, as in engine.analysis.stats:
    'verdict' names only what limits a run. A file made at v8 had the column as `verdict`."""
    columns = {
        r[0] for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'tunes'").fetchall()
    }
    if "verdict" in columns:
        conn.execute("ALTER TABLE tunes RENAME COLUMN verdict TO difference")


# (version, migration) in order. A migration gets a writer connection inside a transaction.
MIGRATIONS: list[tuple[int, Callable[[duckdb.DuckDBPyConnection], None]]] = [
    (1, _v1),
    (2, _v2),
    (3, _v3),
    (4, _v4),
    (5, _v5),
    (6, _v6),
    (7, _v7),
    (8, _v8),
    (9, _v9),
]


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _table_names(conn: duckdb.DuckDBPyConnection) -> set[str]:
    rows = conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary"
    ).fetchall()
    return {r[0] for r in rows}


def schema_version(conn: duckdb.DuckDBPyConnection) -> int:
    """The file's schema version; 0 for a file without LoaderLab tables."""
    try:  # NOTE: cheaper than looking in duckdb_tables(), which loads the catalog on a fresh connection
        return conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchall()[0][0]
    except duckdb.CatalogException:
        return 0


def _missing_config_columns(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    have = {r[0] for r in conn.execute("SELECT name FROM pragma_table_info('runs')").fetchall()}
    return {k: v for k, v in config_columns().items() if k not in have}


def _check_not_newer(version: int, path: Path | None) -> None:
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the store {path} was written by a newer LoaderLab (schema v{version}; this one knows "
            f"v{SCHEMA_VERSION}); upgrade LoaderLab or use --db with another file"
        )


def needs_upgrade(conn: duckdb.DuckDBPyConnection, path: Path | None = None) -> bool:
    """Whether a writer must run ensure_schema first (readers call this; it never writes)."""
    version = schema_version(conn)
    _check_not_newer(version, path)
    return version < SCHEMA_VERSION or bool(_missing_config_columns(conn))


def ensure_schema(conn: duckdb.DuckDBPyConnection, path: Path | None = None) -> None:
    """Bring the file to SCHEMA_VERSION and add missing config columns. Cheap when nothing is missing."""
    version = schema_version(conn)
    _check_not_newer(version, path)
    pending = [(v, fn) for v, fn in MIGRATIONS if v > version]
    if pending and path is not None and (version > 0 or _table_names(conn)):
        _backup(conn, path, version)
    for v, fn in pending:
        conn.execute("BEGIN TRANSACTION")
        try:
            if "schema_version" not in _table_names(conn):
                conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
            fn(conn)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", [v, _now()])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        log.info("store %s migrated to schema v%d", path, v)
    missing = _missing_config_columns(conn)
    for name, sql_type in missing.items():
        # NOTE: on an existing file, a RunConfig field added since; its old runs get NULL there.
        conn.execute(f'ALTER TABLE runs ADD COLUMN "{name}" {sql_type}')
    if missing and not pending:
        log.info("store %s: added runs columns for new config fields: %s", path, ", ".join(missing))


def _backup(conn: duckdb.DuckDBPyConnection, path: Path, version: int) -> Path:
    """Copy the file before migrating it; an earlier backup of the same version is kept, never overwritten."""
    conn.execute("CHECKPOINT")  # the WAL folded in, so the copy is the whole database
    target = path.with_name(f"{path.name}.bak-v{version}")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.bak-v{version}.{n}")
        n += 1
    shutil.copy2(path, target)
    log.warning("store %s is at schema v%d; backed it up to %s before migrating", path, version, target)
    return target
