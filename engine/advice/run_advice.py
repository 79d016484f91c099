"""One run's advice from what was measured: the setting to try, named, and whether its steady epochs agree.

    advice = run_advice(run_id)      # RunAdvice(suggestion=..., spread=...)

A verdict says what limits a run in general words ("use processes"); the suggestion here names a setting: the
fastest setting measured for the run's problem (engine.analysis.answer: same data, model and machine) when it beats
this run's, else the predicted best (engine/predict/model.py, from the run's probe) with its intra-op threads. So a
gil-contention run whose processes at torch's default threads measured slower, and only processes at 1 intra-op
thread won, is told the latter. `spread` says so when the run's steady epochs differ widely (one figure hides it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from engine.advice.advisor import describe
from engine.analysis import stats
from engine.analysis.answer import PROBLEM_KEYS, not_yet_distinguishable, ranked_keys
from engine.config import RunConfig
from engine.names import WORKER_LOADERS
from engine.paths import Db, calibrations_dir
from engine.predict import load_probe, probe_path, rank
from engine.store import done_runs, get_epochs, get_run

__all__ = ["SPREAD_FLAG", "RunAdvice", "run_advice"]

SPREAD_FLAG = 1.5  # slowest / fastest steady epoch above this: the run's median hides two speeds


@dataclass(frozen=True)
class RunAdvice:
    suggestion: str | None = None  # names a setting (measured better, or predicted best), or None: nothing to name
    spread: str | None = None  # the steady epochs' spread, when it is wide


def run_advice(run_id: str, db: Db = None) -> RunAdvice:
    """The advice for one stored run (see the module docstring); empty for an unknown run."""
    run = get_run(run_id, db)
    if run is None:
        return RunAdvice()
    return RunAdvice(suggestion=_measured(run, db) or _predicted(run, db), spread=_spread(run_id, db))


def _knobs(values: dict[str, Any]) -> dict[str, Any]:
    knobs = {
        k: values.get(k)
        for k in (
            "loader",
            "workers",
            "prefetch_depth",
            "start_method",
            "persistent_workers",
            "pin_memory",
            "batch_size",
            "threads",
        )
    }
    if knobs["loader"] not in WORKER_LOADERS:
        knobs["workers"] = 0
    return knobs


def _measured(run: dict[str, Any], db: Db) -> str | None:
    """The fastest setting measured for this run's problem, when it is not this run's own."""
    if not run.get("workload") or not run.get("model") or run.get("mode") != "single":
        return None
    runs = done_runs(run["workload"], run["model"], db)
    runs = runs[(runs["mode"] == "single")].dropna(subset=["epoch_s"])
    runs = runs[stats.matching(runs, {k: run.get(k) for k in PROBLEM_KEYS if k in runs})]
    if runs.empty:
        return None
    keys = ranked_keys(runs)
    runs = runs.assign(**{k: runs[k].astype(object).where(runs[k].notna(), None) for k in keys})
    table = stats.summarize_configs(runs, keys)
    if len(table) < 2:
        return None
    best = {k: _native(table.iloc[0][k]) for k in keys}
    mine = {k: _native(run.get(k)) for k in keys}
    best_runs, my_runs = runs[stats.matching(runs, best)], runs[stats.matching(runs, mine)]
    if best == mine or my_runs.empty:
        return (
            f"This setting is the fastest of the {len(table)} measured for this problem "
            f"({len(best_runs)} run{'' if len(best_runs) == 1 else 's'})."
        )
    c = stats.compare(my_runs["epoch_s"], best_runs["epoch_s"])
    name = describe(_knobs(best)) + ("" if best.get("threads") else ", torch's default intra-op threads")
    if not_yet_distinguishable(c["speedup_lo"], c["speedup_hi"]):
        return (
            f"Measured faster here so far: {name}, {stats.median_ci(best_runs['epoch_s'])[0]:.3g} s an epoch "
            f"against this setting's {c['median_a']:.3g} s (not yet distinguishable: {c['n_b']} and {c['n_a']} "
            "runs)."
        )
    return (
        f"Try {name}: measured {c['speedup']:.2f}x faster than this setting (95% CI {c['speedup_lo']:.2f}-"
        f"{c['speedup_hi']:.2f}x, {c['n_b']} and {c['n_a']} runs)."
    )


def _predicted(run: dict[str, Any], db: Db) -> str | None:
    """The predicted best setting from the run's probe (the loaders at 1..cores workers, each at 1 intra-op thread
    and at torch's default), named with its intra-op threads; None without a probe."""
    try:
        cfg = RunConfig.from_dict(run["config"])
        host = json.loads(run.get("host_json") or "{}")
    except (ValueError, TypeError):
        return None
    machine = host.get("machine")
    device = "cuda" if str(cfg.device).startswith("cuda") else "cpu"
    probe = load_probe(probe_path(calibrations_dir(db), cfg, machine, device)) if machine else None
    if not probe:
        return None
    cores = int(probe.get("cores") or host.get("cores") or 2)
    candidates = []
    for loader in ("sync", "prefetch", "threads", "processes"):
        for workers in range(1, cores + 1) if loader in WORKER_LOADERS else (0,):
            for threads in (0, 1):
                candidates.append(
                    RunConfig.from_dict({**cfg.to_dict(), "loader": loader, "workers": workers, "threads": threads})
                )
    ranked = rank(candidates, probe)
    if not ranked:
        return None
    best, p = ranked[0]
    default = probe.get("default_threads")  # an older probe may not say
    name = describe(_knobs(best.to_dict()))
    if not best.threads:
        name += f", torch's default intra-op threads ({default})" if default else ", torch's default intra-op threads"
    return f"Not measured yet; predicted best: {name}, about {p.epoch_s:.3g} s an epoch ({p.limit})."


def _spread(run_id: str, db: Db) -> str | None:
    """'Its steady epochs spread 3.7x (0.6-2.2 s): ...' when slowest / fastest is above SPREAD_FLAG."""
    epochs = get_epochs(run_id, db)
    if epochs.empty or "warmup" not in epochs:
        return None
    steady = epochs[~epochs["warmup"].fillna(False).astype(bool)]
    steady = steady[(steady["model_idx"] == 0) & (steady["rank"] == 0)]["wall_s"].dropna()
    if len(steady) < 2 or steady.min() <= 0:
        return None
    ratio = float(steady.max() / steady.min())
    if ratio <= SPREAD_FLAG:
        return None
    return (
        f"Its steady epochs spread {ratio:.1f}x ({steady.min():.3g}-{steady.max():.3g} s): the median above hides "
        "two speeds, so repeat the run, on a quieter machine, before trusting its figures."
    )


def _native(v: Any) -> Any:
    v = v.item() if hasattr(v, "item") else v
    return None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v
