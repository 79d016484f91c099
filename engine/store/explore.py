"""The Explore page's reads, aggregated in DuckDB: grouped medians with error bars, and the filters' choices.
Nothing here ships raw rows to pandas; results are one row per group. (The interval and pooling SQL:
engine/store/_explore_sql.py.)

    df = explore_summary("loader", metric="epoch_s", color="workers", filters={"workload": ["tensor"]})

Filters (all optional): workload, model, host, tag (lists of values), date_from, date_to (ISO dates,
inclusive). Only finished (status 'done'), not deleted runs are charted.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd

from engine.analysis.stats import NOISY_CV
from engine.config import config_fields
from engine.paths import Db
from engine.store._explore_rank import rank_configs
from engine.store._explore_sql import ci_ranks, config_columns, pool_sql
from engine.store.connect import connect
from engine.store.queries import LIVE, filter_clauses

__all__ = [
    "EXPLORE_FILTERS",
    "EXPLORE_METRICS",
    "demo_summary",
    "explore_axes",
    "explore_filter_options",
    "explore_predictions",
    "explore_ranking",
    "explore_summary",
    "filter_sql",
]

# run columns a chart can show; the GPU ones are NULL for CPU runs, which then drop out of that chart
EXPLORE_METRICS = (
    "epoch_s",
    "samples_per_s",
    "data_wait_share",
    "gpu_idle_share",
    "gpu_idle_data_share",
    "gpu_idle_copy_share",
    "gpu_idle_other_share",
    "mean_gpu_util",
    "startup_s",
)
EXPLORE_FILTERS = ("workload", "model", "host", "tag")
# per run beside its predicted and measured epochs: what the prediction's hover names (engine/predict/model.py's knobs)
_PREDICTED_SETTING = ("workload", "model", "loader", "workers", "prefetch_depth", "threads", "batch_size")
_EXTRA_AXES = ("host", "gpu_name", "sweep_id")


def explore_axes() -> list[str]:
    """Fields a chart can use as x, colour or facet: every scalar RunConfig field, then host columns."""
    scalar = [f.name for f in config_fields() if "list" not in str(f.type)]
    return scalar + [c for c in _EXTRA_AXES if c not in scalar]


def _q(col: str) -> str:
    if col not in explore_axes():
        raise ValueError(f"'{col}' is not a run setting; choose one of: {', '.join(explore_axes())}")
    return f'"{col}"'


def filter_sql(filters: dict[str, Any] | None) -> tuple[str, list[Any]]:
    """A WHERE clause (finished, not deleted runs) and its parameters. Unknown filter keys raise ValueError."""
    where: list[str] = ["status = 'done'", LIVE]
    params: list[Any] = []
    for key, value in (filters or {}).items():
        if value in (None, "", [], ()):
            continue
        if key in EXPLORE_FILTERS:
            values = [str(v) for v in ([value] if isinstance(value, str) else value)]
            if key == "tag":  # the config's tag or any of the tags a user gave the run later
                marks = ", ".join("?" * len(values))
                where.append(f"(tag IN ({marks}) OR list_has_any(string_split(coalesce(tags, ''), ','), [{marks}]))")
                params.extend(values * 2)
            else:
                clauses, values = filter_clauses({key: values})  # '"workload" IN (?, ...)'
                where += clauses
                params.extend(values)
        elif key in ("date_from", "date_to"):
            day = dt.date.fromisoformat(str(value))  # ValueError names the bad date
            where.append("created_at >= ?" if key == "date_from" else "created_at < ?")
            params.append(day if key == "date_from" else day + dt.timedelta(days=1))
        else:
            raise ValueError(f"unknown filter '{key}'; use: {', '.join((*EXPLORE_FILTERS, 'date_from', 'date_to'))}")
    return " AND ".join(where), params


def explore_summary(
    x: str,
    *,
    metric: str = "epoch_s",
    color: str | None = None,
    facet: str | None = None,
    filters: dict[str, Any] | None = None,
    interval: str = "ci",
    max_ids: int = 50,
    db: Db = None,
) -> pd.DataFrame:
    """One row per (x, colour, facet) group: n, median, lo, hi of `metric`, medians of bound_s, efficiency and
    predicted_epoch_s, the commonest verdict and predicted_from, the coefficient of variation and its `noisy` flag
    (CV > 10 %),
    how many hosts and torch versions the group mixes, how many distinct configs it pools (`n_configs`)
    and which fields differ among them (`differs`), and up to `max_ids` run ids (newest first).

    interval "ci": the exact 95% CI of the median from binomial order statistics (distribution-free);
    "quantiles": the 2.5% and 97.5% quantiles of the runs. Either needs n >= 6: smaller groups get
    lo = hi = NULL and `interval_note` "no interval: n runs" (never their min..max).
    """
    if metric not in EXPLORE_METRICS:
        raise ValueError(f"metric '{metric}' is unknown; choose one of: {', '.join(EXPLORE_METRICS)}")
    if interval not in ("ci", "quantiles"):
        raise ValueError("interval must be 'ci' or 'quantiles'")
    groups = list(dict.fromkeys(c for c in (x, color, facet) if c))
    # NOTE: a run of the user's own loop (source 'observed') never pools with the lab's runs of the same settings:
    # the loops differ. Every summary is split by source ('lab' for NULL), and says which each point is.
    by_source = [] if "source" in groups else ["coalesce(source, 'lab')"]
    keys = ", ".join([*(_q(c) for c in groups), *by_source])
    cols = ", ".join([*(_q(c) for c in groups), *(f"{e} AS source" for e in by_source)])
    names = ", ".join([*(_q(c) for c in groups), *(['"source"'] if by_source else [])])
    where, params = filter_sql(filters)
    lo, hi = ("vs[r.lo]", "vs[r.hi]") if interval == "ci" else ("q_lo", "q_hi")
    pool_inner, pool_outer = pool_sql(groups)
    sql = f"""
        WITH g AS (
            SELECT {cols}, count(*) AS n, median("{metric}") AS median,
                   list_sort(list("{metric}")) AS vs,
                   quantile_cont("{metric}", 0.025) AS q_lo, quantile_cont("{metric}", 0.975) AS q_hi,
                   median(bound_s) AS bound_s, median(efficiency) AS efficiency, mode(verdict) AS verdict,
                   median(predicted_epoch_s) AS predicted_epoch_s, mode(predicted_from) AS predicted_from,
                   stddev_samp("{metric}") / nullif(avg("{metric}"), 0) AS cv,
                   count(DISTINCT host_fingerprint) AS n_hosts, count(DISTINCT torch_version) AS n_torch,
                   {pool_inner},
                   list(run_id ORDER BY created_at DESC) AS ids
            FROM runs WHERE {where} AND "{metric}" IS NOT NULL
            GROUP BY {keys})
        SELECT {names}, g.n, median,
               CASE WHEN r.lo IS NOT NULL THEN {lo} END AS lo, CASE WHEN r.lo IS NOT NULL THEN {hi} END AS hi,
               CASE WHEN r.lo IS NULL THEN 'no interval: ' || g.n || (CASE WHEN g.n = 1 THEN ' run' ELSE ' runs' END)
                    END AS interval_note,
               bound_s, efficiency, verdict, predicted_epoch_s, predicted_from, cv,
               coalesce(cv > {NOISY_CV}, false) AS noisy, n_hosts, n_torch,
               {pool_outer},
               array_to_string(ids[1:{int(max_ids)}], ',') AS run_ids
        FROM g LEFT JOIN _ci_ranks r ON r.n = g.n ORDER BY {names}"""
    with connect(db, read_only=True) as conn:
        sizes = conn.execute(
            f'SELECT DISTINCT count(*) FROM runs WHERE {where} AND "{metric}" IS NOT NULL GROUP BY {keys}', params
        ).fetchall()
        ranks = [(n, *r) for (n,) in sizes if (r := ci_ranks(n))]
        conn.register("_ci_ranks", pd.DataFrame(ranks or None, columns=["n", "lo", "hi"]).astype("int64"))
        try:
            return conn.execute(sql, params).fetchdf()
        finally:
            conn.unregister("_ci_ranks")


def explore_predictions(filters: dict[str, Any] | None = None, limit: int = 5000, db: Db = None) -> pd.DataFrame:
    """Finished runs that were predicted (engine/predict/model.py), newest first: run_id, the measured median steady
    epoch (epoch_s), predicted_epoch_s, predicted_from ('prior': held out; 'own': fitted on the run's own probe),
    predicted_limit and the setting's fields; the Explore page's filters apply."""
    where, params = filter_sql(filters)
    cols = ", ".join(f'"{c}"' for c in _PREDICTED_SETTING)
    with connect(db, read_only=True) as conn:
        return conn.execute(
            f"SELECT run_id, epoch_s, predicted_epoch_s, predicted_from, predicted_limit, {cols} "
            f"FROM runs WHERE {where} AND predicted_epoch_s IS NOT NULL AND epoch_s IS NOT NULL "
            f"ORDER BY created_at DESC LIMIT {int(limit)}",
            params,
        ).fetchdf()


def explore_ranking(filters: dict[str, Any] | None = None, reference: str | None = None, db: Db = None) -> pd.DataFrame:
    """The configs in view ranked by median epoch time per pipeline, with speedups over sync (or over the
    config labelled `reference`) and their intervals: engine/store/_explore_rank.py's rank_configs."""
    where, params = filter_sql(filters)
    cols = ", ".join(
        f'"{c}"'
        for c in dict.fromkeys(["workload", "model", *config_columns(), "host_fingerprint", "code_hash", "source"])
    )
    with connect(db, read_only=True) as conn:
        runs = conn.execute(
            f"SELECT run_id, created_at, epoch_s, {cols} FROM runs WHERE {where} AND epoch_s IS NOT NULL", params
        ).fetchdf()
    return rank_configs(runs, reference)


def demo_summary(db: Db = None) -> dict[str, Any] | None:
    """What the stored demo runs (tag 'demo') measured, and where: workload, model, n_samples, loaders, runs,
    host, cpu_model, cores, gpu_name and first (its first run's time), done (finished), waiting (its jobs still queued
    or running: the runs its answer still lacks) and queued (every job waiting, the demo's or not); None when the
    store holds no demo run and no demo job."""
    with connect(db, read_only=True) as conn:
        cur = conn.execute(f"""
            SELECT any_value(workload), any_value(model), any_value(n_samples),
                   list(DISTINCT loader ORDER BY loader), count(*), any_value(host), any_value(cpu_model),
                   any_value(cores), any_value(gpu_name), min(created_at),
                   count(*) FILTER (WHERE status = 'done'), count(DISTINCT workload || '/' || model)
            FROM runs WHERE {LIVE} AND tag = 'demo'""")
        row = cur.fetchall()[0]
        # NOTE: a job's run row appears when it starts: the queued ones are only in the jobs table
        waiting, queued = conn.execute(
            "SELECT count(*) FILTER (WHERE json_extract_string(config_json, '$.tag') = 'demo'), count(*) "
            "FROM jobs WHERE status IN ('queued', 'running') AND (run_id IS NULL OR run_id NOT IN "
            "(SELECT run_id FROM runs WHERE status NOT IN ('queued', 'running')))"
        ).fetchall()[0]
    if not row[4] and not waiting:
        return None
    keys = (
        "workload",
        "model",
        "n_samples",
        "loaders",
        "runs",
        "host",
        "cpu_model",
        "cores",
        "gpu_name",
        "first",
        "done",
        "pipelines",
    )
    return {**dict(zip(keys, row)), "waiting": int(waiting), "queued": int(queued)}


def explore_filter_options(db: Db = None) -> dict[str, Any]:
    """Distinct values of each filter column among charted runs, the first and last run date, the [workload, model]
    Explore opens on (`latest_pipeline`: the newest with two settings or more to compare, else the most-measured)
    and how many pipelines there are (`n_pipelines`)."""
    where, _ = filter_sql(None)
    parts = ", ".join(
        f'list(DISTINCT "{c}" ORDER BY "{c}") FILTER (WHERE "{c}" IS NOT NULL AND "{c}" <> \'\')'
        for c in EXPLORE_FILTERS[:-1]
    )
    tags = (
        "list_sort(list_distinct(list_filter(flatten(list(string_split(coalesce(tags, ''), ','))) || list(tag), "
        "lambda t: t IS NOT NULL AND t <> '')))"
    )
    # NOTE: Explore opens on the newest pipeline with settings to compare (two or more), else the most-measured:
    # one run of a new pipeline from the form is not yet an answer, and must not replace the demo's
    setting = ", ".join(f'"{c}"' for c in ("loader", "workers", "prefetch_depth", "threads", "batch_size"))
    opening = (
        f"(SELECT [workload, model] FROM runs WHERE {where} AND model IS NOT NULL GROUP BY workload, model "
        f"ORDER BY count(DISTINCT hash({setting})) >= 2 DESC, "
        f"CASE WHEN count(DISTINCT hash({setting})) >= 2 THEN max(created_at) END DESC NULLS LAST, "
        "count(*) DESC, max(created_at) DESC LIMIT 1)"
    )
    with connect(db, read_only=True) as conn:
        row = conn.execute(
            f"SELECT {parts}, {tags}, min(created_at)::DATE, max(created_at)::DATE, count(*), "
            f"{opening}, count(DISTINCT [workload, model]) "
            f"FROM runs WHERE {where}"
        ).fetchall()[0]
    out: dict[str, Any] = {c: list(v or []) for c, v in zip(EXPLORE_FILTERS, row)}
    out.update(
        first_date=row[-5], last_date=row[-4], n_runs=row[-3], latest_pipeline=list(row[-2] or []), n_pipelines=row[-1]
    )
    return out
