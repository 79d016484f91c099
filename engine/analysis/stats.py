"""Statistics for trustworthy numbers: medians with exact intervals, noise flags, A/B comparisons,
where the time goes, and speedups of dual/fused modes over their sequential baselines.

Pure functions of numbers and DataFrames (no store, no torch), so Explore, the advisor, tune, compare
and the findings bench share one definition of "interval" and of "faster":

    med, lo, hi = median_ci([1.02, 0.98, 1.01, 1.00, 0.99, 1.03])   # exact 95% interval of the median
    compare(sync_epoch_s, threads_epoch_s)["difference"]   # "A faster" | "B faster" | "no clear difference"

Interval of the median: the binomial order-statistic interval [x_(k), x_(n-k+1)] (distribution-free,
coverage >= the confidence for any continuous distribution). At 95% it needs n >= 6; below that there is
no interval (never a min..max range dressed up as one). Values are times (lower is faster) unless a
function says otherwise.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterable

import numpy as np
import pandas as pd

from engine.config import config_fields
from engine.measure import wait_percentiles
from engine.status import RunStatus

__all__ = [
    "MIN_FOR_CI",
    "NOISY_CV",
    "ci_text",
    "compare",
    "cv",
    "matching",
    "median_ci",
    "median_ci_ranks",
    "mixed_hosts_warning",
    "ratio_ci",
    "speedup_vs_sequential",
    "summarize_configs",
    "time_breakdown",
    "difference",
]

NOISY_CV = 0.10  # docs/design.md: a coefficient of variation over 10% flags a config as noisy
MIN_FOR_CI = 6  # the fewest values whose exact interval of the median reaches 95% (n=5 gives 93.75%)


def _clean(values: Iterable[float]) -> np.ndarray:
    # NOTE: through a float Series so None and pd.NA (nullable columns from the store) become NaN
    arr = pd.Series(values if isinstance(values, (np.ndarray, pd.Series)) else list(values), dtype="Float64")
    arr = arr.to_numpy(dtype=float, na_value=np.nan)
    return arr[np.isfinite(arr)]


@functools.lru_cache(maxsize=1024)
def _binom_half_cdf(n: int) -> tuple[float, ...]:
    """P(Bin(n, 1/2) <= j) for j = 0..n, exactly (integer counts over 2^n)."""
    total, acc, out = 2**n, 0, []
    for j in range(n + 1):
        acc += math.comb(n, j)
        out.append(acc / total)
    return tuple(out)


def _coverage(n: int, k: int) -> float:
    """Exact coverage of [x_(k), x_(n-k+1)] for the median of n values: 1 - 2 P(Bin(n, 1/2) <= k-1)."""
    return 1.0 - 2 * _binom_half_cdf(n)[k - 1]


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks (k, n-k+1) of the exact order-statistic interval of the median of n values: the
    narrowest symmetric pair whose coverage 1 - 2 P(Bin(n, 1/2) <= k-1) is >= confidence. None when even
    (1, n), the full range, falls short: n < 6 at 95%, n < 8 at 99%.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    n = int(n)
    best = None
    for k in range(1, (n + 1) // 2 + 1):
        if _coverage(n, k) < confidence:
            break
        best = (k, n - k + 1)
    return best


def median_ci(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, lo, hi): the exact order-statistic interval of the median (see median_ci_ranks).

    NaN and infinite values are dropped. When the count is too small to reach `confidence` (n < 6 at
    95%), lo and hi are nan: say "no interval: n runs", not min..max. No values gives (nan, nan, nan).
    """
    median_ci_ranks(0, confidence)  # NOTE: validates confidence even when there are no values
    arr = np.sort(_clean(values))
    if arr.size == 0:
        return math.nan, math.nan, math.nan
    ranks = median_ci_ranks(arr.size, confidence)
    med = float(np.median(arr))
    if ranks is None:
        return med, math.nan, math.nan
    return med, float(arr[ranks[0] - 1]), float(arr[ranks[1] - 1])


