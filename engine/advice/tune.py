"""Tune: find the fastest loader setup for a workload + model within a time budget, by real runs.

    python -m engine tune --workload jpeg --model cnn --budget 10m
    result = tune("jpeg", "cnn", budget_s=600); print(result.render())

The space (`candidates`): sync, prefetch and threads/processes/spdl x workers (past the cores where the probe sees
items wait: `waits_of`), each with prefetch_depth {2, 8} and,
jointly with the workers, intra-op threads {auto (torch's default), 1, what fits: cores - loader threads} (and
transform_threads {auto, 1} where the probe saw a BLAS/OpenMP pool of its own where items load). On a
small CPU box the threads are the biggest lever (issue 20): workers and the model's OpenMP threads share the same
cores.

Ranked by prediction first: the base pipeline's probe (engine/predict/probe.py; cached per host, else measured in a
child process within PROBE_SHARE of the budget) ranks the candidates, and the first rung runs the TOP_K predicted
fastest, then candidate 0 (sync, or the user's `baseline`); candidates the model cannot rank join in a seeded
shuffle. Then successive halving (engine/advice/_halving.py): the fastest 1/ETA of each rung run again with ETA
times the epochs, and the best and candidate 0 run CONFIRM_REPEATS times each, interleaved, for the speedup's 95%
interval. Each trial is a normal run tagged "tune", under one sweep_id. The search in full: docs/predict.md,
"How tune searches".

NOTE: batch_size stays fixed (the base's): it changes the optimisation, not just the speed, so it is the user's
call (`--set batch_size=128`). So do intra-op threads when the base sets them (`--set threads=4`). The
lower-bound calibration is off (bound=false) unless the base turns it on: it costs two extra passes per run and
tuning only needs epoch times.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pandas as pd
from tqdm import tqdm

from engine.advice.baseline import BASELINE_KEYS, confirm_sweep_toml
from engine.advice.baseline import parse as parse_baseline
from engine.advice import memory
from engine.advice._halving import (
    CONFIRM_REPEATS,
    ETA,
    SEARCH_SHARE,
    TIE_MARGIN,
    TOP_K,
    Plan,
    confirm,
    first_rung,
    halve,
    pick,
)
from engine.advice._knobs import siblings, widen
from engine.advice.advisor import describe
from engine.predict import MODES, Prediction, Probe, adjusted, predict
from engine.predict.learned import learned_residuals
from engine.analysis import stats
from engine.config import RunConfig
from engine.errors import ConfigError
from engine.paths import ROOT, Db, calibrations_dir
from engine.run.hostfit import check_machine_all, usable_cores
from engine.run.runner import kill_group, launch
from engine.run.warm import WarmParent, borrowed, run_env
from engine.store import recent_done_runs
from engine.runlog import read_events
from engine.status import RunStatus
from engine.sweeps.local import new_sweep_id

__all__ = [
    "CONFIRM_REPEATS",
    "ETA",
    "MAX_PROCESSES_PER_CORE",
    "MAX_WORKERS",
    "PROBE_MIN_S",
    "PROBE_SHARE",
    "RUNG0_EPOCHS",
    "SEARCH_SHARE",
    "TOP_K",
    "TuneResult",
    "candidates",
    "parse_budget",
    "run_flags",
    "tune",
    "waits_of",
]

log = logging.getLogger(__name__)

RUNG0_EPOCHS = 3  # steady epochs in the first rung: 3, so even a first-rung median has an interval
PROBE_SHARE = 0.1  # of the budget the probe may take (at least PROBE_MIN_S): it plans to fit, quick where it must
PROBE_MIN_S = 6.0  # the least a probe is given: a child's start (torch's import) and a cached probe's read
MAX_WORKERS = 64  # the most threads (or spdl workers) tried where items wait: past it, a user's pool is the limit
MAX_PROCESSES_PER_CORE = 4  # worker processes past the cores only where items wait: each costs a process's memory
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_budget(text: str | float) -> float:
    """'90s', '10m', '1h', '1h30m' or a bare number of seconds -> seconds (> 0)."""
    s = str(text).strip().lower()
    parts = re.findall(r"(\d+(?:\.\d*)?)\s*([hms]?)", s)
    mixed = len(parts) > 1 and not all(u for _, u in parts)  # "1h 30" is ambiguous
    if not s or not re.fullmatch(r"(\s*\d+(?:\.\d*)?\s*[hms]?)+", s) or mixed:
        raise ConfigError("budget", f"'{text}' is not a duration; write e.g. 90s, 10m, 1h or 1h30m")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ConfigError("budget", f"must be more than 0 seconds, got '{text}'")
    return seconds


def candidates(
    base: RunConfig,
    cores: int | None = None,
    default_threads: int | None = None,
    hidden_pools: bool = False,
    waits: float = 0.0,
) -> list[RunConfig]:
    """sync; prefetch and threads/processes/spdl x workers {1, 2, 4, ... <= cores (at least 2)}, each with
    prefetch_depth {2, 8}; each of those with intra-op threads {0 (auto: torch's default), 1, what fits: cores -
    the loader's threads (workers; prefetch's one), at least 1}, without repeats (an explicit count equal to
    `default_threads`, torch's default when known, is auto's twin). A base that sets threads keeps them. Everything
    else (batch_size included) is the base's. cores: usable cores (affinity, cgroup quota) by default.
    hidden_pools: the probe saw a BLAS/OpenMP pool of more than one thread where items load; each candidate then
    also runs with transform_threads=1 (unless the base sets transform_threads).
    waits: the probe's latency per second of loading work (`waits_of`): where items wait, a core keeps 1 + waits
    workers busy, so threads and spdl reach cores x (1 + waits) workers (at most MAX_WORKERS), and processes as far
    as MAX_PROCESSES_PER_CORE x cores (the memory estimate holds them to --max-memory)."""
    cores = cores or usable_cores()
    reach = max(2, cores)
    if waits > 0:  # NOTE: in-flight requests, not cores, set the speed of a read that waits (object storage)
        reach = min(MAX_WORKERS, max(reach, math.ceil(cores * (1 + waits))))
    counts = [w for w in (1, 2, 4, 8, 16, 32, 64, 128) if w <= MAX_WORKERS]
    workers = {
        "threads": [w for w in counts if w <= reach],
        "spdl": [w for w in counts if w <= reach],
        "processes": [w for w in counts if w <= max(2, cores, min(reach, MAX_PROCESSES_PER_CORE * cores))],
    }
    settings = [base.replace(loader="sync", workers=0)]
    for depth in (2, 8):
        settings.append(base.replace(loader="prefetch", workers=0, prefetch_depth=depth))
        settings += [
            base.replace(loader=loader, workers=w, prefetch_depth=depth)
            for loader in ("threads", "processes", "spdl")
            for w in workers[loader]
        ]
    out = [s.replace(threads=t) for s in settings for t in _thread_counts(s, cores, default_threads)]
    if hidden_pools and not base.transform_threads:
        out += [c.replace(transform_threads=1) for c in out]
    return out


def waits_of(probe: Probe | None) -> float:
    """The probe's latency per second of loading work (wall above CPU, over CPU): 0 where loading only works."""
    if not probe:
        return 0.0
    work = probe.get("load_cpu_s") or 0.0
    latency = max(0.0, (probe.get("load_wall_s") or 0.0) - work)
    return MAX_WORKERS if work <= 0 < latency else latency / work if work > 0 else 0.0


