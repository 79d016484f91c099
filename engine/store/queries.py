"""Reads of the store for the dashboard and the CLI: run lists, one run, its epochs and steps, chart aggregates.

Each call opens the store read-only for that one query. Aggregates are computed in DuckDB, not pandas.

    df = list_runs(filters={"loader": ["threads", "processes"], "status": "done"})
    by = epoch_time_by(["loader", "workers"], filters={"workload": "jpeg"})
"""

from __future__ import annotations

import json
import os
from typing import Any

import duckdb
import pandas as pd

from engine.store.connect import connect

__all__ = ["epoch_time_by", "get_epochs", "get_run", "get_steps", "list_runs", "seconds_per_sample", "table_schema"]

Db = str | os.PathLike | None


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    assert table.isidentifier(), table  # our own table names only
    return [r[0] for r in conn.execute(f"SELECT name FROM pragma_table_info('{table}') ORDER BY cid").fetchall()]


def _check_columns(names: list[str], known: list[str], what: str) -> None:
    for name in names:
        if name not in known:
            raise ValueError(f"cannot {what} '{name}': it is not a runs column; choose from: {', '.join(known)}")


def _filter_sql(conn: duckdb.DuckDBPyConnection, filters: dict[str, Any] | None) -> tuple[list[str], list[Any]]:
    """{column: value | [values] | None} -> SQL conditions and parameters. Columns are checked by name."""
    filters = filters or {}
    if filters:
        _check_columns(list(filters), _columns(conn, "runs"), "filter on")
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


def list_runs(db: Db = None, *, limit: int = 200, include_deleted: bool = False,
              filters: dict[str, Any] | None = None) -> pd.DataFrame:
    """Runs, newest first. `filters`: {column: value, or a list of values, or None for IS NULL}."""
    with connect(db, read_only=True) as conn:
        clauses, params = _filter_sql(conn, filters)
        if not include_deleted:
            clauses.append("NOT deleted")
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT * FROM runs {where} ORDER BY created_at DESC NULLS LAST, run_id DESC LIMIT ?"
        return conn.execute(sql, [*params, int(limit)]).df()


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
        return conn.execute("SELECT * FROM epochs WHERE run_id = ? ORDER BY epoch, model_idx, rank",
                            [run_id]).df()


def get_steps(run_id: str, epoch: int | None = None, db: Db = None) -> pd.DataFrame:
    sql = "SELECT * FROM steps WHERE run_id = ?" + (" AND epoch = ?" if epoch is not None else "")
    with connect(db, read_only=True) as conn:
        return conn.execute(sql + " ORDER BY epoch, model_idx, rank, step",
                            [run_id] + ([int(epoch)] if epoch is not None else [])).df()


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
        where = " AND ".join(["status = 'done'", "NOT deleted", "epoch_s IS NOT NULL", *clauses])
        keys = ", ".join(f'"{c}"' for c in group_cols)
        sql = (f"SELECT {keys + ', ' if keys else ''}count(*) AS n_runs, median(epoch_s) AS epoch_s_median, "
               "quantile_cont(epoch_s, 0.25) AS epoch_s_q25, quantile_cont(epoch_s, 0.75) AS epoch_s_q75, "
               "min(epoch_s) AS epoch_s_min, max(epoch_s) AS epoch_s_max, avg(epoch_s) AS epoch_s_mean, "
               "stddev_samp(epoch_s) AS epoch_s_std, stddev_samp(epoch_s) / nullif(avg(epoch_s), 0) AS epoch_s_cv, "
               "median(samples_per_s) AS samples_per_s_median, median(efficiency) AS efficiency_median, "
               "median(data_wait_share) AS data_wait_share_median "
               f"FROM runs WHERE {where} {'GROUP BY ' + keys if keys else ''} ORDER BY epoch_s_median")
        return conn.execute(sql, params).df()


def table_schema(db: Db = None) -> dict[str, list[tuple[str, str]]]:
    """{table: [(column, SQL type), ...]} for the SQL page's schema browser."""
    with connect(db, read_only=True) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT internal ORDER BY table_name, column_index").fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, typ in rows:
        out.setdefault(table, []).append((column, typ))
    return out


def seconds_per_sample(db: Db = None) -> dict[tuple[str, str], float]:
    """(workload, model) -> the median epoch_s / n_samples of its finished runs: what a new run's epochs cost."""
    with connect(db, read_only=True) as conn:
        return {(w, m): s for w, m, s in conn.execute(
            "SELECT workload, model, median(epoch_s / n_samples) FROM runs WHERE status = 'done' AND NOT "
            "coalesce(deleted, false) AND epoch_s > 0 AND n_samples > 0 GROUP BY ALL").fetchall()}
