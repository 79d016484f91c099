"""A script's tune read back for the dashboard: its trials (the runs under its id) and its candidates ranked by
seconds per batch, each with its median and 95 % interval from engine.analysis.stats, as Explore ranks the lab's
configs. A candidate none of whose trials finished is a row with its first error; one never tried is a row too.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from engine.analysis import stats
from engine.paths import Db
from engine.store.connect import connect
from engine.store.tunes import tune_answers

__all__ = ["setting_text", "tune_ranking", "tune_trials"]

_TRIAL_COLUMNS = [
    "trial",
    "run_id",
    "status",
    "error",
    "config_idx",
    "repeat_idx",
    "created_at",
    "s_per_batch",
    "peak_bytes",
    "gpu_idle_share",
    "trial_rung",
    "setting",
]


def _settings(tune: dict[str, Any] | None) -> list[Any]:
    try:
        found = json.loads(tune["settings_json"]) if tune else []
    except (TypeError, ValueError):
        return []
    return found if isinstance(found, list) else []


def setting_text(settings: list[Any], idx: Any) -> str:
    """'num_workers=2, pin_memory=True': a candidate by what it changes from the script's own (index 0), which reads
    'the script's own (...)'; 'candidate 3' where the tune's settings are not stored (yet)."""
    if idx is None or (isinstance(idx, float) and math.isnan(idx)):
        return "no candidate recorded"
    idx = int(idx)
    if not 0 <= idx < len(settings):
        return f"candidate {idx}"
    mine, base = settings[idx], settings[0]
    if not isinstance(mine, dict):
        return str(mine)
    if idx == 0:
        return "the script's own (" + ", ".join(f"{k}={v}" for k, v in mine.items() if v is not None) + ")"
    base = base if isinstance(base, dict) else {}
    changed = [f"{k}={v}" for k, v in mine.items() if base.get(k) != v]
    return ", ".join(changed) or "the script's own setting again"


def _summary_value(summary_json: Any, key: str) -> Any:
    try:
        summary = json.loads(summary_json) if summary_json else {}
    except ValueError:
        return None
    return summary.get(key) if isinstance(summary, dict) else None


def tune_trials(tune_id: str, db: Db = None) -> pd.DataFrame:
    """The tune's trials in the order they ran (trial 1, 2, ...), one row per stored run, with its figure."""
    tunes = tune_answers(db, tune_id)
    settings = _settings(tunes[0] if tunes else None)
    with connect(db, read_only=True) as conn:
        runs = conn.execute(
            "SELECT run_id, status, error, config_idx, repeat_idx, created_at, summary_json FROM runs "
            "WHERE sweep_id = ? AND NOT deleted ORDER BY created_at, config_idx, repeat_idx, run_id",
            [tune_id],
        ).df()
    if runs.empty:
        return pd.DataFrame(columns=_TRIAL_COLUMNS)
    runs.insert(0, "trial", range(1, len(runs) + 1))
    for name in ("s_per_batch", "peak_bytes", "gpu_idle_share"):  # null where not measured (GPU idle on CPU)
        found = [_summary_value(s, name) for s in runs["summary_json"]]
        runs[name] = [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan for v in found]
    runs["trial_rung"] = [str(_summary_value(s, "trial_rung")) for s in runs["summary_json"]]
    runs["setting"] = [setting_text(settings, i) for i in runs["config_idx"]]
    return runs[_TRIAL_COLUMNS]


def _interval(lo: float, hi: float, n: int) -> str:
    if n == 0:
        return "no finished trial"
    if n == 1:
        return "one run: no interval"
    return stats.ci_text(lo, hi, n, unit=" s")


def tune_ranking(tune_id: str, db: Db = None) -> pd.DataFrame:
    """One row per candidate: ranked by the median seconds per batch of its finished trials (fastest first), then
    the candidates whose every trial failed (with the first error), then those never tried."""
    tunes = tune_answers(db, tune_id)
    tune = tunes[0] if tunes else None
    settings = _settings(tune)
    trials = tune_trials(tune_id, db)
    best = tune.get("best_config_idx") if tune else None
    idxs = sorted({int(i) for i in trials["config_idx"].dropna()} | set(range(len(settings))))
    rows = []
    for idx in idxs:
        mine = trials[trials["config_idx"] == idx]
        done = mine[(mine["status"] == "done") & mine["s_per_batch"].notna()]["s_per_batch"]
        failed = mine[mine["status"] != "done"]
        med, lo, hi = stats.median_ci(done) if len(done) else (math.nan, math.nan, math.nan)
        ok = mine[mine["status"] == "done"]
        peak, idle = (
            float(ok[c].median()) if ok[c].notna().any() else math.nan for c in ("peak_bytes", "gpu_idle_share")
        )
        errors = [str(e) for e in failed["error"] if isinstance(e, str) and e]
        first_error = errors[0] if errors else ("failed without an error message" if len(failed) else "")
        call = "the answer" if best is not None and idx == best else ("the script's own" if idx == 0 else "")
        rows.append(
            {
                "config_idx": idx,
                "setting": setting_text(settings, idx),
                "trials": len(mine),
                "finished": len(done),
                "failed": len(failed),
                "median_s": med,
                "lo_s": lo,
                "hi_s": hi,
                "peak_bytes": peak,
                "gpu_idle_share": idle,
                "interval": _interval(lo, hi, len(done)) if len(mine) else "not tried",
                "first_error": first_error,
                "call": call,
                "group": 0 if len(done) else (1 if len(mine) else 2),
            }
        )
    out = pd.DataFrame(
        rows,
        columns=[
            "config_idx",
            "setting",
            "trials",
            "finished",
            "failed",
            "median_s",
            "lo_s",
            "hi_s",
            "peak_bytes",
            "gpu_idle_share",
            "interval",
            "first_error",
            "call",
            "group",
        ],
    )
    out = out.sort_values(["group", "median_s", "config_idx"], na_position="last", kind="stable")
    out.insert(0, "rank", range(1, len(out) + 1))
    return out.drop(columns="group").reset_index(drop=True)
