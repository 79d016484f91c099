"""The Runs and History pages' store reads: the runs table's search, run counts and saved SQL queries.

Re-exported by engine.explore_queries (so engine.api finds them); each call opens the store read-only
for one query, except delete_saved_query.
"""

from __future__ import annotations

import os

import pandas as pd

from engine.store.connect import connect

__all__ = ["HISTORY_QUERIES", "RUN_TABLE_COLUMNS", "count_runs", "delete_saved_query", "list_saved_queries",
           "search_runs"]

HISTORY_QUERIES = {
    "median epoch time by loader": (
        "SELECT loader, workers, count(*) AS runs, median(epoch_s) AS median_epoch_s,\n"
        "       quantile_cont(epoch_s, 0.1) AS p10, quantile_cont(epoch_s, 0.9) AS p90\n"
        "FROM runs WHERE status = 'done' AND NOT deleted\nGROUP BY ALL ORDER BY median_epoch_s"),
    "data-bound runs": (
        "SELECT run_id, workload, loader, workers, data_wait_share, efficiency, verdict\n"
        "FROM runs WHERE verdict = 'data-bound' AND NOT deleted\nORDER BY data_wait_share DESC"),
    "best config per workload/model": (
        "SELECT workload, model, arg_min(loader, epoch_s) AS loader, arg_min(workers, epoch_s) AS workers,\n"
        "       arg_min(mode, epoch_s) AS mode, min(epoch_s) AS best_epoch_s, arg_min(run_id, epoch_s) AS run_id\n"
        "FROM runs WHERE status = 'done' AND NOT deleted\nGROUP BY workload, model ORDER BY workload, model"),
    "runs per host": (
        "SELECT host, count(*) AS runs, count(*) FILTER (WHERE status = 'done') AS done,\n"
        "       min(created_at) AS first_run, max(created_at) AS last_run\n"
        "FROM runs WHERE NOT deleted\nGROUP BY host ORDER BY runs DESC"),
    "runs per day": (
        "SELECT date_trunc('day', created_at) AS day, count(*) AS runs\n"
        "FROM runs WHERE NOT deleted\nGROUP BY day ORDER BY day"),
}

RUN_TABLE_COLUMNS = ("run_id", "status", "created_at", "workload", "model", "loader", "workers", "prefetch_depth",
                     "batch_size", "mode", "n_models", "device", "epoch_s", "samples_per_s", "data_wait_share",
                     "bound_s", "efficiency", "verdict", "tag", "tags", "notes", "host", "deleted")


def search_runs(text: str = "", *, statuses: list[str] | tuple[str, ...] = (), include_deleted: bool = False,
                limit: int = 500, db: str | os.PathLike | None = None) -> pd.DataFrame:
    """The runs table's rows, newest first: `text` matches (case-insensitively) the id, tags, notes,
    workload, model, loader, tag or host; `statuses` keeps only those statuses."""
    where, params = ["true" if include_deleted else "NOT coalesce(deleted, false)"], []
    if text.strip():
        where.append("concat_ws(' ', run_id, tags, notes, workload, model, loader, tag, host, verdict) ILIKE ?")
        params.append(f"%{text.strip()}%")
    if statuses:
        where.append(f"status IN ({', '.join('?' * len(statuses))})")
        params.extend(statuses)
    cols = ", ".join(f'"{c}"' for c in RUN_TABLE_COLUMNS)
    with connect(db, read_only=True) as conn:
        return conn.execute(f"SELECT {cols} FROM runs WHERE {' AND '.join(where)} "
                            "ORDER BY created_at DESC NULLS LAST, run_id DESC LIMIT ?", [*params, int(limit)]).fetchdf()


def count_runs(db: str | os.PathLike | None = None) -> dict[str, int]:
    """{status: number of runs} for runs not deleted (the sidebar's run count)."""
    with connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT coalesce(status, '?'), count(*) FROM runs WHERE NOT coalesce(deleted, false) "
                            "GROUP BY ALL ORDER BY ALL").fetchall()
    return dict(rows)


def list_saved_queries(db: str | os.PathLike | None = None) -> pd.DataFrame:
    """name, sql, builtin: the built-in queries (this module's and the store's), then the user's, by name.
    Users save theirs with `engine.store.save_query`."""
    with connect(db, read_only=True) as conn:
        stored = conn.execute("SELECT name, sql, builtin FROM saved_queries ORDER BY builtin DESC, name").fetchdf()
    ours = pd.DataFrame({"name": list(HISTORY_QUERIES), "sql": list(HISTORY_QUERIES.values()), "builtin": True})
    out = pd.concat([ours, stored], ignore_index=True).drop_duplicates("name")
    return out.sort_values(["builtin", "name"], ascending=[False, True], ignore_index=True)


def delete_saved_query(name: str, db: str | os.PathLike | None = None) -> bool:
    """Delete a user query; built-ins stay. Returns whether one was deleted."""
    with connect(db, read_only=False) as conn:
        n = conn.execute("DELETE FROM saved_queries WHERE name = ? AND NOT builtin RETURNING name", [name]).fetchall()
    return bool(n)

