"""Reads of runs for the dashboard, the CLI and the advisor: run lists and the runs table's search, one run, its
epochs and steps, counts and chart aggregates. (Explore's grouped medians: engine/store/explore.py.)

Each call opens the store read-only for that one query. Aggregates are computed in DuckDB, not pandas.
Every filter on run columns goes through one builder, `filter_clauses`; deleted runs are left out unless asked.

    df = list_runs(filters={"loader": ["threads", "processes"], "status": "done"})
    df = search_runs("threads", statuses=["done"])          # the Runs page's table
    by = epoch_time_by(["loader", "workers"], filters={"workload": "jpeg"})
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pandas as pd

from engine.paths import Db, db_path
from engine.status import RunStatus
from engine.store._explore_rank import OWN_MODEL
from engine.store.connect import connect

__all__ = [
    "LIVE",
    "RUN_TABLE_COLUMNS",
    "count_runs",
    "done_runs",
    "epoch_time_by",
    "filter_clauses",
    "get_epochs",
    "get_run",
    "get_steps",
    "list_runs",
    "recent_done_runs",
    "search_runs",
    "seconds_per_sample",
    "table_schema",
]

LIVE = "NOT coalesce(deleted, false)"  # the condition that leaves soft-deleted runs out
# The Runs page's table: its columns, in order
RUN_TABLE_COLUMNS = (
    "run_id",
    "status",
    "source",
    "created_at",
    "workload",
    "model",
    "loader",
    "workers",
    "prefetch_depth",
    "batch_size",
    "mode",
    "n_models",
    "device",
    "epoch_s",
    "samples_per_s",
    "data_wait_share",
    "bound_s",
    "efficiency",
    "verdict",
    "tag",
    "tags",
    "notes",
    "host",
    "deleted",
)


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    assert table.isidentifier(), table  # our own table names only
    return [r[0] for r in conn.execute(f"SELECT name FROM pragma_table_info('{table}') ORDER BY cid").fetchall()]


def _check_columns(names: list[str], known: list[str], what: str) -> None:
    for name in names:
        if name not in known:
            raise ValueError(f"cannot {what} '{name}': it is not a runs column; choose from: {', '.join(known)}")


def filter_clauses(filters: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """{column: value | [values] | None} -> SQL conditions and parameters. The names must be runs columns
    (checked by the caller: _filter_sql below, or a fixed set of names)."""
    clauses, params = [], []
    for col, value in filters.items():
        if value is None:
            clauses.append(f'"{col}" IS NULL')
        elif isinstance(value, (list, tuple, set)):
            values = list(value)
            clauses.append(f'"{col}" IN ({", ".join("?" * len(values))})' if values else "false")
            params.extend(values)
        else:
            clauses.append(f'"{col}" = ?')
            params.append(value)
    return clauses, params


def _filter_sql(
    conn: duckdb.DuckDBPyConnection, filters: dict[str, Any] | None, include_deleted: bool = False
) -> tuple[list[str], list[Any]]:
    """filter_clauses with the names checked against the runs table, and LIVE unless include_deleted."""
    filters = filters or {}
    if filters:
        _check_columns(list(filters), _columns(conn, "runs"), "filter on")
    clauses, params = filter_clauses(filters)
    return clauses + ([] if include_deleted else [LIVE]), params


def list_runs(
    db: Db = None, *, limit: int = 200, include_deleted: bool = False, filters: dict[str, Any] | None = None
) -> pd.DataFrame:
    """Runs, newest first. `filters`: {column: value, or a list of values, or None for IS NULL}."""
    with connect(db, read_only=True) as conn:
        clauses, params = _filter_sql(conn, filters, include_deleted)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT * FROM runs {where} ORDER BY created_at DESC NULLS LAST, run_id DESC LIMIT ?"
        return conn.execute(sql, [*params, int(limit)]).df()


def search_runs(
    text: str = "",
    *,
    statuses: list[str] | tuple[str, ...] = (),
    include_deleted: bool = False,
    limit: int = 500,
    db: Db = None,
) -> pd.DataFrame:
    """The Runs page's table, newest first: `text` matches (case-insensitively) the id, tags, notes,
    workload, model, loader, tag, host or verdict; `statuses` keeps only those statuses."""
    cols = ", ".join(f'"{c}"' for c in RUN_TABLE_COLUMNS)
    with connect(db, read_only=True) as conn:
        where, params = _filter_sql(conn, {"status": list(statuses)} if statuses else None, include_deleted)
        if text.strip():
            where.append(
                "concat_ws(' ', run_id, tags, notes, workload, model, loader, tag, host, verdict, source) ILIKE ?"
            )
            params.append(f"%{text.strip()}%")
        return conn.execute(
            f"SELECT {cols} FROM runs WHERE {' AND '.join(where or ['true'])} "
            "ORDER BY created_at DESC NULLS LAST, run_id DESC LIMIT ?",
            [*params, int(limit)],
        ).fetchdf()


def count_runs(db: Db = None) -> dict[str, int]:
    """{status: number of runs} for runs not deleted (the sidebar's run count)."""
    with connect(db, read_only=True) as conn:
        rows = conn.execute(
            f"SELECT coalesce(status, '?'), count(*) FROM runs WHERE {LIVE} GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    return dict(rows)


def done_runs(workload: str, model: str, db: Db = None) -> pd.DataFrame:
    """Every done, not deleted run of a workload and model, all columns: what the advisor ranks. OWN_MODEL, the name
    Explore gives an observed run's model (the user's own, which the lab never built), reads as the stored NULL."""
    with connect(db, read_only=True) as conn:
        where, params = _filter_sql(
            conn, {"status": RunStatus.DONE, "workload": workload, "model": None if model == OWN_MODEL else model}
        )
        return conn.execute(f"SELECT * FROM runs WHERE {' AND '.join(where)}", params).df()


def recent_done_runs(modes: tuple[str, ...] | list[str], db: Db = None, limit: int = 2000) -> pd.DataFrame:
    """The newest `limit` done, not deleted runs in one of `modes`, all columns, newest first: the earlier runs the
    predictor learns from (engine/predict/learned.py). A store that does not exist yet has none."""
    if not db_path(db).exists():
        return pd.DataFrame()
    return list_runs(db=db, limit=limit, filters={"status": RunStatus.DONE, "mode": list(modes)})


def get_run(run_id: str, db: Db = None) -> dict[str, Any] | None:
    """The runs row as a dict, plus `config` (the RunConfig dict) and `summary` (the summary event); None if unknown."""
    with connect(db, read_only=True) as conn:
        cur = conn.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
        rows = cur.fetchall()  # NOTE: fetchall, not fetchone: DuckDB 2 keeps an unfinished result open
        row = rows[0] if rows else None
        names = [d[0] for d in cur.description]
    if row is None:
        return None
    out = dict(zip(names, row))
    out["config"] = json.loads(out["config_json"]) if out.get("config_json") else {}
    out["summary"] = json.loads(out["summary_json"]) if out.get("summary_json") else {}
    return out


def get_epochs(run_id: str, db: Db = None) -> pd.DataFrame:
    with connect(db, read_only=True) as conn:
        return conn.execute("SELECT * FROM epochs WHERE run_id = ? ORDER BY epoch, model_idx, rank", [run_id]).df()


def get_steps(run_id: str, epoch: int | None = None, db: Db = None) -> pd.DataFrame:
    sql = "SELECT * FROM steps WHERE run_id = ?" + (" AND epoch = ?" if epoch is not None else "")
    with connect(db, read_only=True) as conn:
        return conn.execute(
            sql + " ORDER BY epoch, model_idx, rank, step", [run_id] + ([int(epoch)] if epoch is not None else [])
        ).df()


def epoch_time_by(group_cols: list[str], db: Db = None, filters: dict[str, Any] | None = None) -> pd.DataFrame:
    """Per group of runs (done, not deleted): the spread of their steady-state epoch times, for charts.

    One measurement per run (its median epoch), so repeats of a config give the distribution:
    n_runs, epoch_s_median, _q25, _q75, _min, _max, _mean, _std, _cv (std/mean; > 0.1 is noisy),
    samples_per_s_median, efficiency_median, data_wait_share_median. Sorted fastest first.
    """
    group_cols = list(group_cols)
    with connect(db, read_only=True) as conn:
        _check_columns(group_cols, _columns(conn, "runs"), "group by")
        clauses, params = _filter_sql(conn, filters)
        where = " AND ".join(["status = 'done'", "epoch_s IS NOT NULL", *clauses])
        keys = ", ".join(f'"{c}"' for c in group_cols)
        sql = (
            f"SELECT {keys + ', ' if keys else ''}count(*) AS n_runs, median(epoch_s) AS epoch_s_median, "
            "quantile_cont(epoch_s, 0.25) AS epoch_s_q25, quantile_cont(epoch_s, 0.75) AS epoch_s_q75, "
            "min(epoch_s) AS epoch_s_min, max(epoch_s) AS epoch_s_max, avg(epoch_s) AS epoch_s_mean, "
            "stddev_samp(epoch_s) AS epoch_s_std, stddev_samp(epoch_s) / nullif(avg(epoch_s), 0) AS epoch_s_cv, "
            "median(samples_per_s) AS samples_per_s_median, median(efficiency) AS efficiency_median, "
            "median(data_wait_share) AS data_wait_share_median "
            f"FROM runs WHERE {where} {'GROUP BY ' + keys if keys else ''} ORDER BY epoch_s_median"
        )
        return conn.execute(sql, params).df()


def table_schema(db: Db = None) -> dict[str, list[tuple[str, str]]]:
    """{table: [(column, SQL type), ...]} for the SQL page's schema browser."""
    with connect(db, read_only=True) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT internal ORDER BY table_name, column_index"
        ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, typ in rows:
        out.setdefault(table, []).append((column, typ))
    return out


def seconds_per_sample(db: Db = None) -> dict[tuple[str, str], float]:
    """(workload, model) -> the median epoch_s / n_samples of its finished runs: what a new run's epochs cost."""
    with connect(db, read_only=True) as conn:
        return {
            (w, m): s
            for w, m, s in conn.execute(
                f"SELECT workload, model, median(epoch_s / n_samples) FROM runs WHERE status = 'done' AND {LIVE} "
                "AND epoch_s > 0 AND n_samples > 0 GROUP BY ALL"
            ).fetchall()
        }
