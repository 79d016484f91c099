"""The advisor: from the runs already stored, the fastest loader setup for a workload + model on this
host, how much it beats the default, why (the bound verdict), and what to measure next.

    advice = advise("jpeg", "cnn")              # host="this" | "any" | a host fingerprint
    print(render_advice(advice))
    Path("next.toml").write_text(advice.next_sweep_toml())   # then: python -m engine sweep next.toml

Only done, single-model runs are ranked, by the median over runs of `epoch_s` (each run's median
steady-state epoch, warm-up excluded). Runs are compared only within one "problem": the same data
and model settings on one machine (PROBLEM_KEYS; the host fingerprint is the machine's, never its thread
settings). The loader settings, the batch size and the intra-op threads (RANKED_FIRST), and any other setting
that varies, are what is ranked. When several problems were measured, the one with the most runs is advised on
(narrow it with `where`). The runs and the ranking are engine.analysis.answer's, as Explore's headline's: the
two name the same config for the same filters (`filters`, Explore's).

The best is compared with sync, or with the user's own setup when they give one (`baseline`, see
engine/advice/baseline.py): the speedup's 95% interval needs 6 + 7 stored runs of the two; with fewer, the
advice proposes the sweep that measures both (`confirm_sweep_toml`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from engine.advice import baseline, memory
from engine.analysis import stats
from engine.analysis.answer import PROBLEM_KEYS, answer_runs, not_yet_distinguishable, ranked_keys, reference_of
from engine.config import RunConfig
from engine.measure import VERDICTS, efficiency_text
from engine.names import WORKER_LOADERS
from engine.paths import Db
from engine.store import done_runs

__all__ = [
    "Advice",
    "CONFIRM_REPEATS",
    "GPU_IDLE_KEYS",
    "KNOB_KEYS",
    "PROBLEM_KEYS",
    "QUIET_GPU",
    "Suggestion",
    "advise",
    "best_word",
    "gpu_line",
    "render_advice",
]

log = logging.getLogger(__name__)

# The loader settings (and batch size) ranked against each other: loader, workers, prefetch_depth, start_method,
# persistent_workers, pin_memory, batch_size; a user's baseline names the same ones
KNOB_KEYS = baseline.BASELINE_KEYS
# 7 repeats per config: with 6 or more a side stats.ratio_ci has a 95% interval (6 + 7 is the least)
CONFIRM_REPEATS = 7


@dataclass(frozen=True)
class Suggestion:
    changes: dict[str, Any]  # fields to change from the best config (mode/n_models for fused)
    reason: str


@dataclass(frozen=True)
class Advice:
    """What advise() found: built once, at the end; render_advice(advice) says it in words."""

    workload: str
    model: str
    host: str  # "this" | "any" | a fingerprint, as asked
    host_label: str  # for messages: "this host (abc123)", "any host"
    message: str | None = None  # set when there is nothing to advise on
    n_runs: int = 0
    problem: dict[str, Any] = field(default_factory=dict)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)  # stats.summarize_configs over the ranked keys
    best: dict[str, Any] = field(default_factory=dict)
    default: dict[str, Any] = field(default_factory=dict)
    comparison: dict[str, Any] = field(default_factory=dict)  # stats.compare(default, best)
    tied: list[dict[str, Any]] = field(default_factory=list)  # configs with no clear difference from the best
    cores: int | None = None  # logical cores of the host the best ran on
    verdict: str | None = None
    verdict_help: str | None = None  # what would help (engine/calibrate/bound.py)
    efficiency: float | None = None
    suggestions: list[Suggestion] = field(default_factory=list)
    warning: str | None = None
    base_config: dict[str, Any] = field(default_factory=dict)  # a best run's full config
    baseline: dict[str, Any] = field(default_factory=dict)  # the user's setup as given; default is its knobs
    gpu_idle: dict[str, float] = field(default_factory=dict)  # the best's GPU idle shares (median); empty on CPU
    memory: str | None = None  # the best's peak PSS against your setup and the cap
    best_run_ids: list[str] = field(default_factory=list)  # the runs the best's figures come from

    @property
    def needs_confirmation(self) -> bool:
        """A baseline was given, it is not the best, and the stored runs give no interval for the speedup."""
        return bool(
            self.baseline
            and self.base_config
            and self.default != self.best
            and math.isnan(self.comparison.get("speedup_lo", math.nan))
        )

    def confirm_sweep_toml(self, repeats: int = CONFIRM_REPEATS) -> str:
        """Your setup and the best, `repeats` runs each in a random order: the runs a 95% interval needs."""
        if not self.base_config:
            raise ValueError(self.message or "nothing measured yet: no sweep to propose")
        return baseline.confirm_sweep_toml(
            self.base_config,
            self.default,
            self.best,
            repeats=repeats,
            title=f"your setup vs the best for {self.workload} + {self.model}, proposed by `python -m engine advise`",
        )

    @property
    def speedup(self) -> float | None:
        return self.comparison.get("speedup")

    def next_sweep_toml(self, repeats: int = CONFIRM_REPEATS) -> str:
        """A SweepConfig TOML: the best config as base, a grid over it and the suggested neighbours, each
        repeated CONFIRM_REPEATS times so that it also confirms (or not) the best with an interval."""
        if not self.base_config:
            raise ValueError(self.message or "nothing measured yet: no sweep to propose")
        defaults = RunConfig().to_dict()
        base = {
            k: self.base_config[k]
            for k in defaults  # in schema order
            if k in self.base_config
            and k != "tag"
            and (self.base_config[k] != defaults[k] or k in ("workload", "model"))
        }
        grid: dict[str, list[Any]] = {}
        for s in self.suggestions:
            for k, v in s.changes.items():
                grid.setdefault(k, [base.get(k, defaults[k])])
                if v not in grid[k]:
                    grid[k].append(v)
        if "workers" in grid:  # sync/prefetch normalise workers to 0; 0 is invalid for threads/processes
            grid["workers"] = [w for w in grid["workers"] if w > 0] or [1]
        if "mode" in grid:
            base["n_models"] = max(2, int(base.get("n_models", 2)))
        for k in grid:
            base.pop(k, None)
        out = [
            f"# next measurements for {self.workload} + {self.model}, proposed by `python -m engine advise`",
            "# run: python -m engine sweep <this file>",
            f'name = "next-{self.workload}-{self.model}"',
            f"repeats = {repeats}",
            "seed = 0",
            "",
            "[base]",
        ]
        out += [f"{k} = {baseline.toml_value(v)}" for k, v in base.items()]
        out += ["", "[grid]"] + [f"{k} = {baseline.toml_value(v)}" for k, v in grid.items()]
        return "\n".join(out) + "\n"


def advise(
    workload: str,
    model: str,
    *,
    host: str = "this",
    db: Db = None,
    where: dict[str, Any] | None = None,
    baseline: str | dict[str, Any] | None = None,
    max_memory: str | int | None = None,
    tags: list[str] | None = None,
    filters: dict[str, Any] | None = None,
) -> Advice:
    """Advice for workload + model from the done runs in the store (see the module docstring).
    `baseline`: the user's setup, e.g. "loader=processes,workers=4,batch_size=64" (engine.advice.baseline.parse).
    `max_memory` ("8G"): a config with a run whose peak PSS was above it is never the best.
    `tags`: only runs whose config tag, or one of the tags given later, is among these (Explore's tag filter).
    `filters`: Explore's other filters (host, tag, date_from, date_to), read as engine/store/explore.py reads them."""
    given = _parse_baseline(baseline)  # bad input fails before the store is read
    cap = memory.parse_size(max_memory)
    runs = _filtered(done_runs(workload, model, db), {**(filters or {}), **({"tag": tags} if tags else {})})
    on_host, label = _on_host(runs, host)
    asked: dict[str, Any] = {"workload": workload, "model": model, "host": host, "host_label": label, "baseline": given}
    runs = _where(runs[on_host], where or {})
    single = runs[runs["mode"] == "single"].dropna(subset=["epoch_s"])
    if single.empty:
        return Advice(**asked, message=_no_runs(workload, model, label, int((~on_host).sum()), given))
    # --- the problem: the most-measured data/model settings on one machine (Explore's headline ranks the same) ---
    every, problem, _ = answer_runs(single)
    keys = ranked_keys(every)
    every = every.assign(**{k: every[k].astype(object).where(every[k].notna(), None) for k in keys})
    mine = memory.drop_over_cap(every, keys, cap)
    if mine.empty:
        return Advice(
            **asked,
            message=f"every measured config of {workload}+{model} {_OVER_CAP} {memory.fmt_bytes(cap)} memory cap",
        )
    table = stats.summarize_configs(mine, keys)
    # --- best, default (sync or the user's setup), their runs ---
    best = dict(zip(keys, _native(table.iloc[0][keys])))
    default = (
        _given_knobs(given, problem["device"], best)
        if given
        else dict(zip(keys, _native([reference_of(table, best)[k] for k in keys])))
    )
    best_runs, default_runs = mine[stats.matching(mine, best)], every[stats.matching(every, default)]
    # --- why, and what to try next ---
    verdict, verdict_help = _verdict(best_runs)
    efficiency = best_runs["efficiency"].dropna()
    # NOTE: the cores of the host the best ran on (the smallest, if --host any pooled several)
    cores = int(best_runs["cores"].dropna().min()) if best_runs["cores"].notna().any() else os.cpu_count()
    measured = runs[stats.matching(runs, problem)]
    return Advice(
        **asked,
        n_runs=len(mine),
        problem=problem,
        table=table,
        best=best,
        default=default,
        comparison=_comparison(default_runs, best_runs),
        tied=_tied(mine, table, best, best_runs, keys),
        cores=cores,
        verdict=verdict,
        verdict_help=verdict_help,
        efficiency=float(efficiency.median()) if len(efficiency) else None,
        # NOTE: an observed loop is the user's script, not a lab pipeline a sweep could queue: `engine tune -- python
        # SCRIPT` tries its other settings (the run page says so)
        suggestions=[] if problem.get("source") == "observed" else _suggest(best, verdict, measured, cores or 2),
        warning=stats.mixed_hosts_warning(mine) or _left_out(single, problem),
        base_config=json.loads(best_runs.sort_values("created_at").iloc[-1]["config_json"]),
        gpu_idle=_gpu_idle(best_runs),
        memory=memory.peak_line(
            _max(best_runs, "peak_rss_bytes"),
            _max(default_runs, "peak_rss_bytes") if default != best else None,
            cap,
            "your setup" if given else describe(default),
        ),
        best_run_ids=sorted(best_runs["run_id"].astype(str)),
    )


def _filtered(runs: pd.DataFrame, filters: dict[str, Any]) -> pd.DataFrame:
    """Explore's filters (engine/store/explore.py filter_sql) on the advisor's runs: host, tag, date_from, date_to."""
    for key, value in filters.items():
        if value in (None, "", [], ()):
            continue
        values = [str(v) for v in ([value] if isinstance(value, str) else value)]
        if key == "tag":
            runs = runs[_tagged(runs, values)]
        elif key in ("host", "workload", "model"):
            runs = runs[runs[key].astype(str).isin(values)]
        elif key in ("date_from", "date_to"):
            day = pd.Timestamp(dt.date.fromisoformat(str(value)))
            runs = (
                runs[runs["created_at"] >= day]
                if key == "date_from"
                else runs[runs["created_at"] < day + pd.Timedelta(days=1)]
            )
        else:
            raise ValueError(f"unknown filter '{key}'; use: host, tag, date_from, date_to")
    return runs


def _parse_baseline(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """The user's setup as given to advise() (whose `baseline` argument hides this module's `baseline`)."""
    return baseline.parse(value)


def _tagged(runs: pd.DataFrame, tags: list[str]) -> pd.Series:
    """Explore's tag filter (engine/store/explore.py filter_sql): the config's tag or any tag given later."""
    wanted = {str(t) for t in tags}
    later = runs["tags"].fillna("").astype(str).map(lambda t: bool(wanted & set(t.split(","))))
    return runs["tag"].isin(wanted) | later


def _where(runs: pd.DataFrame, where: dict[str, Any]) -> pd.DataFrame:
    for k, v in where.items():
        if k not in runs.columns:
            raise ValueError(f"where: '{k}' is not a column of the runs table")
        runs = runs[runs[k] == v]
    return runs


def _no_runs(workload: str, model: str, label: str, others: int, given: dict[str, Any]) -> str:
    hint = f" ({others} on other hosts: --host any)" if others else ""
    return (
        f"no runs for {workload}+{model} on {label}{hint}; try: "
        f"python -m engine sweep examples/loaders.toml (edit its workload and model), or "
        f"python -m engine tune --workload {workload} --model {model} --budget 10m"
        + (f" --baseline {baseline.describe_baseline(given)}" if given else "")
    )


def _given_knobs(given: dict[str, Any], device: Any, best: dict[str, Any]) -> dict[str, Any]:
    """The user's setup as the ranked settings: the loader settings it names, torch's default intra-op threads (a
    DataLoader sets none), and the best's value of anything else ranked. (advise()'s `baseline` argument hides this
    module's `baseline`.)"""
    return {**best, **({"threads": 0} if "threads" in best else {}), **baseline.knobs(given, device=device)}


def _comparison(default_runs: pd.DataFrame, best_runs: pd.DataFrame) -> dict[str, Any]:
    if not len(default_runs):
        return {"n_a": 0, "n_b": len(best_runs), "speedup": math.nan, "speedup_lo": math.nan, "note": "not measured"}
    return stats.compare(default_runs["epoch_s"], best_runs["epoch_s"])


def _verdict(best_runs: pd.DataFrame) -> tuple[str | None, str | None]:
    """The best's most common verdict, and what would help (stored with the runs, else the verdict's own)."""
    verdicts = best_runs["verdict"].dropna()
    verdict = verdicts.mode().iloc[0] if len(verdicts) else None
    helps = (
        best_runs[best_runs["verdict"] == verdict]["verdict_help"].dropna()
        if "verdict_help" in best_runs
        else pd.Series(dtype=object)
    )
    return verdict, helps.mode().iloc[0] if len(helps) else VERDICTS.get(verdict or "")


# ---------------------------------------------------------------------------- in words


_OVER_CAP = "peaked above the"  # the advice when no config fits the memory cap


def render_advice(advice: Advice, cli: bool = True) -> str:
    """The advice in words, as `python -m engine advise` prints it and the dashboard shows it (cli=False: without
    the commands to type, since the dashboard has buttons for them)."""
    if advice.message:  # no runs to advise on, or none under the memory cap (both pages say it so)
        return advice.message if cli or _OVER_CAP in advice.message else _no_runs_here(advice)
    row = advice.table.iloc[0]
    lines = [
        f"{advice.workload} + {advice.model} on {advice.host_label}: {advice.n_runs} done runs, "
        f"{len(advice.table)} configs (single-model runs; {_fmt_problem(advice.problem)})"
    ]
    if advice.warning:
        lines.append(f"warning: {advice.warning}")
    epoch = _fmt_ci(row["median"], row["ci_lo"], row["ci_hi"], row["n"])
    lines.append(
        f"{best_word(int(row['n']))}: {describe(advice.best)}: epoch {epoch}"
        f" over {row['n']} run(s){' (noisy: CV over 10%)' if row['noisy'] else ''}"
    )
    if advice.tied:
        shown = "; ".join(describe(t) for t in advice.tied[:4]) + ("; ..." if len(advice.tied) > 4 else "")
        lines.append(f"not yet distinguishable from the best (its interval spans 1, or too few runs to tell): {shown}")
    c = advice.comparison
    if advice.baseline:
        lines += _vs_baseline_lines(advice, cli)
    elif advice.default == advice.best:
        lines.append("the default is the fastest measured config")
    elif c.get("note") and not c.get("n_a"):
        lines.append(f"vs {describe(advice.default)}: {c['note']}")
    elif not_yet_distinguishable(c["speedup_lo"], c["speedup_hi"]):
        spans = (
            "no 95% interval yet"
            if math.isnan(c["speedup_lo"])
            else f"its 95% CI {c['speedup_lo']:.2f}-{c['speedup_hi']:.2f}x spans 1"
        )
        lines.append(
            f"vs {describe(advice.default)} (epoch {c['median_a']:.3f} s): not yet distinguishable "
            f"({c['n_b']} and {c['n_a']} runs; {spans})"
        )
    else:
        lines.append(
            f"vs {describe(advice.default)}: epoch {c['median_a']:.3f} s, so {c['speedup']:.2f}x "
            f"{'faster' if c['speedup'] > 1 else 'slower'} (95% CI {c['speedup_lo']:.2f}-"
            f"{c['speedup_hi']:.2f}x)"
        )
    if advice.verdict and (advice.efficiency is None or advice.efficiency <= 1):  # above 1: no verdict
        eff = f", efficiency {efficiency_text(advice.efficiency)}" if advice.efficiency is not None else ""
        lines.append(f"verdict: {advice.verdict}{eff}" + (f": {advice.verdict_help}" if advice.verdict_help else ""))
    if advice.gpu_idle:
        lines.append(gpu_line(advice.gpu_idle, advice.best))
    if advice.memory:
        lines.append(advice.memory)
    if advice.suggestions:
        lines.append("try next:")
        lines += [f"  {i}. {_fmt_changes(s.changes)}: {s.reason}" for i, s in enumerate(advice.suggestions, 1)]
        lines.append(
            f"  the sweep repeats the best and each of these {CONFIRM_REPEATS} times: enough runs "
            "for a 95% interval of every speedup"
        )
        if not cli:
            return "\n".join(lines)
        host = "" if advice.host == "this" else f" --host {advice.host}"
        lines.append(
            f"  one command: python -m engine advise --workload {advice.workload} --model {advice.model}"
            f"{host} --write-sweep next.toml && python -m engine sweep next.toml"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- GPU idle


GPU_IDLE_KEYS = ("gpu_idle_share", "gpu_idle_data_share", "gpu_idle_copy_share", "gpu_idle_other_share")
QUIET_GPU = 0.05  # idle below this share of the step is not worth a change (PyTorch's profiler flagged 5% too)


def _gpu_idle(best_runs: pd.DataFrame) -> dict[str, float]:
    """The median of each GPU idle share over the best config's runs that measured it (none on CPU)."""
    have = best_runs.dropna(subset=["gpu_idle_share"]) if "gpu_idle_share" in best_runs else best_runs.iloc[0:0]
    return {k: float(have[k].median()) for k in GPU_IDLE_KEYS if k in have and have[k].notna().any()}


def gpu_line(shares: dict[str, float], best: dict[str, Any]) -> str:
    """What the GPU waits on in the best config, and the change that would cut the biggest part."""
    idle = shares["gpu_idle_share"]
    if idle < QUIET_GPU:
        return f"GPU: idle {idle:.0%} of each step: the loader keeps it fed"
    parts = {k: shares[k] for k in GPU_IDLE_KEYS[1:] if k in shares}
    if not parts:  # stored before the split: the idle share alone
        return f"GPU: idle {idle:.0%} of each step"
    cause = max(parts, key=lambda k: parts[k])
    what = {
        "gpu_idle_data_share": "waits on data",
        "gpu_idle_copy_share": "waits on host-to-device copies",
        "gpu_idle_other_share": "waits on the host (launches, Python, syncs)",
    }[cause]
    if cause == "gpu_idle_data_share":
        fix = (
            "more workers would cut it"
            if best["loader"] in WORKER_LOADERS
            else "a loader with workers (threads or processes) would cut it"
        )
    elif cause == "gpu_idle_copy_share":
        fix = "pinned memory and a copy that overlaps compute (loader prefetch) would hide it"
    else:
        fix = "bigger batches (fewer, larger steps) or one fused program for several models would cut it"
    rest = ", ".join(
        f"{label} {shares[k]:.0%}"
        for k, label in (
            ("gpu_idle_data_share", "data"),
            ("gpu_idle_copy_share", "copies"),
            ("gpu_idle_other_share", "host"),
        )
        if k in shares
    )
    return f"GPU: it {what} {parts[cause]:.0%} of each step; {fix} (idle {idle:.0%}: {rest})"


def best_word(n: int) -> str:
    """'best', or 'fastest so far, unproven: 1 run' when the config's median has no 95 % interval yet: a config
    with fewer runs than stats.MIN_FOR_CI is never called best over configs measured six times or more."""
    if n >= stats.MIN_FOR_CI:
        return "best"
    return f"fastest so far, unproven: {n} run{'' if n == 1 else 's'}"


def _no_runs_here(advice: Advice) -> str:
    """The dashboard's words for a workload + model with no runs to advise on (the CLI's name commands)."""
    return (
        f"No finished single-model runs of {advice.workload} + {advice.model} on {advice.host_label}: queue a "
        "sweep over loaders on the Launch page, or pick 'any' host."
    )


def _vs_baseline_lines(advice: Advice, cli: bool = True) -> list[str]:
    """The advisor's answer for the user's setup: the best's speedup over it with its interval, or the
    sweep that would give one. `advice` has a baseline."""
    c, mine = advice.comparison, f"your setup ({describe(advice.default)})"
    if advice.default == advice.best:
        return [f"{mine} is the fastest measured config ({c.get('n_b', 0)} runs)"]
    if not c.get("n_a"):
        lines = [f"{mine}: no stored runs for this problem yet, so no speedup to report"]
    else:
        ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
        said = (
            f"best is {c['speedup']:.2f}x faster than {mine}"
            if c["difference"] == "B faster"
            else f"best vs {mine}: {c['speedup']:.2f}x by the medians, {c['difference']}"
        )
        lines = [f"{said} ({ci}; {c['n_a']} + {c['n_b']} runs)"]
    if advice.needs_confirmation and cli:
        host = "" if advice.host == "this" else f" --host {advice.host}"
        lines.append(
            f"  confirm it ({CONFIRM_REPEATS} runs of each, in a random order): python -m engine advise "
            f"--workload {advice.workload} --model {advice.model}{host} --baseline "
            f"{baseline.describe_baseline(advice.baseline)} --write-confirm confirm.toml && "
            "python -m engine sweep confirm.toml"
        )
    return lines


# ---------------------------------------------------------------------------- what to try next


def _candidates(best: dict[str, Any], cores: int) -> dict[str, list[Suggestion]]:
    """Neighbouring configs by kind; validity only (measured or not is checked later)."""
    loader, w, depth, bs = best["loader"], int(best["workers"] or 0), int(best["prefetch_depth"]), best["batch_size"]
    out: dict[str, list[Suggestion]] = {
        k: [] for k in ("more", "fewer", "depth", "switch", "batch", "persist", "fused")
    }
    if loader in WORKER_LOADERS:
        # NOTE: worker processes each want a core (and the training process one more): beyond the cores they
        # only contend. Threads may usefully outnumber cores when they wait on I/O, up to twice the cores.
        if w * 2 <= (cores if loader == "processes" else 2 * cores):
            out["more"].append(Suggestion({"workers": w * 2}, "more workers produce batches faster"))
        if w >= 2:
            out["fewer"].append(Suggestion({"workers": w // 2}, "fewer workers cost less start-up and contention"))
        other = "threads" if loader == "processes" else "processes"  # spdl's stages are threads too
        why = "processes sidestep the GIL" if other == "processes" else "threads skip pickling and start-up"
        out["switch"].append(Suggestion({"loader": other}, why))
    else:
        for other in WORKER_LOADERS:
            out["more"].append(Suggestion({"loader": other, "workers": 2}, "move loading off the training thread"))
    if loader != "sync" and depth * 2 <= 1024:
        out["depth"].append(Suggestion({"prefetch_depth": depth * 2}, "a deeper queue absorbs slow batches"))
    if bs * 2 <= 1_000_000:
        out["batch"].append(
            Suggestion(
                {"batch_size": bs * 2},
                "bigger batches mean fewer steps and per-step costs (NOTE: it changes the optimisation too)",
            )
        )
    if loader == "processes" and not best["persistent_workers"]:
        out["persist"].append(Suggestion({"persistent_workers": True}, "keep workers alive between epochs"))
    out["fused"].append(
        Suggestion(
            {"mode": "fused"}, "if you train several models (say an lr sweep), train them as one vmapped program"
        )
    )
    return out


_PRIORITY = {
    "data-bound": ("more", "depth", "switch", "batch"),
    "compute-bound": ("batch", "fused", "fewer"),
    "cpu-bound": ("fewer", "batch", "switch"),
    "oversubscribed": ("fewer", "persist", "batch"),
    "no-overlap": ("more", "depth", "switch"),
    "overhead-bound": ("fewer", "persist", "batch", "switch"),
    None: ("more", "switch", "depth", "batch"),
}


def _suggest(best: dict[str, Any], verdict: str | None, measured: pd.DataFrame, cores: int) -> list[Suggestion]:
    kinds = _candidates(best, cores)
    out: list[Suggestion] = []
    for kind in _PRIORITY.get(verdict, _PRIORITY[None]):
        for s in kinds[kind]:
            if len(out) < 3 and not _is_measured(best, s, measured):
                out.append(s)
    return out


def _tied(
    mine: pd.DataFrame, table: pd.DataFrame, best: dict[str, Any], best_runs: pd.DataFrame, keys: list[str]
) -> list[dict[str, Any]]:
    """Configs whose speedup interval against the best contains 1 (stats.compare's "no clear difference")."""
    out = []
    for _, row in table.iloc[1:].iterrows():
        knobs = dict(zip(keys, _native(row[keys])))
        other = mine[stats.matching(mine, knobs)]["epoch_s"]
        if stats.compare(other, best_runs["epoch_s"])["difference"] == "no clear difference":
            out.append(knobs)
    return out


def _is_measured(best: dict[str, Any], s: Suggestion, measured: pd.DataFrame) -> bool:
    if s.changes.get("mode") == "fused":
        return bool((measured["mode"] == "fused").any())
    knobs = {**best, **s.changes}
    if knobs["loader"] not in WORKER_LOADERS:
        knobs["workers"] = 0
    single = measured[measured["mode"] == "single"]
    return bool(stats.matching(single, knobs).any())


# ---------------------------------------------------------------------------- helpers


def _on_host(runs: pd.DataFrame, host: str) -> tuple[pd.Series, str]:
    """Which runs were on `host` ("this": this machine, whatever threads a run was given; "any"; or a host
    fingerprint), and a label for messages."""
    if host == "any":
        return pd.Series(True, index=runs.index), "any host"
    if host != "this":
        return (runs["host_fingerprint"] == host).fillna(False).astype(bool), f"host {host}"
    # NOTE: imported here: the fingerprint reads torch's thread settings, and the dashboard and the
    # notebook API import this module without loading torch until advice for "this" host is asked
    from engine.measure import MACHINE_KEYS, fingerprint

    me = fingerprint()

    def here(host_json: Any) -> bool:
        facts = json.loads(host_json) if isinstance(host_json, str) and host_json else {}
        return bool(facts) and all(facts.get(k) == me[k] for k in MACHINE_KEYS)

    return runs["host_json"].map(here).astype(bool), f"this host ({me['machine']})"


def _left_out(single: pd.DataFrame, problem: dict[str, Any]) -> str | None:
    """Runs of the same problem under other host fingerprints (other machines):
    never pooled or compared with these, so say they exist."""
    same = stats.matching(single, {k: v for k, v in problem.items() if k != "host_fingerprint"})
    other = single[same & (single["host_fingerprint"] != problem["host_fingerprint"])]
    if other.empty:
        return None
    fps = sorted(str(v) for v in other["host_fingerprint"].dropna().unique())
    return (
        f"{len(other)} run(s) of this problem under {len(fps)} other host fingerprint(s) ({', '.join(fps[:3])}"
        f"{', ...' if len(fps) > 3 else ''}: another machine) are left out, since "
        f"timings are compared only within one fingerprint; --host FINGERPRINT advises on theirs"
    )


def _max(runs: pd.DataFrame, column: str) -> float | None:
    return float(runs[column].max()) if column in runs and runs[column].notna().any() else None


def _native(values: Any) -> list[Any]:
    out = []
    for v in values if isinstance(values, (tuple, list)) else list(values):
        v = v.item() if hasattr(v, "item") else v
        out.append(None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v)
    return out


def describe(knobs: dict[str, Any]) -> str:
    """'threads, 4 workers, depth 2, batch 64': the knobs that matter for this loader."""
    parts = [str(knobs["loader"])]
    if knobs["loader"] in WORKER_LOADERS:
        parts.append(f"{knobs['workers']} worker{'' if knobs['workers'] == 1 else 's'}")
    if knobs["loader"] != "sync":
        parts.append(f"depth {knobs['prefetch_depth']}")
    if knobs["loader"] == "processes" and not knobs.get("persistent_workers", True):
        parts.append("non-persistent")
    if knobs["loader"] == "processes" and knobs.get("start_method") not in (None, "fork"):
        parts.append(str(knobs["start_method"]))
    parts.append(f"batch {knobs['batch_size']}")
    threads = knobs.get("threads")
    if threads:  # 0 (auto): torch's default, said by saying nothing
        parts.append(f"{threads} intra-op thread{'' if threads == 1 else 's'}")
    return ", ".join(parts)


def _fmt_ci(value: float, lo: float, hi: float, n: int, unit: str = " s") -> str:
    fmt = "{:.2f}" if unit == "x" else "{:.3f}"
    return f"{fmt.format(value)}{unit} ({stats.ci_text(lo, hi, n, fmt, unit)})"


def _fmt_changes(changes: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items())


def _fmt_problem(problem: dict[str, Any]) -> str:
    # NOTE: no hash: the machine is named in the host label, and a plugin's code by whether it is one
    short = {k: v for k, v in problem.items() if k not in ("host_fingerprint", "code_hash", "source")}
    if problem.get("code_hash"):
        short["code"] = "one version of your plugin (its most-measured)"
    return ", ".join(f"{k}={v}" for k, v in short.items() if v not in (None, ""))
