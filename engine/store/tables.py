"""The store's tables as DDL text: the fixed `runs` columns, the other tables, and the History page's built-in
queries.

The `runs` table also gets one column per RunConfig field; schema.py adds those from the config schema.
"""

from __future__ import annotations

import re

from engine.runlog import GPU_EPOCH_FIELDS

__all__ = [
    "BUILTIN_QUERIES",
    "EPOCH_COLUMNS_V4",
    "RUN_COLUMNS",
    "STORED_BUILTINS",
    "SUMMARY_COLUMNS",
    "SUMMARY_COLUMNS_V2",
    "SUMMARY_COLUMNS_V4",
    "SUMMARY_COLUMNS_V5",
    "SUMMARY_COLUMNS_V6",
    "TABLES",
    "TUNE_COLUMNS",
    "column_types",
]

# Run-level columns schema v4 added: GPU idle and its parts (engine/measure/idle.py) over steady epochs with NVML's
# utilisation and peak device memory beside them, NULL on CPU; where the start-up went (the RunLog's `startup`
# event) and how long the bound's passes took; the bound's CPU side
_SUMMARY_V4 = {
    "gpu_idle_s": "DOUBLE",
    "gpu_idle_share": "DOUBLE",
    "gpu_idle_data_share": "DOUBLE",
    "gpu_idle_copy_share": "DOUBLE",
    "gpu_idle_other_share": "DOUBLE",
    "copy_wait_s": "DOUBLE",
    "mean_gpu_util": "DOUBLE",
    "peak_gpu_mem_bytes": "BIGINT",
    "startup_s": "DOUBLE",
    "startup_imports_s": "DOUBLE",
    "startup_cuda_s": "DOUBLE",
    "startup_build_s": "DOUBLE",
    "startup_first_batch_s": "DOUBLE",
    "calibration_s": "DOUBLE",
    # the bound knows the machine's cores (engine/calibrate/bound.py), and says what would help
    "loader_cpu_s": "DOUBLE",
    "compute_cpu_s": "DOUBLE",
    "cpu_bound_s": "DOUBLE",
    "usable_cores": "DOUBLE",
    "runnable_threads": "INTEGER",
    "verdict_help": "VARCHAR",
}
# Run-level columns schema v5 added: the epoch predicted for the run's setting (engine/predict/model.py), what the
# prediction came from ('prior': a probe taken before the run; 'own': the run's own, after it) and its limit
_SUMMARY_V5 = {"predicted_epoch_s": "DOUBLE", "predicted_from": "VARCHAR", "predicted_limit": "VARCHAR"}
# Run-level columns schema v6 added: the predicted epoch's range (predicted_lo_s, predicted_hi_s: two settings whose
# ranges overlap cannot be told apart on that machine); a run of the user's own loop (engine/observe/): source
# 'observed' (NULL: the lab's run), the stream it observed (where its DataLoader was made: file:line) and the loader's
# settings as read from the object, JSON, with those the lab's fields cannot hold listed under "unmapped"; the pools
# the lab did not set where items loaded (engine/measure/pools.py, JSON text {place: pools}) and the runnable threads
# they add; whether a plugin's items loaded one at a time and why; the process tree's CPU % over the steady epochs
# only (what the verdict reads); how a stream (the user's iterable) was split over workers and ranks ('self',
# 'shard', 'item'; NULL for map-style datasets) and what that means for its batches (engine/workloads/stream.py)
_SUMMARY_V6 = {
    "predicted_lo_s": "DOUBLE",
    "predicted_hi_s": "DOUBLE",
    "source": "VARCHAR",
    "observed_stream": "VARCHAR",
    "observed_settings": "VARCHAR",
    "thread_pools": "VARCHAR",
    "extra_threads": "INTEGER",
    "items_serialised": "BOOLEAN",
    "items_note": "VARCHAR",
    "steady_cpu_pct": "DOUBLE",
    "stream_split": "VARCHAR",
    "stream_note": "VARCHAR",
}
# Run-level figures computed at ingest (or copied from the run's `summary` event).
SUMMARY_COLUMNS = {
    "epoch_s": "DOUBLE",
    "samples_per_s": "DOUBLE",
    "ttfb_s": "DOUBLE",
    "data_wait_share": "DOUBLE",
    "h2d_share": "DOUBLE",
    "compute_share": "DOUBLE",
    "bound_s": "DOUBLE",
    "efficiency": "DOUBLE",
    "verdict": "VARCHAR",
    "peak_rss_bytes": "BIGINT",
    "mean_cpu_pct": "DOUBLE",
    "n_epochs": "INTEGER",
    "other_share": "DOUBLE",
    "data_wait_p50_s": "DOUBLE",
    "data_wait_p90_s": "DOUBLE",
    "data_wait_p99_s": "DOUBLE",
    "loader_only_s": "DOUBLE",
    "compute_only_s": "DOUBLE",
    "aggregate_samples_per_s": "DOUBLE",
    # schema v2: the bound per mode (engine/calibrate/bound.py)
    "overlap": "DOUBLE",
    "serial_bound_s": "DOUBLE",
    "calib_age_s": "DOUBLE",
    "bound_note": "VARCHAR",
    "bound_error": "VARCHAR",
    **_SUMMARY_V4,
    **_SUMMARY_V5,
    **_SUMMARY_V6,
}
# Summary columns each schema version added (a migration adds them to an older file).
SUMMARY_COLUMNS_V2 = ("overlap", "serial_bound_s", "calib_age_s", "bound_note", "bound_error")
SUMMARY_COLUMNS_V4 = tuple(_SUMMARY_V4)
SUMMARY_COLUMNS_V5 = tuple(_SUMMARY_V5)
SUMMARY_COLUMNS_V6 = tuple(_SUMMARY_V6)
# Epoch columns schema v4 added: the GPU clock's fields of each epoch (engine/measure/timers.py), NULL on CPU
EPOCH_COLUMNS_V4 = GPU_EPOCH_FIELDS
# Fixed `runs` columns; config columns follow, generated from RunConfig.
RUN_COLUMNS = {
    "run_id": "VARCHAR PRIMARY KEY",
    "status": "VARCHAR",
    "error": "VARCHAR",
    "created_at": "TIMESTAMP",
    "started_at": "TIMESTAMP",
    "ended_at": "TIMESTAMP",
    "sweep_id": "VARCHAR",
    "config_idx": "INTEGER",
    "repeat_idx": "INTEGER",
    "job_id": "VARCHAR",
    "host": "VARCHAR",
    "host_fingerprint": "VARCHAR",
    "host_json": "VARCHAR",
    "cpu_model": "VARCHAR",
    "cores": "INTEGER",
    "gpu_name": "VARCHAR",
    "torch_version": "VARCHAR",
    "python_version": "VARCHAR",
    "git_commit": "VARCHAR",
    "config_json": "VARCHAR",
    "tags": "VARCHAR",
    "notes": "VARCHAR",
    "deleted": "BOOLEAN DEFAULT false",
    "summary_json": "VARCHAR",
    "run_dir": "VARCHAR",
    "ingested_bytes": "BIGINT",
    **SUMMARY_COLUMNS,
    # schema v3: sha256 of the user's plugin source (engine/plugins/__init__.py); NULL for built-in workloads and models
    "code_hash": "VARCHAR",
}
# Schema v8: a script's tune answered (engine/store/tunes.py); its trials are the runs with sweep_id = tune_id.
# command and settings_json hold JSON lists (the script's argv; the candidates' settings, index = config_idx);
# best_config_idx NULL: no change to make or nothing finished; speedup_lo/hi NULL: no interval.
TUNE_COLUMNS = {
    "tune_id": "VARCHAR",
    "created_at": "TIMESTAMP",
    "kind": "VARCHAR",
    "command": "VARCHAR",
    "site": "VARCHAR",
    "budget_s": "DOUBLE",
    "spent_s": "DOUBLE",
    "stop_reason": "VARCHAR",
    "best_config_idx": "INTEGER",
    "speedup": "DOUBLE",
    "speedup_lo": "DOUBLE",
    "speedup_hi": "DOUBLE",
    "difference": "VARCHAR",
    "diff": "VARCHAR",
    "answer": "VARCHAR",
    "settings_json": "VARCHAR",
}
_KEYS = "model_idx INTEGER, rank INTEGER, epoch INTEGER"
TABLES = {
    "epochs": f"run_id VARCHAR, {_KEYS}, warmup BOOLEAN, wall_s DOUBLE, samples BIGINT, samples_per_s DOUBLE, "
    "ttfb_s DOUBLE, data_wait_s DOUBLE, h2d_s DOUBLE, compute_s DOUBLE, n_steps INTEGER, "
    "t_start DOUBLE, t_end DOUBLE, loss DOUBLE, allreduce_s DOUBLE, "
    + "".join(f"{c} DOUBLE, " for c in EPOCH_COLUMNS_V4)
    + "PRIMARY KEY (run_id, model_idx, rank, epoch)",
    "steps": f"run_id VARCHAR, {_KEYS}, step INTEGER, data_wait_s DOUBLE, h2d_s DOUBLE, compute_s DOUBLE, "
    "total_s DOUBLE, PRIMARY KEY (run_id, model_idx, rank, epoch, step)",
    "samples": "run_id VARCHAR, t DOUBLE, cpu_percent DOUBLE, rss_bytes BIGINT, gpu_util DOUBLE, gpu_mem_bytes BIGINT",
    "calibrations": "run_id VARCHAR, kind VARCHAR, seconds DOUBLE, ttfb_s DOUBLE, cached BOOLEAN",
    "jobs": "job_id VARCHAR PRIMARY KEY, created_at TIMESTAMP, status VARCHAR, config_json VARCHAR, "
    "sweep_id VARCHAR, run_id VARCHAR, device VARCHAR, pid INTEGER, error VARCHAR, "
    "started_at TIMESTAMP, ended_at TIMESTAMP",
    "views": "view_id VARCHAR PRIMARY KEY, created_at TIMESTAMP, state_json VARCHAR",
    "saved_queries": "name VARCHAR PRIMARY KEY, sql VARCHAR, builtin BOOLEAN, created_at TIMESTAMP",
    "tunes": ", ".join(f"{k} {v}" for k, v in TUNE_COLUMNS.items()) + ", PRIMARY KEY (tune_id)",
}
# The History page's built-in queries, the one list: shown first on the page, and their names cannot be taken
# by a user's query (engine/store/views.py). A store keeps STORED_BUILTINS as rows of saved_queries as well
# (builtin = true, written when it was created: schema v1); the others are read from here.