def _thread_counts(cfg: RunConfig, cores: int, default: int | None) -> list[int]:
    if cfg.threads:
        return [cfg.threads]
    beside = {"sync": 0, "prefetch": 1}.get(cfg.loader, cfg.workers)  # loader threads that want a core too
    out: list[int] = []
    for t in (0, 1, max(1, cores - beside)):
        if t not in out and (t == 0 or t != default):
            out.append(t)
    return out


@dataclass
class TuneResult:
    sweep_id: str
    budget_s: float
    spent_s: float = 0.0
    stop_reason: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per run: candidate, rung, epoch_s, ...
    configs: list[RunConfig] = field(default_factory=list)
    best_idx: int | None = None
    fastest_idx: int | None = None  # the fastest measured; the best where none within noise of it uses less memory
    comparison: dict[str, Any] = field(default_factory=dict)  # stats.compare(candidate 0's runs, best's), confirmed
    baseline: dict[str, Any] = field(default_factory=dict)  # the user's setup as given: candidate 0
    confirm_rows: list[dict[str, Any]] = field(default_factory=list)  # the interleaved runs of sync and best
    probe: Probe | None = None  # what the predictions came from (engine/predict/probe.py)
    probe_note: str = ""  # where it came from, or why there is none
    probe_s: float = 0.0  # seconds before the first run: the warm parent's imports, the probe, the memory estimate
    probe_took_s: float = 0.0  # the probe's own seconds (from its fork, or its cold start, to its answer)
    predictions: dict[int, Prediction] = field(default_factory=dict)  # candidate -> its predicted steady epoch
    max_memory: int | None = None  # --max-memory: no answer's measured peak PSS is above it
    skipped: list[RunConfig] = field(default_factory=list)  # settings the memory estimate said cannot fit: not run
    footprint: dict[str, Any] | None = None  # the memory estimate: base and per-worker bytes (advice/memory.py)
    knobs: str = ""  # the knobs the model cannot rank that the space varies (_knobs.py)
    wanted: int = 0  # candidates the first rung needs (the ranking's picks, or all)
    full_budget_s: float | None = None  # the budget a full answer takes, estimated (from the predictions)

    @property
    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    @property
    def best(self) -> RunConfig | None:
        return None if self.best_idx is None else self.configs[self.best_idx]

    @property
    def speedup(self) -> float | None:
        return self.comparison.get("speedup")

    def confirm_sweep_toml(self, repeats: int = CONFIRM_REPEATS) -> str:
        """Candidate 0 (your setup, or sync) and the best, `repeats` runs each in a random order, as a sweep."""
        if self.best is None or self.best_idx == 0:
            raise ValueError(
                "nothing to confirm: " + ("no run finished" if self.best is None else "candidate 0 was the fastest")
            )
        ref, best = self.configs[0].to_dict(), self.best.to_dict()
        keys = (*BASELINE_KEYS, "threads")  # both sides name theirs: the base holds the best's
        title = (
            f"{'your setup' if self.baseline else 'sync'} vs the best found by `python -m engine tune` {self.sweep_id}"
        )
        return confirm_sweep_toml(
            best, {k: ref[k] for k in keys}, {k: best[k] for k in keys}, repeats=repeats, title=title
        )

    def render(self) -> str:
        confirming = f" + {len(self.confirm_rows)} confirming runs" if self.confirm_rows else ""
        head = (
            f"tune {self.sweep_id}: {len(self.rows)} runs{confirming} in {self.spent_s:.0f} s of "
            f"{self.budget_s:.0f} s ({self.stop_reason})"
        )
        if self.best is None:
            return "\n".join(
                [
                    head,
                    self._search_line(),
                    *self._runs_table(),
                    "no run finished; check the runs with `python -m engine runs`",
                ]
            )
        best_rows = [r for r in self.rows if r["candidate"] == self.best_idx and r["status"] == RunStatus.DONE]
        c = self.comparison
        last = best_rows[-1]
        lines = [
            head,
            self._search_line(),
            *self._runs_table(),
            f"best: {_describe(self.best)}: epoch {last['epoch_s']:.3f} s (rung {last['rung']}, "
            f"{last['steady_epochs']} steady epochs)",
            *self._tie_lines(),
        ]
        ref = f"your setup ({_describe(self.configs[0])})" if self.baseline else "sync"
        measured = {r["candidate"] for r in self.rows if r["status"] == RunStatus.DONE}
        if len(measured) == 1:  # NOTE: one setting measured is no ranking: never "the fastest" of one
            lines.append(
                f"only {_describe(self.best)} was measured: nothing to compare it with"
                + ("; it is your setup, so there is nothing to confirm" if self.best_idx == 0 else "")
            )
        elif self.best_idx == 0 and (self.baseline or self.best.loader == "sync"):
            was = "was the fastest measured" if self.fastest_idx in (None, 0) else "was within noise of the fastest"
            lines.append(f"{ref} {was}" if self.baseline else f"the sync loader (no background loading) {was}")
        elif c and not math.isnan(c.get("speedup", math.nan)):
            ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
            said = (
                f"best is {c['speedup']:.2f}x faster than {ref}"
                if c["difference"] == "B faster"
                else f"best vs {ref}: {c['speedup']:.2f}x by the medians, {c['difference']}"
            )
            lines.append(
                f"{said} ({ci}; {c['n_a']} + {c['n_b']} interleaved runs, {c['median_a']:.3f} s per "
                f"epoch for {ref.split(' (')[0]})"
            )
        elif self.best_idx != 0:
            lines.append(f"vs {ref}: not confirmed (the budget ran out before the interleaved runs)")
        if self.best_idx != 0 and (not c or math.isnan(c.get("speedup_lo", math.nan))):
            lines.append(
                f"confirm it ({CONFIRM_REPEATS} runs of each, in a random order): add --write-confirm "
                "confirm.toml, then python -m engine sweep confirm.toml"
            )
        lines += memory.answer_lines(
            self.rows + self.confirm_rows,
            self.best_idx,
            self.max_memory,
            len(self.skipped),
            self.footprint,
            "your setup" if self.baseline else "sync",
        )
        lines.append(f"use it: python -m engine run {run_flags(self.best)}")
        return "\n".join([*lines[:2], *self._short_lines(), *lines[2:]])

    def _tie_lines(self) -> list[str]:
        """Where the answer is not the fastest measured: which it was within noise of, and the memory it saves."""
        fastest, best = self.fastest_idx, self.best_idx
        if fastest is None or best is None or fastest == best:
            return []
        row = _last_search_row(self, fastest)
        saves = (
            f"uses less memory ({memory.fmt_bytes(_memory_of(self, best))} vs "
            f"{memory.fmt_bytes(_memory_of(self, fastest))})"
            if _ties_by_bytes(self)
            else f"starts fewer processes ({_processes(self.configs[best])} vs {_processes(self.configs[fastest])}; "
            "no memory was measured: each worker process holds its own copy of the dataset)"
        )
        return [
            f"  within noise of {_describe(self.configs[fastest])} ({row['epoch_s'] if row else math.nan:.3f} s; "
            f"settings within {TIE_MARGIN:.0%} are not told apart by one run each); {saves}"
        ]

    def _short_lines(self) -> list[str]:
        """Where the budget bought fewer candidates than the first rung needs: how many it tried of how many, and
        the budget a full answer takes."""
        tried = len({r["candidate"] for r in self.rows})
        if not self.wanted or tried >= self.wanted:
            return []
        need = f"; a full answer takes about --budget {math.ceil(self.full_budget_s)}s" if self.full_budget_s else ""
        spent = "the predicted fastest first" if self.predictions else "in a shuffled order"
        return [
            f"the budget was short: tried {tried} of the {self.wanted} candidates the first rung needs ({spent}){need}"
        ]

    def _search_line(self) -> str:
        n = len(self.configs)
        if not self.predictions:
            return f"no prediction ({self.probe_note}): successive halving over all {n} candidates"
        knobs = (
            f"; {self.knobs}: not read by the model, so each of those brought its variants and halving decides"
            if self.knobs
            else ""
        )
        return (
            f"ranked {len(self.predictions)} of {n} candidates by prediction ({self.probe_note}); the first rung "
            f"ran the predicted fastest and candidate 0{knobs}"
        )

    def _runs_table(self) -> list[str]:
        """The search's runs, each with its predicted steady epoch beside the measured one."""
        if not self.rows:
            return []
        width = max(len(_describe(self.configs[r["candidate"]])) for r in self.rows)
        out = [f"  {'rung':>4}  {'setting':<{width}}  {'predicted':>9}  {'measured':>8}  limit (predicted)"]
        for r in self.rows:
            measured = "failed" if math.isnan(r["epoch_s"]) else f"{r['epoch_s']:.3f}"
            predicted = "-" if math.isnan(r["predicted_s"]) else f"{r['predicted_s']:.3f}"
            out.append(
                f"  {r['rung']:>4}  {_describe(self.configs[r['candidate']]):<{width}}  {predicted:>9}  "
                f"{measured:>8}  {r['limit'] or '-'}"
            )
        return out


