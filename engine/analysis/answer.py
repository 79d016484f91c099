"""Which runs answer "what is fastest here": the one choice Explore's headline and the advisor both make, so that they
rank the same runs and name the same setting.

    runs, problem, left_out = answer_runs(pipeline_runs)   # single-model runs of the most-measured problem
    keys = ranked_keys(runs)                                # the settings they are ranked by
    ref = reference_of(table, best)                         # sync (at the best's batch size), else the slowest

A problem is the data and model settings and the machine (PROBLEM_KEYS): runs of two problems are never ranked
against each other. What varies inside one problem (the loader settings, the batch size, the intra-op threads, or
anything else the user varied) is what is ranked.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from engine.analysis import stats
from engine.config import config_fields

__all__ = ["PROBLEM_KEYS", "RANKED_FIRST", "answer_runs", "not_yet_distinguishable", "ranked_keys", "reference_of"]

# code_hash: a changed plugin is another problem (NULL: built-in); host_fingerprint: another machine is another
# problem (engine/measure/machine.py: the machine's facts, not the run's thread settings); source: the user's own
# loop, observed, is never ranked against the lab's runs
PROBLEM_KEYS = (
    "n_samples",
    "image_size",
    "num_classes",
    "work_us",
    "latency_ms",
    "folder",
    "width",
    "depth",
    "optimizer",
    "device",
    "code_hash",
    "host_fingerprint",
    "source",
)
# The settings every ranking keys on, in the order a config is named; others join when they vary
RANKED_FIRST = (
    "loader",
    "workers",
    "prefetch_depth",
    "start_method",
    "persistent_workers",
    "pin_memory",
    "batch_size",
    "threads",
)
# Fields that label a run or tune its measurement: never a setting that is ranked
_NOT_SETTINGS = {"tag", "seed", "bound", "sample_hz", "worker_timeout_s", "trace", "workload", "model"}


def answer_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any], int]:
    """(the runs that answer, their problem, how many other runs were left out) for one pipeline's done runs with an
    epoch time: the single-model runs (all runs if none is single-model) of the problem with the most runs."""
    runs = runs.dropna(subset=["epoch_s"])
    if runs.empty:
        return runs, {}, 0
    single = runs[runs["mode"] == "single"] if "mode" in runs else runs
    pool = single if len(single) else runs
    keys = [k for k in PROBLEM_KEYS if k in pool]
    keyed = pool.assign(**{k: pool[k].astype(object).where(pool[k].notna(), None) for k in keys})
    sizes = keyed.groupby(keys, dropna=False, sort=False).size()
    # the most runs; among equals the one measured last, so a new problem's first sweep is not hidden by an old one
    newest = keyed.groupby(keys, dropna=False, sort=False)["created_at"].max() if "created_at" in keyed else sizes
    order = sorted(range(len(sizes)), key=lambda i: (sizes.iloc[i], newest.iloc[i]), reverse=True)
    top = sizes.index[order[0]]
    problem = dict(zip(keys, top if isinstance(top, tuple) else (top,)))
    problem = {k: (None if v is None or (isinstance(v, float) and math.isnan(v)) else v) for k, v in problem.items()}
    mine = pool[stats.matching(pool, problem)]
    return mine, problem, len(runs) - len(mine)


def ranked_keys(runs: pd.DataFrame) -> list[str]:
    """RANKED_FIRST, then every other setting that varies among `runs` (e.g. epochs): configs that differ in any
    of them are ranked apart, never pooled."""
    rest = [
        f.name
        for f in config_fields()
        if f.name not in _NOT_SETTINGS
        and f.name not in RANKED_FIRST
        and f.name not in PROBLEM_KEYS
        and f.name in runs
        and runs[f.name].astype("string").nunique(dropna=False) > 1
    ]
    return [k for k in RANKED_FIRST if k in runs] + rest


def reference_of(table: pd.DataFrame, best: dict[str, Any]) -> dict[str, Any]:
    """What a speedup is measured against when the user named nothing: the default setup, sync at torch's default
    intra-op threads (and the best's batch size) where measured so, else the fastest sync, else the slowest config
    (never an outlier when sync was measured). A row of `table` (stats.summarize_configs, fastest first)."""
    sync = table[table["loader"] == "sync"] if "loader" in table else table.iloc[0:0]
    wanted = {"batch_size": best.get("batch_size"), "threads": 0}
    if len(sync):
        for keys in (("batch_size", "threads"), ("threads",), ("batch_size",), ()):
            same = sync[stats.matching(sync, {k: wanted[k] for k in keys if k in sync})]
            if len(same):
                return dict(same.iloc[0])
    return dict(table.iloc[-1])


def not_yet_distinguishable(lo: float, hi: float) -> bool:
    """A speedup whose 95 % interval spans 1 (or that has none): no winner yet, whatever the medians say."""
    return lo is None or hi is None or math.isnan(lo) or math.isnan(hi) or lo <= 1 <= hi
