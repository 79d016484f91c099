"""The notebook API: LoaderLab from Python, with the CLI's store and the CLI's run subprocesses.

    from engine import lab
    lab.run(workload="mypkg.data:build", model="mypkg.nets:resnet", loader="threads", workers=4)
    df = lab.sweep({"loader": ["threads", "processes"], "workers": [2, 4]}, repeats=7,
                   base={"workload": "mypkg.data:build", "model": "mypkg.nets:resnet"})
    lab.compare(df["run_id"])                  # medians with 95% intervals, speedups over the slowest
    lab.speedups(df)                           # dual-* and fused vs the same models one after another
    lab.advise(workload="mypkg.data:build", model="mypkg.nets:resnet", baseline="loader=processes,workers=4")
    lab.predict(workload="jpeg", model="cnn")  # every setting tune would try, fastest predicted first
    print(lab.code(run_id))                    # the Python that builds that run's loader from your dataset

Every function takes `db=`; without it the store is the CLI's: $LOADERLAB_DB, else the checkout's
data/loaderlab.duckdb (engine.paths), never the notebook's working directory. A plugin module is
imported from the notebook's working directory or PYTHONPATH, as on the CLI. Bad input raises
ConfigError naming the field, before anything runs or is stored. Importing this module does not
import torch: the runs do, in their own processes.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import pandas as pd

from engine import paths
from engine.advice.advisor import advise as _advise, render_advice
from engine.advice.code import code_of_run, snippet
from engine.predict import MODES
from engine.predict.learned import learned_residuals
from engine.advice.tune import candidates, parse_budget, waits_of
from engine.advice.tune import tune as _tune
from engine.analysis.compare import compare_runs
from engine.analysis.stats import speedup_vs_sequential
from engine.config import RunConfig, SweepConfig
from engine.errors import ConfigError
from engine.paths import Db
from engine.run.runner import launch
from engine.run.warm import borrowed
from engine.store import get_run, list_runs, recent_done_runs, run_query
from engine.sweeps.local import run_sweep

__all__ = ["advise", "code", "compare", "db_path", "predict", "run", "runs", "speedups", "sweep", "tune"]

_SUMMARY = (
    "run_id",
    "status",
    "error",
    "workload",
    "model",
    "loader",
    "workers",
    "mode",
    "batch_size",
    "epoch_s",
    "samples_per_s",
    "ttfb_s",
    "bound_s",
    "efficiency",
    "verdict",
    "data_wait_share",
    "peak_rss_bytes",
    "code_hash",
    "sweep_id",
    "created_at",
)


def db_path(db: Db = None) -> str:
    """The store these functions use: `db`, else $LOADERLAB_DB, else the checkout's data/loaderlab.duckdb."""
    return str(paths.db_path(db))


def run(*, db: Db = None, **fields: Any) -> dict[str, Any]:
    """One run of RunConfig `fields` in its own subprocess; its stored summary as a dict.

        s = lab.run(workload="tensor", model="mlp", loader="threads", workers=2, epochs=3)
        s["epoch_s"], s["samples_per_s"], s["efficiency"], s["verdict"]

    A run that fails returns status "failed" and its error; it does not raise. It forks from the process's warm
    parent where an earlier sweep or tune left one running (engine/run/warm.py), and starts cold otherwise."""
    cfg = RunConfig.from_dict(fields)
    with borrowed(enabled=False) as warm:
        result = launch(cfg, db=db, warm=warm)
    row = get_run(result.run_id, db=db) if result.stored else None
    out = {k: row.get(k) for k in _SUMMARY if k in row} if row else {"run_id": result.run_id}
    out.update(status=result.status, error=result.error, stored=result.stored, run_dir=str(result.run_dir))
    return out


def sweep(
    grid: dict[str, list[Any]],
    repeats: int = 1,
    base: dict[str, Any] | None = None,
    progress: bool = True,
    *,
    name: str = "lab",
    seed: int = 0,
    db: Db = None,
) -> pd.DataFrame:
    """The product of `grid` (field -> values) over `base`, each config `repeats` times in a seeded random order
    (the CLI's sweep), with a progress bar. Returns the sweep's runs, one row each.

        df = lab.sweep({"loader": ["sync", "threads"]}, repeats=7, base={"workload": "tensor"})"""
    cfg = SweepConfig.from_dict({"name": name, "grid": grid, "base": base or {}, "repeats": repeats, "seed": seed})
    result = run_sweep(cfg, db=db, progress=progress)
    return runs(db=db, sweep_id=result.sweep_id)


