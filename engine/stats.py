"""Statistics for trustworthy numbers: medians with bootstrap intervals, noise flags, A/B comparisons,
where the time goes, and speedups of dual/fused modes over their sequential baselines.

Pure functions of numbers and DataFrames (no store, no torch), so pages, the advisor and benchmarks
share one definition of "faster":

    med, lo, hi = median_ci([1.02, 0.98, 1.01, 1.00])       # 95% bootstrap interval of the median
    compare(sync_epoch_s, threads_epoch_s)["verdict"]      # "A faster" | "B faster" | "no clear difference"

Values are times (lower is faster) unless a function says otherwise.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

__all__ = ["MIN_FOR_CI", "NOISY_CV", "compare", "cv", "median_ci", "mixed_hosts_warning", "speedup_vs_sequential",
           "summarize_configs", "time_breakdown"]

NOISY_CV = 0.10   # DESIGN: a coefficient of variation over 10% flags a config as noisy
MIN_FOR_CI = 3    # fewer values than this get no interval: a bootstrap of 1 or 2 values only restates them


def _clean(values: Iterable[float]) -> np.ndarray:
    # NOTE: through a float Series so None and pd.NA (nullable columns from the store) become NaN
    arr = pd.Series(values if isinstance(values, (np.ndarray, pd.Series)) else list(values), dtype="Float64")
    arr = arr.to_numpy(dtype=float, na_value=np.nan)
    return arr[np.isfinite(arr)]


def _boot_medians(arr: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """n_boot medians of resamples (with replacement) of arr, vectorised: one (n_boot, n) index draw."""
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    return np.median(arr[idx], axis=1)


def median_ci(values: Iterable[float], confidence: float = 0.95, n_boot: int = 2000,
              seed: int = 0) -> tuple[float, float, float]:
    """(median, lo, hi): the percentile-bootstrap interval of the median at `confidence`.

    NaN and infinite values are dropped. With fewer than MIN_FOR_CI (3) values the interval is
    (nan, nan): one or two repeats say nothing about spread, and a min..max range would look like
    an interval it is not. No values at all gives (nan, nan, nan). Deterministic for a given seed.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    arr = _clean(values)
    if arr.size == 0:
        return math.nan, math.nan, math.nan
    med = float(np.median(arr))
    if arr.size < MIN_FOR_CI:
        return med, math.nan, math.nan
    boots = _boot_medians(arr, n_boot, np.random.default_rng(seed))
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    return med, float(lo), float(hi)


def cv(values: Iterable[float]) -> float:
    """Coefficient of variation: sample standard deviation / mean; nan for fewer than 2 values or mean 0."""
    arr = _clean(values)
    if arr.size < 2 or np.mean(arr) == 0:
        return math.nan
    return float(np.std(arr, ddof=1) / abs(np.mean(arr)))


