"""Explore's answer: the configs in view ranked by median epoch time, each with its 95 % interval, its speedup
over a reference (the slowest, or the user's setup) with the speedup's interval, and the call in words.

Every figure comes from engine.analysis.stats (median_ci, compare), the same functions as `compare` and the
advisor use, so the table, the advisor and the CLI agree. Configs are never pooled across pipelines: each
(workload, model) is ranked on its own, and a config is every run setting that varies among the runs in view.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from engine.analysis import stats
from engine.store._explore_sql import config_columns

__all__ = ["NOT_SLOWER_MARGIN", "rank_configs"]

NOT_SLOWER_MARGIN = 0.05  # "not slower": the speedup's interval starts above 0.95 (at most 5 % slower)
PIPELINE = ("workload", "model")
_SETTING_ORDER = ("loader", "workers", "prefetch_depth", "threads", "batch_size")


def _label(row: dict[str, Any], fields: list[str]) -> str:
    """'threads, workers=4, batch_size=64': the loader first, then what varies among the runs in view."""
    parts = [str(row["loader"])] if "loader" in fields else []
    parts += [f"{f}={row[f]}" for f in fields if f != "loader" and not _missing(row[f])]
    return ", ".join(parts) or "one config"


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def _call(c: dict[str, Any], is_ref: bool) -> str:
    """The comparison with the reference in words: faster / not slower / slower / no clear difference."""
    if is_ref:
        return "reference"
    if c["note"]:
        return f"too few runs to tell: {c['n_b']} here, {c['n_a']} in the reference (a 95 % interval needs 6 + 7)"
    if c["verdict"] == "B faster":
        return "faster"
    if c["verdict"] == "A faster":
        return "slower"
    return "not slower (within 5 %)" if c["b_not_slower"] else "no clear difference"


def rank_configs(runs: pd.DataFrame, reference: str | None = None, metric: str = "epoch_s") -> pd.DataFrame:
    """One row per config per pipeline, fastest first: rank, workload, model, config (a label), n, median, lo, hi,
    interval (text: '95 % CI lo–hi' or 'no interval: n runs'), unproven (fewer than 6 runs), speedup, speedup_lo,
    speedup_hi, vs (the reference's label), call, run_ids. `runs`: one row per run with `metric` (a time: lower
    is faster), the pipeline and config columns. `reference`: a config label to compare with (else the slowest)."""
    out_cols = ["rank", *PIPELINE, "config", "n", "median", "lo", "hi", "interval", "unproven", "speedup",
                "speedup_lo", "speedup_hi", "vs", "call", "run_ids"]
    runs = runs.dropna(subset=[metric]) if len(runs) else runs
    if runs.empty:
        return pd.DataFrame(columns=out_cols)
    rows = []
    for key, pipe in runs.groupby(list(PIPELINE), dropna=False, sort=True):
        fields = [c for c in (*_SETTING_ORDER, *config_columns(PIPELINE), "host_fingerprint", "code_hash")
                  if c in pipe and pipe[c].astype("string").nunique(dropna=False) > 1]
        fields = list(dict.fromkeys(fields)) or ["loader"]
        labels = pipe[fields].astype(object).apply(lambda r: _label(dict(r), fields), axis=1)
        values = {lab: grp[metric].to_numpy(dtype=float) for lab, grp in pipe.groupby(labels, sort=False)}
        ids = {lab: ",".join(grp.sort_values("created_at", ascending=False)["run_id"].astype(str))
               for lab, grp in pipe.groupby(labels, sort=False)}
        medians = {lab: stats.median_ci(v) for lab, v in values.items()}
        ref = reference if reference in values else max(medians, key=lambda lab: medians[lab][0])
        for lab in sorted(values, key=lambda lab: medians[lab][0]):
            med, lo, hi = medians[lab]
            c = stats.compare(values[ref], values[lab], margin=NOT_SLOWER_MARGIN)
            rows.append({**dict(zip(PIPELINE, key)), "config": lab, "n": len(values[lab]), "median": med, "lo": lo,
                         "hi": hi, "interval": stats.ci_text(lo, hi, len(values[lab]), "{:#.3g}", " s"),
                         "unproven": len(values[lab]) < stats.MIN_FOR_CI, "speedup": c["speedup"],
                         "speedup_lo": c["speedup_lo"], "speedup_hi": c["speedup_hi"], "vs": ref,
                         "call": _call(c, lab == ref), "run_ids": ids[lab]})
    out = pd.DataFrame(rows)
    out.insert(0, "rank", out.groupby(list(PIPELINE), dropna=False).cumcount() + 1)
    return out[out_cols]