def _describe(cfg: RunConfig) -> str:
    """advisor.describe (which names the intra-op threads when set), and 'not pinned' on CUDA: 'processes, 1 worker,
    depth 2, batch 64, 1 intra-op thread, not pinned'."""
    # NOTE: on CUDA the space turns pin_memory too (_knobs.py): without it two settings read the same
    unpinned = ", not pinned" if str(cfg.device).startswith("cuda") and not cfg.pin_memory else ""
    return describe(cfg.to_dict()) + unpinned


def run_flags(cfg: RunConfig) -> str:
    """The `run` flags that make cfg: workload, model and loader, and every other field that is not the default
    (the --set fields a tune shared included), less tune's own epochs, tag and bound."""
    default, given = RunConfig().to_dict(), cfg.to_dict()
    first = ("workload", "model", "loader", "workers", "prefetch_depth")
    keys = [k for k in first if k in ("workload", "model", "loader") or given[k] != default[k]]
    keys += [k for k in given if k not in first and k not in ("epochs", "tag", "bound") and given[k] != default[k]]
    out = []
    for k in keys:
        flag = "--" + k.replace("_", "-")
        v = given[k]
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + flag[2:])
        elif isinstance(v, (list, tuple)):
            continue  # a list field (devices) is not one flag; the TOML of --write-confirm has it
        else:
            out.append(f"{flag} {v}")
    return " ".join(out)