def summarize_configs(df: pd.DataFrame, group_cols: list[str], value: str = "epoch_s",
                      confidence: float = 0.95) -> pd.DataFrame:
    """One row per config (distinct group_cols): n, median, ci_lo, ci_hi, cv, noisy; fastest first.

    `noisy` is True when cv > NOISY_CV. Rows whose value is missing (failed runs) are ignored.
    """
    cols = [*group_cols, "n", "median", "ci_lo", "ci_hi", "cv", "noisy"]
    if df is None or df.empty or value not in df.columns:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, group in df.dropna(subset=[value]).groupby(list(group_cols), dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        vals = group[value].to_numpy(dtype=float)
        med, lo, hi = median_ci(vals, confidence)
        c = cv(vals)
        rows.append([*key, len(vals), med, lo, hi, c, bool(c > NOISY_CV) if not math.isnan(c) else False])
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values("median", kind="stable").reset_index(drop=True)


def compare(a_values: Iterable[float], b_values: Iterable[float], confidence: float = 0.95, n_boot: int = 2000,
            seed: int = 0) -> dict[str, Any]:
    """A vs B, both times (lower is faster). speedup = median_a / median_b (> 1: B is faster).

    The speedup's interval bootstraps both samples independently and takes percentiles of the
    ratio of their medians. The verdict is "no clear difference" when the two medians' intervals
    overlap (or either side has fewer than MIN_FOR_CI values), else "A faster" or "B faster".
    """
    a, b = _clean(a_values), _clean(b_values)
    ma, a_lo, a_hi = median_ci(a, confidence, n_boot, seed)
    mb, b_lo, b_hi = median_ci(b, confidence, n_boot, seed + 1)
    speedup = ma / mb if a.size and b.size and mb > 0 else math.nan
    s_lo = s_hi = math.nan
    if a.size >= MIN_FOR_CI and b.size >= MIN_FOR_CI:
        rng = np.random.default_rng(seed + 2)
        ratios = _boot_medians(a, n_boot, rng) / _boot_medians(b, n_boot, rng)
        alpha = (1 - confidence) / 2
        s_lo, s_hi = (float(q) for q in np.quantile(ratios, [alpha, 1 - alpha]))
    if any(math.isnan(x) for x in (a_lo, a_hi, b_lo, b_hi)) or (a_lo <= b_hi and b_lo <= a_hi):
        verdict = "no clear difference"
    else:
        verdict = "A faster" if ma < mb else "B faster"
    note = None if min(a.size, b.size) >= MIN_FOR_CI else f"fewer than {MIN_FOR_CI} values on a side: no interval"
    return {"median_a": ma, "a_lo": a_lo, "a_hi": a_hi, "n_a": int(a.size), "median_b": mb, "b_lo": b_lo,
            "b_hi": b_hi, "n_b": int(b.size), "speedup": speedup, "speedup_lo": s_lo, "speedup_hi": s_hi,
            "verdict": verdict, "note": note}


def mixed_hosts_warning(df: pd.DataFrame) -> str | None:
    """A warning when the runs compared come from different hosts or torch versions, else None."""
    if df is None or df.empty:
        return None
    parts = []
    for col, what in (("host_fingerprint", "hosts"), ("torch_version", "torch versions")):
        if col in df.columns:
            seen = sorted(str(v) for v in df[col].dropna().unique())
            if len(seen) > 1:
                parts.append(f"{len(seen)} {what} ({', '.join(seen[:4])}{', ...' if len(seen) > 4 else ''})")
    if not parts:
        return None
    return (f"these runs mix {' and '.join(parts)}: timings from different machines or versions are not "
            "comparable; filter by host_fingerprint and torch_version to compare like with like")


# ---------------------------------------------------------------------------- where the time goes


def time_breakdown(epochs_df: pd.DataFrame, steps_df: pd.DataFrame | None = None) -> dict[Any, dict[str, Any]]:
    """Per run (keyed by run_id; by None when there is no run_id column): where the wall time went.

    Over steady (non-warm-up) epochs, all models and ranks pooled:
      data_wait_share, h2d_share, compute_share   each part's share of the summed epoch wall time
      other_share                                 1 - the three: loop overhead, logging, Python (>= 0)
    Time to first batch apart from the steady state:
      ttfb_s         median TTFB of steady epochs (with persistent workers: the queue refilling)
      first_ttfb_s   TTFB of the first epoch, which includes worker start-up and file opening
      startup_s      first_ttfb_s - ttfb_s (>= 0): what starting the loader costs once
    Per step, from steps_df, steady epochs only, and each epoch's first step left out (it is the TTFB):
      data_wait_p50_s, data_wait_p90_s, data_wait_p99_s, n_steps
    """
    if epochs_df is None or epochs_df.empty:
        return {}
    ep = epochs_df.copy()
    if "run_id" not in ep.columns:
        ep["run_id"] = None
    steps = steps_df.copy() if steps_df is not None and not steps_df.empty else None
    if steps is not None and "run_id" not in steps.columns:
        steps["run_id"] = None
    out: dict[Any, dict[str, Any]] = {}
    for run_id, runs in ep.groupby("run_id", dropna=False, sort=False):
        run_id = None if isinstance(run_id, float) and math.isnan(run_id) else run_id
        warm = runs["warmup"].fillna(False).astype(bool) if "warmup" in runs.columns else False
        steady = runs[~warm] if len(runs[~warm]) else runs
        wall = float(steady["wall_s"].sum())
        figures: dict[str, Any] = {"wall_s": wall, "steady_epochs": int(steady["epoch"].nunique())}
        parts = {k: float(steady[f"{k}_s"].fillna(0).sum()) for k in ("data_wait", "h2d", "compute")}
        for k, v in parts.items():
            figures[f"{k}_share"] = v / wall if wall > 0 else math.nan
        figures["other_share"] = max(0.0, 1 - sum(parts.values()) / wall) if wall > 0 else math.nan
        first = runs[runs["epoch"] == runs["epoch"].min()]
        figures["ttfb_s"] = float(steady["ttfb_s"].median())
        figures["first_ttfb_s"] = float(first["ttfb_s"].median())
        figures["startup_s"] = max(0.0, figures["first_ttfb_s"] - figures["ttfb_s"])
        figures.update(_wait_percentiles(steps, run_id, steady))
        out[run_id] = figures
    return out


def _wait_percentiles(steps: pd.DataFrame | None, run_id: Any, steady: pd.DataFrame) -> dict[str, Any]:
    names = ("data_wait_p50_s", "data_wait_p90_s", "data_wait_p99_s")
    if steps is None:
        return {**dict.fromkeys(names, math.nan), "n_steps": 0}
    mine = steps[steps["run_id"].isna()] if run_id is None else steps[steps["run_id"] == run_id]
    mine = mine[mine["epoch"].isin(steady["epoch"].unique()) & (mine["step"] > 0)]
    waits = mine["data_wait_s"].dropna().to_numpy(dtype=float)
    if waits.size == 0:
        return {**dict.fromkeys(names, math.nan), "n_steps": 0}
    return {**dict(zip(names, (float(q) for q in np.quantile(waits, [0.5, 0.9, 0.99])))), "n_steps": int(waits.size)}


# ---------------------------------------------------------------------------- modes vs sequential

# Fields that describe how models share the machine, not the problem: ignored when matching a baseline.
_MODE_FIELDS = ("mode", "n_models", "lr_spread", "model_b", "width_b", "dual_data", "devices", "n_stages",
                "micro_batches", "world_size", "tag")


def speedup_vs_sequential(runs_df: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """For every dual-* (other than dual-sequential) and fused config, its speedup over training the
    same models one after another, measured in the same sweep_id.

    Baselines, matched on every other config field:
      dual-*             the dual-sequential run with the same model_b/width_b (both models, in turn)
      fused n_models=N   single-mode runs: N models trained in turn take N x the single epoch time
    NOTE: speedups compare throughput (samples of all models per second, the store's samples_per_s),
    so "N x single" needs no separate run: speedup = fused samples/s / single samples/s. Repeats of
    a config are the samples of stats.compare; the interval is that of the ratio of medians.
    Columns: sweep_id, mode, n_models, the matched fields, n, baseline_mode, baseline_n, speedup,
    speedup_lo, speedup_hi, verdict ("faster" | "slower" | "no clear difference"), note.
    """
    cols = ["sweep_id", "mode", "n_models", "n", "baseline_mode", "baseline_n", "speedup", "speedup_lo",
            "speedup_hi", "verdict", "note"]
    if runs_df is None or runs_df.empty or "samples_per_s" not in runs_df.columns:
        return pd.DataFrame(columns=cols)
    df = runs_df[runs_df["samples_per_s"].fillna(0) > 0]
    if "status" in df.columns:
        df = df[df["status"] == "done"]
    from engine.config import config_fields  # noqa: PLC0415 - the schema names the fields to match on

    keys = [f.name for f in config_fields() if f.name not in _MODE_FIELDS and f.name in df.columns]
    rows = []
    mode = df["mode"].fillna("").astype(str)
    contenders = df[(mode.str.startswith("dual-") & (mode != "dual-sequential")) | (mode == "fused")]
    group_cols = ["sweep_id", "mode", "n_models", "model_b", "width_b", *keys]
    group_cols = [c for c in dict.fromkeys(group_cols) if c in df.columns]
    for key, group in contenders.groupby(group_cols, dropna=False, sort=True):
        fixed = dict(zip(group_cols, key))
        base_mode = "single" if fixed["mode"] == "fused" else "dual-sequential"
        match = (df["mode"] == base_mode) & _same(df, fixed, ["sweep_id", *keys])
        if base_mode == "dual-sequential":
            match &= _same(df, fixed, [c for c in ("model_b", "width_b") if c in fixed])
        base = df[match]
        c = compare(1 / base["samples_per_s"], 1 / group["samples_per_s"], confidence) if len(base) else None
        row = {**fixed, "n": len(group), "baseline_mode": base_mode, "baseline_n": len(base),
               "speedup": c["speedup"] if c else math.nan, "speedup_lo": c["speedup_lo"] if c else math.nan,
               "speedup_hi": c["speedup_hi"] if c else math.nan,
               "verdict": ({"B faster": "faster", "A faster": "slower"}.get(c["verdict"], c["verdict"]) if c
                           else "no baseline"),
               "note": c["note"] if c else f"no {base_mode} run with the same settings in sweep {fixed['sweep_id']}"}
        rows.append(row)
    out = pd.DataFrame(rows)
    return out if len(out) else pd.DataFrame(columns=cols)


def _same(df: pd.DataFrame, fixed: dict[str, Any], cols: list[str]) -> pd.Series:
    """Rows of df equal to fixed on cols, where missing equals missing."""
    mask = pd.Series(True, index=df.index)
    for c in cols:
        v = fixed[c]
        mask &= df[c].isna() if v is None or pd.isna(v) else (df[c] == v).fillna(False).astype(bool)
    return mask