def runs(*, db: Db = None, limit: int = 10_000, **filters: Any) -> pd.DataFrame:
    """Stored runs, newest first, as a DataFrame; `filters` are columns of the runs table:
    a value, a list of values, or None for NULL.

        lab.runs(workload="tensor", loader=["threads", "processes"], status="done")"""
    return list_runs(db=db, limit=limit, filters=filters or None)


def compare(what: Iterable[str] | str | pd.DataFrame, *, by: list[str] | None = None, db: Db = None) -> pd.DataFrame:
    """Each distinct config among the runs: n, median epoch_s with its exact 95% interval, and its speedup over
    the slowest config with the interval and difference of engine.analysis.stats.compare (the CLI's and the advisor's).

    `what`: run ids, a read-only SQL query returning run_id, or a DataFrame of runs. `by`: the fields that
    tell configs apart (default: the config fields that differ among the runs). Runs of other hosts or
    plugin code are other configs, and get no speedup over a reference of another host or code.

        lab.compare(lab.runs(workload="tensor", status="done"))
        lab.compare("SELECT run_id FROM runs WHERE sweep_id = 'lab-...'")"""
    return compare_runs(_runs_of(what, db), by)


def speedups(what: Iterable[str] | str | pd.DataFrame | None = None, *, db: Db = None) -> pd.DataFrame:
    """Each dual-* and fused config's speedup over training the same models one after another, with the 95%
    interval and difference of engine.analysis.stats.compare: dual-* against dual-sequential, fused xN against N single
    runs, matched within one sweep, host fingerprint and plugin code (engine.analysis.stats.speedup_vs_sequential).

    `what`: as for compare (run ids, a query, a DataFrame); default: every done run in the store.

        lab.speedups(lab.sweep({"mode": ["dual-sequential", "dual-processes"]}, repeats=7, base={...}))"""
    runs_df = list_runs(db=db, limit=1_000_000, filters={"status": "done"}) if what is None else _runs_of(what, db)
    return speedup_vs_sequential(runs_df)


def advise(
    *,
    workload: str,
    model: str,
    baseline: str | dict[str, Any] | None = None,
    host: str = "this",
    where: dict[str, Any] | None = None,
    max_memory: str | int | None = None,
    db: Db = None,
) -> dict[str, Any]:
    """The advisor's answer as data: best config, its speedup over sync or your `baseline` with the interval,
    the configs tied with it, the verdict, what to try next, and the sweeps that would confirm it.

        a = lab.advise(workload="tensor", model="mlp", baseline="loader=processes,workers=4,batch_size=64")
        a["speedup"], a["speedup_lo"], a["speedup_hi"], a["tied"], a["confirm_sweep_toml"]"""
    a = _advise(workload, model, host=host, db=db, where=where, baseline=baseline, max_memory=max_memory)
    c = a.comparison
    return {
        "workload": workload,
        "model": model,
        "message": a.message,
        "n_runs": a.n_runs,
        "problem": a.problem,
        "best": a.best,
        "reference": a.default,
        "baseline": a.baseline,
        "speedup": _num(c.get("speedup")),
        "speedup_lo": _num(c.get("speedup_lo")),
        "speedup_hi": _num(c.get("speedup_hi")),
        "comparison": c,
        "tied": a.tied,
        "verdict": a.verdict,
        "efficiency": a.efficiency,
        "warning": a.warning,
        "table": a.table,
        "suggestions": [{"changes": s.changes, "reason": s.reason} for s in a.suggestions],
        "needs_confirmation": a.needs_confirmation,
        "memory": a.memory,
        "code": snippet({**a.base_config, **a.best}, f"the best for {workload} + {model}") if a.base_config else None,
        "next_sweep_toml": a.next_sweep_toml() if a.base_config else None,
        "confirm_sweep_toml": a.confirm_sweep_toml() if a.base_config and a.default != a.best else None,
        "text": render_advice(a),
    }