def ci_text(lo: float, hi: float, n: int, fmt: str = "{:.3g}", unit: str = "") -> str:
    """'95% CI lo-hi' for display, or 'no interval: n runs' when there is none."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"no interval: {int(n)} run{'s' if int(n) != 1 else ''}"
    return f"95% CI {fmt.format(lo)}-{fmt.format(hi)}{unit}"


def cv(values: Iterable[float]) -> float:
    """Coefficient of variation: sample standard deviation / mean; nan for fewer than 2 values or mean 0."""
    arr = _clean(values)
    if arr.size < 2 or np.mean(arr) == 0:
        return math.nan
    return float(np.std(arr, ddof=1) / abs(np.mean(arr)))


def summarize_configs(
    df: pd.DataFrame, group_cols: list[str], value: str = "epoch_s", confidence: float = 0.95
) -> pd.DataFrame:
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


@functools.lru_cache(maxsize=4096)
def _ratio_ranks(na: int, nb: int, confidence: float) -> tuple[int, int] | None:
    """(k_a, k_b): per-side order-statistic ranks whose exact coverages multiply to >= confidence (the two
    samples are independent, so both medians lie in their intervals with that probability). The
    narrowest such pair (largest k_a + k_b, then the higher coverage); chosen from the counts alone,
    never from the data, so the guarantee holds. None when even both full ranges fall short."""
    best, best_key = None, None
    for ka in range(1, (na + 1) // 2 + 1):
        for kb in range(1, (nb + 1) // 2 + 1):
            cov = _coverage(na, ka) * _coverage(nb, kb)
            if cov >= confidence and (best_key is None or (ka + kb, cov) > best_key):
                best, best_key = (ka, kb), (ka + kb, cov)
    return best


def ratio_ci(
    a_values: Iterable[float], b_values: Iterable[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """(median_a / median_b, lo, hi) for positive values (times or throughputs).

    Interval: exact order-statistic intervals [a_lo, a_hi] and [b_lo, b_hi] of each median, at levels
    whose product is >= confidence; when both hold, the true ratio lies in [a_lo / b_hi, a_hi / b_lo].
    Distribution-free and conservative. Needs n_a + n_b large enough: 6 + 7 runs (or 7 + 6) at 95%;
    with fewer, lo and hi are nan.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    a, b = np.sort(_clean(a_values)), np.sort(_clean(b_values))
    if a.size == 0 or b.size == 0 or np.median(b) <= 0:
        return math.nan, math.nan, math.nan
    ratio = float(np.median(a) / np.median(b))
    ranks = _ratio_ranks(int(a.size), int(b.size), confidence)
    if ranks is None or a[0] <= 0 or b[0] <= 0:
        return ratio, math.nan, math.nan
    (ka, kb), na, nb = ranks, a.size, b.size
    return ratio, float(a[ka - 1] / b[nb - kb]), float(a[na - ka] / b[kb - 1])


