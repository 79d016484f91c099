"""Pooling results from other hosts: `python -m engine import OTHER.duckdb | BUNDLE_DIR | FILE.parquet ...`.

Runs are deduplicated by run_id: a run already in this store stays as it is (tags and notes included).
Host columns and host_fingerprint come along, so Explore can compare hosts. Sources:
- a LoaderLab DuckDB store, attached read-only (never modified, never upgraded);
- a Parquet bundle, the folder export_bundle() writes (runs/epochs/steps/samples/calibrations/tunes.parquet),
  or those files named one by one (also as `python -m engine export --table T` names them: loaderlab-T.parquet);
- a lone runs Parquet file (`python -m engine export`): the runs table only, no epochs or steps;
- a RunLog folder (`<store dir>/runs/<run_id>`) that names this store or none: a RunLog written before RunLogs
  named their store is stored by pending ingest only into `loaderlab.duckdb` beside it, so a store of another
  name takes it this way, and it is this store's from then on. Each RunLog is ingested on its own.
Script tunes' answers (the tunes table; their trials are runs, above) come along by tune_id: a tune already here
stays as it is. Columns the source lacks (an older schema) are NULL; columns this store lacks are ignored. The whole
import is one transaction, so it lands whole or not at all, and importing twice adds nothing.

    python -m engine import ../colleague/loaderlab.duckdb
    python -m engine export-bundle shared/gpu-box/ && python -m engine import shared/gpu-box/
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from engine.paths import Db, db_path
from engine.runlog import claim, first_event
from engine.store import version
from engine.store._lock import SidecarLock
from engine.store.connect import connect
from engine.store.edits import export
from engine.store.ingest import ingest_run
from engine.store.pending import check_owner

__all__ = ["CARRIED", "RUN_TABLES", "ImportResult", "export_bundle", "import_results"]

log = logging.getLogger(__name__)

RUN_TABLES = ("runs", "epochs", "steps", "samples", "calibrations")
CARRIED = (*RUN_TABLES, "tunes")  # what a bundle holds and an import merges: the run tables and tunes' answers
_HOST_LOCAL = {"run_dir", "ingested_bytes"}  # paths and offsets on the other host mean nothing here


@dataclass
class ImportResult:
    sources: list[str]
    runs_added: int = 0
    runs_present: int = 0  # in the source and already here: skipped
    rows: dict[str, int] = field(default_factory=dict)  # rows added per table


def export_bundle(out_dir: str | os.PathLike, db: Db = None) -> Path:
    """Write every run table (deleted runs left out) and the tunes' answers as <table>.parquet into out_dir, for
    `import` elsewhere."""
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    for table in CARRIED:
        export(out / f"{table}.parquet", "parquet", db=db, table=table)
    return out


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _table_of(path: Path) -> str:
    stem = path.name.removesuffix(".parquet").removeprefix("loaderlab-")
    return stem if stem in CARRIED else "runs"


def _kind(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(12)
    if head[:4] == b"PAR1":
        return "parquet"
    if head[8:12] == b"DUCK":
        return "duckdb"
    raise ValueError(
        f"{path} is neither a DuckDB store nor a Parquet file; pass a LoaderLab .duckdb file, "
        "a folder written by export-bundle, or .parquet files"
    )


def _plan(paths: list[Path], store: Path) -> tuple[list[Path], list[dict[str, Path]]]:
    """DuckDB files to attach, and Parquet groups (table -> file): each folder one group, loose files another."""
    stores: list[Path] = []
    groups: list[dict[str, Path]] = []
    loose: dict[str, Path] = {}
    for p in paths:
        if p.is_dir():
            named = {f.stem.removeprefix("loaderlab-"): f for f in sorted(p.glob("*.parquet"))}
            group = {t: f for t, f in named.items() if t in CARRIED}
            if "runs" not in group:
                raise ValueError(f"{p} has no runs.parquet; export a bundle with `python -m engine export-bundle DIR`")
            groups.append(group)
        elif not p.is_file():
            raise ValueError(f"{p} does not exist")
        elif _kind(p) == "duckdb":
            if p == store:
                raise ValueError(f"{p} is this store itself; import another host's file")
            stores.append(p)
        elif (table := _table_of(p)) in loose:
            raise ValueError(f"{loose[table]} and {p} both hold the {table} table; import them one at a time")
        else:
            loose[table] = p
    if loose and "runs" not in loose:
        raise ValueError(f"{', '.join(map(str, loose.values()))}: no runs table among them; add the runs export")
    return stores, groups + ([loose] if loose else [])


def import_results(paths: str | os.PathLike | list, *, db: Db = None) -> ImportResult:
    """Merge runs from other stores or Parquet exports into this one (see the module docstring)."""
    items = [Path(p).expanduser().resolve() for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    runlogs = [p for p in items if (p / "events.jsonl").is_file()]
    for run_dir in runlogs:
        _check_runlog(run_dir, db)
    stores, groups = _plan([p for p in items if p not in runlogs], db_path(db))
    result = ImportResult([str(p) for p in items])
    if stores or groups:
        _merge_all(stores, groups, result, db)
    if runlogs:
        _ingest_runlogs(runlogs, result, db)
    log.info("imported %d runs (%d already here) from %s", result.runs_added, result.runs_present, result.sources)
    return result


def _check_runlog(run_dir: Path, db: Db) -> None:
    """Before anything is imported: the RunLog has its start event, and names this store or none."""
    check_owner(run_dir, db)
    start = first_event(run_dir / "events.jsonl")
    if not start or start.get("type") != "start":
        raise ValueError(f"the RunLog {run_dir} has no start event; nothing to import from it")


def _ingest_runlogs(runlogs: list[Path], result: ImportResult, db: Db) -> None:
    """Each RunLog on its own (ingest is idempotent), claimed for this store once stored."""
    with connect(db, read_only=True) as conn:
        have = {r[0] for r in conn.execute("SELECT run_id FROM runs").fetchall()}
    for run_dir in runlogs:
        run_id = ingest_run(run_dir, db=db)
        claim(run_dir, db_path(db))  # NOTE: after the ingest: from now on no other store takes it
        if run_id in have:
            result.runs_present += 1
        else:
            result.runs_added += 1
            have.add(run_id)


def _merge_all(stores: list[Path], groups: list[dict[str, Path]], result: ImportResult, db: Db) -> None:
    """Every store and Parquet group in one transaction: it lands whole or not at all."""
    with connect(db, read_only=False) as conn, ExitStack() as stack:  # sources detach before the store closes
        relations = [{t: f"read_parquet({_lit(f)})" for t, f in g.items()} for g in groups]
        for i, src in enumerate(stores):
            relations.append(_attach(conn, stack, src, f"import_src{i}"))
        conn.execute("BEGIN TRANSACTION")
        try:
            for rels in relations:
                _merge(conn, rels, result)
            conn.execute("COMMIT")
        except duckdb.Error as e:
            conn.execute("ROLLBACK")
            raise ValueError(f"could not import {', '.join(result.sources)}: {e}; nothing was imported") from None
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    version.bump(db)  # the dashboard's cached charts are keyed on it: imported runs show at once


def _attach(conn: duckdb.DuckDBPyConnection, stack: ExitStack, src: Path, alias: str) -> dict[str, str]:
    """Attach another store read-only; while a LoaderLab writer on this host holds it, wait via its lock."""
    if src.with_name(src.name + ".lock").exists():
        stack.enter_context(SidecarLock(src, exclusive=False, deadline=time.monotonic() + 30.0))
    try:
        conn.execute(f"ATTACH {_lit(src)} AS {alias} (READ_ONLY)")
    except duckdb.Error as e:
        raise ValueError(
            f"could not open {src} read-only ({e}); close the program that has it open, or copy the "
            "file and import the copy"
        ) from None
    stack.callback(conn.execute, f"DETACH {alias}")
    tables = {
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main'", [alias]
        ).fetchall()
    }
    if "runs" not in tables:
        raise ValueError(f"{src} has no runs table; is it a LoaderLab store?")
    return {t: f"{alias}.main.{t}" for t in CARRIED if t in tables}


def _columns(conn: duckdb.DuckDBPyConnection, relation: str) -> list[str]:
    return [d[0] for d in conn.execute(f"SELECT * FROM {relation} LIMIT 0").description]


def _or_ignore(conn: duckdb.DuckDBPyConnection, table: str) -> str:
    """OR IGNORE drops rows repeated within the source, but DuckDB allows it only on a keyed table."""
    keyed = conn.execute(
        "SELECT count(*) FROM duckdb_constraints() WHERE database_name = current_database() "
        "AND table_name = ? AND constraint_type = 'PRIMARY KEY'",
        [table],
    ).fetchall()[0][0]
    return "OR IGNORE" if keyed else ""


def _merge(conn: duckdb.DuckDBPyConnection, rels: dict[str, str], result: ImportResult) -> None:
    """Runs first (new run_ids only), then the rows of each run table for runs that have none of them here, then
    tunes whose tune_id is not here."""
    for table in CARRIED:
        if table not in rels:
            continue
        have, src = _columns(conn, table), _columns(conn, rels[table])
        key = "tune_id" if table == "tunes" else "run_id"
        if key not in src:
            raise ValueError(f"{rels[table]} has no {key} column; is it a LoaderLab {table} export?")
        cols = ", ".join(_q(c) for c in have if c in src and c not in _HOST_LOCAL)
        before = conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        if table == "tunes":  # keyed by tune_id: a tune already here keeps its own answer
            conn.execute(f"INSERT OR IGNORE INTO tunes ({cols}) SELECT {cols} FROM {rels[table]}")
        elif table == "runs":
            live = "WHERE NOT coalesce(deleted, false)" if "deleted" in src else ""
            conn.execute(f"INSERT OR IGNORE INTO runs ({cols}) SELECT {cols} FROM {rels[table]} {live}")
            offered = conn.execute(f"SELECT count(DISTINCT run_id) FROM {rels[table]} {live}").fetchall()[0][0]
        else:  # NOTE: the NOT IN subquery sees the table before this insert, so one run's rows come whole
            conn.execute(
                f"INSERT {_or_ignore(conn, table)} INTO {table} ({cols}) SELECT {cols} FROM {rels[table]} s "
                "WHERE s.run_id IN (SELECT run_id FROM runs) "
                f"AND s.run_id NOT IN (SELECT run_id FROM {table})"
            )
        added = conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] - before
        result.rows[table] = result.rows.get(table, 0) + added
        if table == "runs":
            result.runs_added += added
            result.runs_present += offered - added