def tune(
    *,
    workload: str,
    model: str,
    budget: str | float = "10m",
    baseline: str | dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
    progress: bool = True,
    db: Db = None,
    **options: Any,
) -> dict[str, Any]:
    """Successive halving over loader settings within `budget` ("90s", "10m", seconds), then the best confirmed
    against sync or your `baseline` by interleaved runs (engine.advice.tune). The answer as data.

        t = lab.tune(workload="tensor", model="mlp", budget="5m", baseline="loader=processes,workers=4")
        t["best"], t["speedup"], (t["speedup_lo"], t["speedup_hi"]), t["runs"]"""
    r = _tune(
        workload,
        model,
        budget_s=parse_budget(budget),
        db=db,
        base=base,
        progress=progress,
        baseline=baseline,
        **options,
    )
    c = r.comparison
    return {
        "sweep_id": r.sweep_id,
        "best": r.best.to_dict() if r.best else None,
        "reference": r.configs[0].to_dict(),
        "baseline": r.baseline,
        "speedup": _num(c.get("speedup")),
        "speedup_lo": _num(c.get("speedup_lo")),
        "speedup_hi": _num(c.get("speedup_hi")),
        "comparison": c,
        "stop_reason": r.stop_reason,
        "spent_s": r.spent_s,
        "runs": r.table,
        "confirm_runs": r.confirm_rows,
        "confirm_sweep_toml": r.confirm_sweep_toml() if r.best_idx else None,
        "text": r.render(),
        "code": snippet(r.best, f"the best found by tune {r.sweep_id}") if r.best else None,
    }


def code(run_id: str | None = None, *, db: Db = None, **setting: Any) -> str:
    """The Python that builds a stored run's loader (or a `setting`'s, as RunConfig fields) from your `dataset`,
    bound to `loader`: what to paste into your training script.

        print(lab.code("20250101-120000-a1b2c3"))
        print(lab.code(loader="processes", workers=4, threads=1))"""
    if run_id is not None:
        return code_of_run(run_id, db=db)
    return snippet(RunConfig.from_dict(setting), "the setting " + ", ".join(f"{k}={v}" for k, v in setting.items()))


def predict(*, db: Db = None, **fields: Any) -> pd.DataFrame:
    """The predicted steady epoch of RunConfig `fields`' setting (one row, when `loader` is given) or of every
    setting tune would try, fastest first: the setting's fields, predicted_epoch_s, its range (predicted_lo_s,
    predicted_hi_s), samples_per_s, the limit, predicted_from ('prior+runs' where the store holds earlier runs of
    the pipeline on this host: their residuals adjust it), same_as and apart (engine/predict/forecast.py rows).
    The probe is the store's cached one for this pipeline on this host, else measured now (a few seconds, in
    this process) and cached beside the store; the store itself is not opened.

        lab.predict(workload="jpeg", model="cnn")                                   # ranked
        lab.predict(workload="jpeg", model="cnn", loader="processes", workers=2, threads=1)"""
    # NOTE: imported here: the probe needs torch, which importing lab does not load
    from engine.predict.forecast import cached_or_new, rows  # noqa: PLC0415

    cfg = RunConfig.from_dict(fields)
    if cfg.mode not in MODES:
        raise ConfigError("mode", f"predict models the {', '.join(MODES)} mode only, not '{cfg.mode}'")
    probe, _ = cached_or_new(cfg, paths.calibrations_dir(db))
    space = (
        [cfg]
        if "loader" in fields
        else candidates(cfg, default_threads=probe["default_threads"], waits=waits_of(probe))
    )
    return pd.DataFrame(rows(space, probe, learned_residuals(cfg, recent_done_runs(MODES, db), probe)[0]))


# ---------------------------------------------------------------------------- helpers


def _runs_of(what: Any, db: Db) -> pd.DataFrame:
    if isinstance(what, pd.DataFrame):
        return what
    if isinstance(what, str) and len(what.split()) > 1:  # a query: run ids hold no spaces
        found = run_query(what, db=db).df
        if "run_id" not in found.columns:
            raise ValueError("compare: the query must return a run_id column, e.g. SELECT run_id FROM runs WHERE ...")
        what = found["run_id"].tolist()
    ids = [what] if isinstance(what, str) else [str(i) for i in what]
    found = list_runs(db=db, limit=max(1, len(ids)), filters={"run_id": ids})
    missing = sorted(set(ids) - set(found["run_id"]))
    if missing:
        raise ValueError(f"compare: no run {missing[0]!r} in the store {db_path(db)}; list them with lab.runs()")
    return found


def _num(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