def tune(
    workload: str,
    model: str,
    *,
    budget_s: float,
    db: Db = None,
    base: dict[str, Any] | None = None,
    progress: bool = True,
    space: list[dict[str, Any]] | None = None,
    eta: int = ETA,
    rung0_epochs: int = RUNG0_EPOCHS,
    confirm_repeats: int = CONFIRM_REPEATS,
    seed: int = 0,
    baseline: str | dict[str, Any] | None = None,
    predicted: bool = True,
    top_k: int = TOP_K,
    max_memory: str | int | None = None,
) -> TuneResult:
    """Rank by prediction, then successive halving within budget_s seconds of wall time (see the module docstring).

    `space` replaces the default candidates: a list of field changes, e.g. [{"loader": "sync"},
    {"loader": "threads", "workers": 2}]. Put sync first: the speedup is reported over candidate 0.
    `baseline`: the user's setup, e.g. "loader=processes,workers=4,batch_size=64": it becomes candidate 0,
    the side the best is confirmed against; its batch_size is every candidate's unless `base` sets one.
    `predicted=False`: no probe, no ranking: successive halving over every candidate (--no-predict).
    `max_memory` ("8G", bytes): no setting whose measured peak PSS is above it is the answer, and settings the
    memory estimate says cannot fit are not run (engine/advice/memory.py).
    """
    given = parse_baseline(baseline)
    cap = memory.parse_size(max_memory)
    cfg0, configs = _configs(workload, model, base, space, given)
    for warning in check_machine_all(
        configs
    ):  # a base this host cannot fit fails here, before the probe and the first run
        log.warning("%s", warning)
    t0 = time.monotonic()
    bar = tqdm(
        total=round(budget_s),
        desc=f"tune {workload}+{model}",
        unit="s",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    rng = random.Random(seed)
    result = TuneResult(
        sweep_id=new_sweep_id("tune"), budget_s=budget_s, configs=configs, baseline=given, max_memory=cap
    )
    # NOTE: one warm parent for the probe and every run (the process's shared one: engine/run/warm.py): the probe
    # forks from it, so torch is imported once
    with bar, borrowed() as warm:
        try:
            bar.set_postfix_str("probe", refresh=True)
            result.probe, result.probe_note, result.probe_took_s = _probe(
                cfg0, db, max(PROBE_MIN_S, budget_s * PROBE_SHARE), predicted, warm
            )
            if result.probe is not None:  # torch's default thread count is known now: an explicit twin of it goes
                # NOTE: the probe's "pools" (hidden_pools() where it loaded), when it records them
                hidden = any(p.get("threads", 1) > 1 for p in result.probe.get("pools") or [])
                cfg0, result.configs = _configs(
                    workload, model, base, space, given, result.probe["default_threads"], hidden, waits_of(result.probe)
                )
            if not space:  # jointly with pin_memory, persistent_workers, the start method, where they can matter
                result.configs, result.knobs = widen(result.configs, cfg0, result.probe)
            if cap is not None:
                bar.set_postfix_str("memory estimate", refresh=True)
                result.configs, result.skipped, result.footprint = memory.within_cap(
                    result.configs, cfg0, cap, max(10.0, budget_s * PROBE_SHARE)
                )
            if result.probe is not None:
                # earlier runs of the pipeline on this host (another tune's, a sweep's) correct the model: prior+runs
                found = learned_residuals(cfg0, recent_done_runs(MODES, db), result.probe)[0]
                result.predictions = {
                    i: adjusted(p, found)
                    for i, c in enumerate(result.configs)
                    if (p := predict(c, result.probe)) is not None
                }
            result.probe_s = time.monotonic() - t0
            _search(result, cfg0, db, t0, bar, rng, eta, rung0_epochs, confirm_repeats, top_k, warm)
        except KeyboardInterrupt:
            result.stop_reason = "interrupted"
            log.warning("tune interrupted; reporting the runs finished so far")
    result.spent_s = time.monotonic() - t0
    _pick_best(result)
    _compare_confirmed(result)
    return result


def _search(
    result: TuneResult,
    cfg0: RunConfig,
    db: Db,
    t0: float,
    bar: tqdm,
    rng: random.Random,
    eta: int,
    rung0_epochs: int,
    confirm_repeats: int,
    top_k: int,
    warm: WarmParent,
) -> None:
    """The rungs, then the confirmation (engine/advice/_halving.py), all forked from one warm parent (as a sweep
    keeps: each run forks instead of importing torch again)."""
    survivors = _first_rung(result, top_k, rng)
    result.wanted = len(survivors)
    epochs_of: dict[int, list[float]] = {}  # candidate -> steady epoch walls of its latest run

    def measure(idx: int, rung: Any, steady: int) -> dict[str, Any]:
        if rung == "confirm":
            cfg = result.configs[idx].replace(epochs=cfg0.warmup_epochs + rung0_epochs)
            return _measure(cfg, db, result, idx, -1, steady, {}, warm)
        row = _measure(
            result.configs[idx].replace(epochs=cfg0.warmup_epochs + steady),
            db,
            result,
            idx,
            rung,
            steady,
            epochs_of,
            warm,
        )
        bar.n = min(round(time.monotonic() - t0), bar.total)
        bar.set_postfix_str(f"rung {rung}, {len(result.rows) + 1} runs", refresh=True)
        return row

    def fits(idxs: list[int], rung: Any, steady: int, limit_s: float) -> bool:
        if rung == "confirm":  # NOTE: like with like: a confirming run is estimated from every run so far
            cfg = result.configs[idxs[0]].replace(epochs=cfg0.warmup_epochs + rung0_epochs)
            return time.monotonic() - t0 + _estimate(result.rows + result.confirm_rows, None, cfg) <= limit_s
        cfgs = [(i, result.configs[i].replace(epochs=cfg0.warmup_epochs + steady)) for i in idxs]
        return (
            time.monotonic()
            - t0
            + sum(_estimate(result.rows, epochs_of.get(i), c, _predicted(result, i, c)) for i, c in cfgs)
            <= limit_s
        )

    # NOTE: the first rung may spend the whole budget: a candidate left untried is worth more than confirming
    # one against too few (a short budget once confirmed a setting 7 + 7 times after measuring only it)
    plan = Plan(
        measure=measure,
        fits=fits,
        figure="epoch_s",
        length=rung0_epochs,
        rng=rng,
        rows=result.rows,
        limit_s=lambda rung: result.budget_s if rung == 0 else result.budget_s * SEARCH_SHARE,
        eta=eta,
    )
    result.stop_reason, left_out = halve(survivors, plan)
    if left_out:
        result.full_budget_s = _full_budget(result, survivors, cfg0, rung0_epochs, eta, confirm_repeats)
        return  # NOTE: no confirming: the budget went to candidates (the answer says so)
    _pick_best(result)
    best = result.best_idx
    if best is None or best == 0 or (result.configs[0].loader != "sync" and not result.baseline):
        return
    stop = confirm(
        best,
        plan,
        confirm_repeats,
        result.budget_s,
        result.confirm_rows,
        "your baseline" if result.baseline else "sync",
    )
    result.stop_reason += f"; {stop}" if stop else ""


def _predicted(result: TuneResult, idx: int, cfg: RunConfig) -> float | None:
    """Candidate idx's predicted steady epoch, scaled by how the finished runs' measured epochs compared with
    theirs (the median ratio), or None where it has no prediction or no finished run had one."""
    p = result.predictions.get(idx)
    ratios = [
        r["epoch_s"] / r["predicted_s"]
        for r in result.rows
        if not math.isnan(r["epoch_s"]) and not math.isnan(r["predicted_s"]) and r["predicted_s"] > 0
    ]
    return p.epoch_s * statistics.median(ratios) if p is not None and ratios else None


def _full_budget(
    result: TuneResult, first: list[int], cfg0: RunConfig, rung0_epochs: int, eta: int, repeats: int
) -> float | None:
    """Seconds a full answer takes, estimated: the first rung's runs, the halving's (the predicted fastest third
    of each rung again, eta times the epochs), and the confirming runs, within the search's share; plus what the
    probe and the start took. None before any run finished."""
    if not any(not math.isnan(r["epoch_s"]) for r in result.rows):
        return None

    def run_s(idx: int, steady: int) -> float:
        cfg = result.configs[idx].replace(epochs=cfg0.warmup_epochs + steady)
        return _estimate(result.rows, None, cfg, _predicted(result, idx, cfg))

    search, alive, steady = sum(run_s(i, rung0_epochs) for i in first), list(first), rung0_epochs
    epoch = {i: (result.predictions[i].epoch_s if i in result.predictions else 0.0) for i in first}
    while len(alive) > 1:
        alive = sorted(alive, key=epoch.__getitem__)[: max(1, math.ceil(len(alive) / eta))]
        steady *= eta
        search += sum(run_s(i, steady) for i in alive) if len(alive) > 1 else 0.0
    best = alive[0]
    confirm = repeats * (run_s(best, rung0_epochs) + run_s(0, rung0_epochs)) if best != 0 else 0.0
    return result.probe_s + max(search / SEARCH_SHARE, search + confirm)


def _first_rung(result: TuneResult, top_k: int, rng: random.Random) -> list[int]:
    """The predicted fastest top_k settings, fastest first, each with its variants in the knobs the model does not
    read (pin, persistent workers, start method: halving decides between them), then candidate 0; then every
    candidate the model could not rank, shuffled (all of them, with no prediction: plain successive halving)."""
    ranked = sorted(result.predictions, key=lambda i: result.predictions[i].epoch_s)  # stable: ties keep their order
    # told apart by what the model reads (prefetch depth it does not)
    configs = result.configs
    first = first_rung(
        ranked,
        lambda i: (configs[i].loader, configs[i].workers, configs[i].threads),
        top_k,
        lambda i, picks: siblings(configs, [i]),
    )
    if result.predictions and 0 not in first:
        first.append(0)
    rest = [i for i in range(len(result.configs)) if i not in result.predictions and i not in first]
    rng.shuffle(rest)
    return first + rest


def _probe(
    cfg0: RunConfig, db: Db, timeout_s: float, wanted: bool, warm: WarmParent | None = None
) -> tuple[Probe | None, str, float]:
    """The base pipeline's probe, from the store's calibrations or measured in a child
    (engine/predict/_probe_child.py): forked from `warm` (tune's warm parent, torch already imported) where it can,
    else a cold Python; a note on where it came from or why there is none; the seconds the child took."""
    if not wanted:
        return None, "--no-predict", 0.0
    if cfg0.mode not in MODES:
        return None, f"the model does not cover mode {cfg0.mode}", 0.0
    calibrations = calibrations_dir(db)
    timeout_s = max(1.0, timeout_s)
    # NOTE: the child plans its measurements to end by 70 % of its share (quick where the full probe cannot fit);
    # what it cannot plan (the dataset's build, the first step's; a cold child's import of torch and its compiler)
    # may overrun on a busy machine, so the guard that stops it stands at 1.5 x the share. Forked warm, the child
    # starts with torch imported: on 2 busy cores the import alone took seconds of the share.
    target, timeout_s = 0.7 * timeout_s, 1.5 * timeout_s
    argv = [str(calibrations), f"{target:.1f}"]
    with tempfile.TemporaryDirectory(prefix="loaderlab-probe-") as tmp:
        work = Path(tmp)
        (work / "stdin").write_text(json.dumps(cfg0.to_dict()))
        if warm is not None:
            warm.ready()  # NOTE: the parent's imports are not the probe's: its share starts at the fork
        started = time.monotonic()
        child = warm.call("engine.predict._probe_child", argv, work, run_env()) if warm is not None else None
        try:
            if child is not None:
                try:
                    child.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    kill_group(child.pid)
                    child.wait()
                    raise
                out = _Out((work / "stdout").read_text(), _tail(work / "stderr.log"))
            else:
                proc = subprocess.run(
                    [sys.executable, "-m", "engine.predict._probe_child", *argv],
                    input=(work / "stdin").read_text(),
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    env=run_env(),
                    timeout=timeout_s,
                    check=False,
                )
                out = _Out(proc.stdout, proc.stderr)
        except subprocess.TimeoutExpired:
            log.warning(
                "tune: the probe took over %.0f s (1.5 x its share of the budget); tuning without a prediction",
                timeout_s,
            )
            return None, f"the probe took over {timeout_s:.0f} s, 1.5 x its share of the budget", timeout_s
    took = time.monotonic() - started
    try:
        answer = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        log.warning("tune: the probe failed (%s); tuning without a prediction", last)
        return None, f"the probe failed: {last[:120]}", took
    where = "cached for this host" if answer["cached"] else "measured now"
    spread = answer["probe"].get("spread") or 0.0
    kind = (
        f"a quick probe (its share of the budget did not fit the full one: ranges ±{spread:.0%})"
        if answer["probe"].get("quick")
        else "the full probe"
    )
    return answer["probe"], f"{kind}, {where}, {took:.0f} s", took


class _Out(NamedTuple):
    stdout: str
    stderr: str


def _tail(path: Path) -> str:
    """A child's stderr file, where it left one."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _configs(
    workload: str,
    model: str,
    base: dict[str, Any] | None,
    space: list[dict[str, Any]] | None,
    given: dict[str, Any],
    default_threads: int | None = None,
    hidden_pools: bool = False,
    waits: float = 0.0,
) -> tuple[RunConfig, list[RunConfig]]:
    """The fields every candidate shares (cfg0) and the candidates: the user's setup, if given, first."""
    batch = {"batch_size": given["batch_size"]} if "batch_size" in given else {}
    fields = {"bound": False, "tag": "tune", **batch, **(base or {}), "workload": workload, "model": model}
    cfg0 = RunConfig.from_dict(fields)
    configs = (
        [cfg0.replace(**changes) for changes in space]
        if space
        else candidates(cfg0, default_threads=default_threads, hidden_pools=hidden_pools, waits=waits)
    )
    if given:
        ref = cfg0.replace(**given)
        configs = [ref] + [c for c in configs if c != ref]
    return cfg0, configs


def _pick_best(result: TuneResult) -> None:
    """Best = fastest among candidates measured in the highest whole rung reached, within the memory cap; of those
    within noise of the fastest, the one that uses the least memory (_halving.pick)."""
    result.fastest_idx = pick(result.rows, "epoch_s", result.max_memory)
    result.best_idx = pick(result.rows, "epoch_s", result.max_memory, _tie_memory(result))


def _tie_memory(result: TuneResult) -> Callable[[dict[str, Any]], float | None]:
    """What pick() breaks a tie on: a run's bytes (_row_memory) where every run of the search has them, else the
    processes its setting starts. NOTE: without the sampler (sample_hz 0) or --max-memory's footprint no run has a
    figure, yet the ordering is known: each worker process holds its own copy of the dataset and of torch, while
    threads share the one process."""
    if _ties_by_bytes(result):
        return lambda r: _row_memory(result, r)
    return lambda r: float(_processes(result.configs[r["candidate"]]))


def _ties_by_bytes(result: TuneResult) -> bool:
    """Whether every run of the search has a memory figure (_row_memory), so ties are broken on bytes."""
    search = [r for r in result.rows if isinstance(r["rung"], int)]
    return bool(search) and all(_row_memory(result, r) is not None for r in search)


def _processes(cfg: RunConfig) -> int:
    """The processes a setting runs: the training process and its loader's worker processes."""
    return 1 + memory.worker_processes(cfg)


def _row_memory(result: TuneResult, row: dict[str, Any]) -> float | None:
    """A run's memory: its measured peak PSS, else the estimate (--max-memory's footprint), else None."""
    if row.get("peak_bytes") is not None:
        return float(row["peak_bytes"])
    return memory.estimate(result.configs[row["candidate"]], result.footprint) if result.footprint else None


def _memory_of(result: TuneResult, idx: int | None) -> float | None:
    """Candidate idx's memory in the answer's rung (its last search run's, _row_memory)."""
    row = _last_search_row(result, idx)
    return _row_memory(result, row) if row else None


def _last_search_row(result: TuneResult, idx: int | None) -> dict[str, Any] | None:
    """Candidate idx's run in the highest rung it ran whole: the run pick() judged it on."""
    rows = [r for r in result.rows if r["candidate"] == idx and isinstance(r["rung"], int) and not r.get("rung_cut")]
    return rows[-1] if rows else None


def _compare_confirmed(result: TuneResult) -> None:
    """stats.compare over the confirmation runs' medians (one number per run: runs are the samples)."""
    if result.best_idx in (None, 0) or not result.confirm_rows:
        return
    runs = [r for r in result.confirm_rows if not math.isnan(r["epoch_s"])]
    sync = [r["epoch_s"] for r in runs if r["candidate"] == 0]
    best = [r["epoch_s"] for r in runs if r["candidate"] == result.best_idx]
    if sync and best:
        result.comparison = stats.compare(sync, best)


def _measure(
    cfg: RunConfig,
    db: Db,
    result: TuneResult,
    idx: int,
    rung: int,
    steady: int,
    epochs_of: dict[int, list[float]],
    warm: Any = None,
) -> dict[str, Any]:
    """One real run of candidate idx (forked from `warm`, an engine.run.warm.WarmParent, when it can); its row for the
    result table (epoch_s is nan when it failed; predicted_s nan when the model had no prediction)."""
    started = time.monotonic()
    meta = {"sweep_id": result.sweep_id, "config_idx": idx, "repeat_idx": rung}
    run = launch(cfg, db=db, meta=meta, warm=warm)
    walls = _steady_walls(run.run_dir) if run.status == RunStatus.DONE else []
    epochs_of[idx] = walls
    epoch_s = statistics.median(walls) if walls else math.nan
    predicted = result.predictions.get(idx)
    log.info(
        "tune rung %d: %s w=%d depth=%d threads=%d -> %s %.3f s",
        rung,
        cfg.loader,
        cfg.workers,
        cfg.prefetch_depth,
        cfg.threads,
        run.status,
        epoch_s,
    )
    return {
        "candidate": idx,
        "rung": rung,
        "steady_epochs": steady,
        "epochs": cfg.epochs,
        "loader": cfg.loader,
        "workers": cfg.workers,
        "prefetch_depth": cfg.prefetch_depth,
        "threads": cfg.threads,
        "batch_size": cfg.batch_size,
        "status": run.status,
        "run_id": run.run_id,
        "epoch_s": epoch_s,
        "predicted_s": predicted.epoch_s if predicted else math.nan,
        "limit": predicted.limit if predicted else None,
        "run_s": time.monotonic() - started,
        "warm": run.warm,
        "peak_bytes": _peak(run.run_dir) if run.status == RunStatus.DONE else None,
    }


def _steady_walls(run_dir: Any) -> list[float]:
    return [
        e["wall_s"]
        for e in read_events(run_dir)
        if e["type"] == "epoch" and not e.get("warmup") and e.get("model_idx", 0) == 0
    ]


def _peak(run_dir: Any) -> int | None:
    """The run's peak PSS of its whole process tree (its summary's peak_rss_bytes), None when unsampled."""
    return next((e.get("peak_rss_bytes") for e in read_events(run_dir) if e["type"] == "summary"), None)


def _estimate(
    rows: list[dict[str, Any]], walls: list[float] | None, cfg: RunConfig, predicted: float | None = None
) -> float:
    """Seconds the next run will take: start-up overhead + epochs x its last epoch time (else its prediction,
    scaled by the finished runs' residual; else a typical one).

    Overhead (process start, imports, dataset build, ingest) is what the finished runs took beyond their epochs."""
    done = [r for r in rows if not math.isnan(r["epoch_s"])]
    if not done:
        return statistics.median(r["run_s"] for r in rows)  # only failures so far: they cost about this much
    overhead = statistics.median(max(0.0, r["run_s"] - r["epoch_s"] * r["epochs"]) for r in done)
    epoch = (
        statistics.median(walls)
        if walls
        else predicted
        if predicted is not None
        else statistics.median(r["epoch_s"] for r in done)
    )
    return overhead + epoch * cfg.epochs