BUILTIN_QUERIES = {
    "recent runs": "SELECT run_id, status, workload, loader, workers, mode, model, epoch_s, samples_per_s\n"
    "FROM runs WHERE NOT deleted ORDER BY created_at DESC LIMIT 50",
    "fastest loader per workload": "SELECT workload, loader, workers, median(epoch_s) AS epoch_s, count(*) AS runs\n"
    "FROM runs WHERE status = 'done' AND NOT deleted\n"
    "GROUP BY ALL ORDER BY workload, epoch_s",
    "where the time goes": "SELECT run_id, data_wait_share, h2d_share, compute_share, efficiency, verdict\n"
    "FROM runs WHERE status = 'done' AND NOT deleted ORDER BY created_at DESC",
    "median epoch time by loader": (
        "SELECT loader, workers, count(*) AS runs, median(epoch_s) AS median_epoch_s,\n"
        "       quantile_cont(epoch_s, 0.1) AS p10, quantile_cont(epoch_s, 0.9) AS p90\n"
        "FROM runs WHERE status = 'done' AND NOT deleted\nGROUP BY ALL ORDER BY median_epoch_s"
    ),
    "data-bound runs": (
        "SELECT run_id, workload, loader, workers, data_wait_share, efficiency, verdict\n"
        "FROM runs WHERE verdict = 'data-bound' AND NOT deleted\nORDER BY data_wait_share DESC"
    ),
    # NOTE: the advisor's statistic (engine/advice/advisor.py): each config's median over its done single-model
    # runs of epoch_s, compared within one host fingerprint; fewer than 6 runs have no interval, so "unproven"
    "best config per workload/model": (
        "WITH configs AS (\n"
        "  SELECT workload, model, device, n_samples, host_fingerprint, loader, workers, prefetch_depth, batch_size,\n"
        "         count(*) AS runs, median(epoch_s) AS median_epoch_s, arg_max(run_id, created_at) AS newest_run\n"
        "  FROM runs WHERE status = 'done' AND NOT deleted AND mode = 'single' AND epoch_s IS NOT NULL\n"
        "  GROUP BY workload, model, device, n_samples, host_fingerprint, loader, workers, prefetch_depth,\n"
        "           start_method, persistent_workers, pin_memory, batch_size)\n"
        "SELECT workload, model, loader, workers, prefetch_depth, batch_size, median_epoch_s, runs,\n"
        "       CASE WHEN runs >= 6 THEN 'best' ELSE 'fastest so far, unproven: ' || runs\n"
        "            || CASE WHEN runs = 1 THEN ' run' ELSE ' runs' END END AS called,\n"
        "       n_samples, device, host_fingerprint, newest_run\n"
        "FROM configs\n"
        "QUALIFY row_number() OVER (PARTITION BY workload, model, device, n_samples, host_fingerprint\n"
        "                           ORDER BY median_epoch_s) = 1\n"
        "ORDER BY workload, model"
    ),
    "runs per host": (
        "SELECT host, count(*) AS runs, count(*) FILTER (WHERE status = 'done') AS done,\n"
        "       min(created_at) AS first_run, max(created_at) AS last_run\n"
        "FROM runs WHERE NOT deleted\nGROUP BY host ORDER BY runs DESC"
    ),
    "runs per day": (
        "SELECT date_trunc('day', created_at) AS day, count(*) AS runs\n"
        "FROM runs WHERE NOT deleted\nGROUP BY day ORDER BY day"
    ),
}
STORED_BUILTINS = ("recent runs", "fastest loader per workload", "where the time goes")


def column_types(table: str) -> dict[str, str]:
    """{column: SQL type} of one of TABLES, read from its DDL: what ingest coerces a RunLog's values to."""
    body = re.sub(r",?\s*PRIMARY KEY \([^)]*\)", "", TABLES[table])
    return dict(col.strip().split(" ", 1) for col in body.split(","))
