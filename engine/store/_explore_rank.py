"""Explore's answer: the configs in view ranked by median epoch time, each with its 95 % interval, its speedup
over a reference (sync, or the user's setup) with the speedup's interval, and the call in words.

Every figure comes from engine.analysis.stats (median_ci, compare), the same functions as `compare` and the
advisor use, and the runs ranked are engine.analysis.answer's, the advisor's, so the headline and the advisor name
the same config. Configs are never pooled across pipelines: each (workload, model) is ranked on its own, and a config
is every run setting that varies among the runs ranked. Labels never show a hash.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from engine.analysis import stats
from engine.analysis.answer import answer_runs, not_yet_distinguishable, ranked_keys, reference_of

__all__ = ["NOT_SLOWER_MARGIN", "OWN_MODEL", "rank_configs"]

NOT_SLOWER_MARGIN = 0.05  # "not slower": the speedup's interval starts above 0.95 (at most 5 % slower)
PIPELINE = ("workload", "model")
OWN_MODEL = "your model"  # an observed run's model: the user's own, which the lab never built


def _value(field: str, v: Any) -> str:
    return "auto" if field == "threads" and v == 0 else str(v)


def _label(row: dict[str, Any], fields: list[str]) -> str:
    """'threads, workers=4, batch_size=64': the loader first, then what varies among the runs ranked."""
    parts = [str(row["loader"])] if "loader" in fields else []
    parts += [f"{f}={_value(f, row[f])}" for f in fields if f != "loader" and not _missing(row[f])]
    return ", ".join(parts) or "one config"


def _plain(v: Any) -> Any:
    """A numpy scalar as its Python value, for the knobs' JSON."""
    return v.item() if hasattr(v, "item") else str(v)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def _call(c: dict[str, Any], is_ref: bool) -> str:
    """The comparison with the reference in words: faster / not slower / slower / not yet distinguishable."""
    if is_ref:
        return "reference"
    if c["note"]:
        return f"too few runs to tell: {c['n_b']} here, {c['n_a']} in the reference (a 95 % interval needs 6 + 7)"
    if c["difference"] == "B faster":
        return "faster"
    if c["difference"] == "A faster":
        return "slower"
    # NOTE: the interval spans 1: no winner, however the medians differ; "not slower" is what it does rule out
    said = f"not yet distinguishable ({c['n_b']} and {c['n_a']} runs)"
    return said + ("; at most 5 % slower" if c["b_not_slower"] else "")


def rank_configs(runs: pd.DataFrame, reference: str | None = None, metric: str = "epoch_s") -> pd.DataFrame:
    """One row per config per pipeline, fastest first: rank, workload, model, config (a label), n, median, lo, hi,
    interval (text: '95 % CI lo–hi' or 'no interval: n runs'), unproven (fewer than 6 runs), speedup, speedup_lo,
    speedup_hi, distinguishable (the speedup's interval excludes 1), vs (the reference's label), call, run_ids,
    left_out (the pipeline's runs of other problems or modes, charted but not ranked), knobs (the config's settings
    as JSON: what a user's own setup is matched against).

    `runs`: one row per run with `metric` (a time: lower is faster), the pipeline and config columns. Per pipeline
    only engine.analysis.answer's runs are ranked, the advisor's. `reference`: a config label to compare with (else
    sync at the best's batch size, else the slowest)."""
    out_cols = [
        "rank",
        *PIPELINE,
        "config",
        "n",
        "median",
        "lo",
        "hi",
        "interval",
        "unproven",
        "speedup",
        "speedup_lo",
        "speedup_hi",
        "distinguishable",
        "vs",
        "call",
        "run_ids",
        "left_out",
        "knobs",
    ]
    runs = runs.dropna(subset=[metric]) if len(runs) else runs
    if runs.empty:
        return pd.DataFrame(columns=out_cols)
    runs = runs.assign(model=runs["model"].fillna(OWN_MODEL)) if "model" in runs else runs
    rows = []
    for key, pipe in runs.groupby(list(PIPELINE), dropna=False, sort=True):
        pipe, _problem, left_out = answer_runs(
            pipe.rename(columns={metric: "epoch_s"}) if metric != "epoch_s" else pipe
        )
        keys = ranked_keys(pipe)
        fields = [k for k in keys if pipe[k].astype("string").nunique(dropna=False) > 1] or ["loader"]
        table = stats.summarize_configs(
            pipe.assign(**{k: pipe[k].astype(object).where(pipe[k].notna(), None) for k in keys}), keys
        )
        groups = {}
        for _, row in table.iterrows():
            knobs = {k: row[k] for k in keys}
            groups[_label(knobs, fields)] = (knobs, pipe[stats.matching(pipe, knobs)])
        labels = list(groups)  # fastest first
        best = groups[labels[0]][0]
        ref = reference if reference in groups else _label(reference_of(table, best), fields)
        for lab in labels:
            mine = groups[lab][1]
            values = mine["epoch_s"].to_numpy(dtype=float)
            med, lo, hi = stats.median_ci(values)
            c = stats.compare(groups[ref][1]["epoch_s"], values, margin=NOT_SLOWER_MARGIN)
            rows.append(
                {
                    **dict(zip(PIPELINE, key)),
                    "config": lab,
                    "n": len(values),
                    "median": med,
                    "lo": lo,
                    "hi": hi,
                    "interval": stats.ci_text(lo, hi, len(values), "{:#.3g}", " s"),
                    "unproven": len(values) < stats.MIN_FOR_CI,
                    "speedup": c["speedup"],
                    "speedup_lo": c["speedup_lo"],
                    "speedup_hi": c["speedup_hi"],
                    "distinguishable": not not_yet_distinguishable(c["speedup_lo"], c["speedup_hi"]),
                    "vs": ref,
                    "call": _call(c, lab == ref),
                    "run_ids": ",".join(mine.sort_values("created_at", ascending=False)["run_id"].astype(str)),
                    "left_out": left_out,
                    "knobs": json.dumps(groups[lab][0], default=_plain),
                }
            )
    out = pd.DataFrame(rows)
    out.insert(0, "rank", out.groupby(list(PIPELINE), dropna=False).cumcount() + 1)
    return out[out_cols]