def difference(lo: float, hi: float) -> str:
    """The one rule for a ratio median_a / median_b of times: "B faster" when the whole interval is
    above 1, "A faster" when below, else (or with no interval) "no clear difference"."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "no clear difference"
    return "B faster" if lo > 1 else "A faster" if hi < 1 else "no clear difference"


def compare(
    a_values: Iterable[float], b_values: Iterable[float], confidence: float = 0.95, margin: float | None = None
) -> dict[str, Any]:
    """A vs B, both times (lower is faster). speedup = median_a / median_b (> 1: B is faster).

    The speedup's interval is ratio_ci's (exact, distribution-free); the difference is difference()'s on it.
    With `margin` (e.g. 0.05), b_not_slower is True when the interval's low end is >= 1 - margin: B is
    at most `margin` slower, with 95% confidence; without an interval it is False.
    Each median's own interval (a_lo..a_hi, b_lo..b_hi) is median_ci's at `confidence`.
    """
    a, b = _clean(a_values), _clean(b_values)
    ma, a_lo, a_hi = median_ci(a, confidence)
    mb, b_lo, b_hi = median_ci(b, confidence)
    speedup, s_lo, s_hi = ratio_ci(a, b, confidence)
    no_ci = math.isnan(s_lo)
    note = f"no interval: {a.size} and {b.size} runs (95% needs 6 on one side, 7 on the other)" if no_ci else None
    not_slower = None if margin is None else (not no_ci and s_lo >= 1 - margin)
    return {
        "median_a": ma,
        "a_lo": a_lo,
        "a_hi": a_hi,
        "n_a": int(a.size),
        "median_b": mb,
        "b_lo": b_lo,
        "b_hi": b_hi,
        "n_b": int(b.size),
        "speedup": speedup,
        "speedup_lo": s_lo,
        "speedup_hi": s_hi,
        "difference": difference(s_lo, s_hi),
        "b_not_slower": not_slower,
        "note": note,
    }


def mixed_hosts_warning(df: pd.DataFrame) -> str | None:
    """A warning when the runs compared come from different hosts or torch versions, else None."""
    if df is None or df.empty:
        return None
    parts = []
    for col, what in (
        ("host_fingerprint", "hosts"),
        ("torch_version", "torch versions"),
        ("code_hash", "versions of the plugin code"),
    ):
        if col in df.columns:
            seen = sorted(str(v) for v in df[col].dropna().unique())
            if len(seen) > 1:
                parts.append(f"{len(seen)} {what} ({', '.join(seen[:4])}{', ...' if len(seen) > 4 else ''})")
    if not parts:
        return None
    return (
        f"these runs mix {' and '.join(parts)}: timings from different machines or versions are not "
        "comparable; filter by host_fingerprint and torch_version to compare like with like"
    )


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
    return {**wait_percentiles(np.sort(waits).tolist()), "n_steps": int(waits.size)}  # one definition with the store


# ---------------------------------------------------------------------------- modes vs sequential

# Fields that describe how models share the machine, not the problem: ignored when matching a baseline.
_MODE_FIELDS = (
    "mode",
    "n_models",
    "lr_spread",
    "model_b",
    "width_b",
    "dual_data",
    "devices",
    "n_stages",
    "micro_batches",
    "world_size",
    "tag",
    "host_fingerprint",
)
# Contenders are grouped by these (shared vs separate data are different configs); their dual-sequential baseline
# is matched on the models only: it trains A then B, loading the epoch for each, whatever dual_data says
_DUAL_FIELDS = ("model_b", "width_b", "dual_data")
_DUAL_MODELS = ("model_b", "width_b")


def speedup_vs_sequential(runs_df: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """For every dual-* (other than dual-sequential) and fused config, its speedup over training the
    same models one after another, measured in the same sweep_id.

    Baselines, matched on every other config field and on host_fingerprint (a Ray sweep spans nodes):
      dual-*             the dual-sequential run with the same model_b/width_b (both models, in turn); shared
                         and separate data are contenders of their own against that one baseline
      fused n_models=N   single-mode runs: N models trained in turn take N x the single epoch time
    NOTE: speedups compare throughput (samples of all models per second, the store's samples_per_s),
    so "N x single" needs no separate run: speedup = fused samples/s / single samples/s. Repeats of
    a config are the samples of stats.compare; the interval is that of the ratio of medians.
    Columns: sweep_id, mode, n_models, the matched fields, n, baseline_mode, baseline_n, speedup,
    speedup_lo, speedup_hi, difference ("faster" | "slower" | "no clear difference"), note.
    """
    cols = [
        "sweep_id",
        "mode",
        "n_models",
        "n",
        "baseline_mode",
        "baseline_n",
        "speedup",
        "speedup_lo",
        "speedup_hi",
        "difference",
        "note",
    ]
    if runs_df is None or runs_df.empty or "samples_per_s" not in runs_df.columns:
        return pd.DataFrame(columns=cols)
    df = runs_df[runs_df["samples_per_s"].fillna(0) > 0]
    if "status" in df.columns:
        df = df[df["status"] == RunStatus.DONE]
    keys = [f.name for f in config_fields() if f.name not in _MODE_FIELDS and f.name in df.columns]
    rows = []
    mode = df["mode"].fillna("").astype(str)
    contenders = df[(mode.str.startswith("dual-") & (mode != "dual-sequential")) | (mode == "fused")]
    # NOTE: a Ray sweep spans nodes: a speedup never divides one host's time by another's
    # NOTE: code_hash too: a user's changed dataset or model is another config (NULL for built-ins)
    group_cols = ["sweep_id", "host_fingerprint", "code_hash", "source", "mode", "n_models", *_DUAL_FIELDS, *keys]
    group_cols = [c for c in dict.fromkeys(group_cols) if c in df.columns]
    for key, group in contenders.groupby(group_cols, dropna=False, sort=True):
        fixed = dict(zip(group_cols, key))
        base_mode = "single" if fixed["mode"] == "fused" else "dual-sequential"
        match = (df["mode"] == base_mode) & matching(
            df, {c: fixed[c] for c in ("sweep_id", "host_fingerprint", "code_hash", *keys) if c in fixed}
        )
        if base_mode == "dual-sequential":
            match &= matching(df, {c: fixed[c] for c in _DUAL_MODELS if c in fixed})
        base = df[match]
        c = compare(1 / base["samples_per_s"], 1 / group["samples_per_s"], confidence) if len(base) else None
        row = {
            **fixed,
            "n": len(group),
            "baseline_mode": base_mode,
            "baseline_n": len(base),
            "speedup": c["speedup"] if c else math.nan,
            "speedup_lo": c["speedup_lo"] if c else math.nan,
            "speedup_hi": c["speedup_hi"] if c else math.nan,
            "difference": (
                {"B faster": "faster", "A faster": "slower"}.get(c["difference"], c["difference"])
                if c
                else "no baseline"
            ),
            "note": c["note"] if c else f"no {base_mode} run with the same settings in sweep {fixed['sweep_id']}",
        }
        rows.append(row)
    out = pd.DataFrame(rows)
    return out if len(out) else pd.DataFrame(columns=cols)


def matching(df: pd.DataFrame, values: dict[str, Any]) -> pd.Series:
    """Rows of df equal to `values` on each of its columns, where missing (None, NaN) equals missing: the one
    definition of "the same settings" that the speedups and the advisor use."""
    mask = pd.Series(True, index=df.index)
    for c, v in values.items():
        missing = v is None or (pd.api.types.is_scalar(v) and pd.isna(v))
        mask &= df[c].isna() if missing else (df[c] == v).fillna(False).astype(bool)
    return mask
