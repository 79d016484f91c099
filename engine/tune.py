"""Tune: find the fastest loader setup for a workload + model within a time budget, by real runs.

    python -m engine tune --workload jpeg --model cnn --budget 10m
    result = tune("jpeg", "cnn", budget_s=600); print(result.render())

Successive halving: every candidate (loader x workers x prefetch_depth, see `candidates`) runs with
RUNG0_EPOCHS steady epochs; the fastest 1/ETA survive and run again with ETA times as many epochs;
and so on until one is left or the budget is spent. Within a rung the candidates run in a shuffled
(seeded) order, so a slow spell of the machine does not always hit the same candidate. The search
gets SEARCH_SHARE of the budget; then the best and sync (or the user's own setup, `baseline`: it is
candidate 0 then, and sync stays a candidate) run CONFIRM_REPEATS times each, interleaved
(each pair in a random order), and the speedup's 95% interval comes from those runs' medians
(stats.compare), never from the epochs of one run each. Each run is a normal run (subprocess, RunLog,
store), tagged "tune" and grouped under one sweep_id. Before each run the time it will take is
estimated from the runs so far, and a run that would overrun the budget is not started.

NOTE: batch_size stays fixed (the base's): it changes the optimisation, not just the speed, so it is
the user's call (`--set batch_size=128`). The lower-bound calibration is off (bound=false) unless the
base turns it on: it costs two extra passes per run and tuning only needs epoch times.
"""

from __future__ import annotations

import logging
import math
import os
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from tqdm import tqdm

from engine import baseline as yours
from engine import stats
from engine.advisor import describe
from engine.config import RunConfig
from engine.errors import ConfigError
from engine.hostfit import check_all
from engine.paths import Db
from engine.runlog import read_events
from engine.runner import launch
from engine.status import RunStatus
from engine.sweep import new_sweep_id
from engine.warm import WarmParent

__all__ = ["CONFIRM_REPEATS", "ETA", "RUNG0_EPOCHS", "SEARCH_SHARE", "TuneResult", "candidates", "parse_budget",
           "run_flags", "tune"]

log = logging.getLogger(__name__)

ETA = 3            # keep the best 1/ETA of each rung; survivors run ETA x more epochs
RUNG0_EPOCHS = 3   # steady epochs in the first rung: 3, so even a first-rung median has an interval
SEARCH_SHARE = 0.6   # of the budget for the halving; the rest confirms the best against sync
CONFIRM_REPEATS = 7  # interleaved runs each of the best and sync: 6 + 7 is the least for a 95% ratio interval
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


def candidates(base: RunConfig, cores: int | None = None) -> list[RunConfig]:
    """sync; prefetch and threads/processes x workers {1, 2, 4, ... <= cores (at least 2)}, each with
    prefetch_depth {2, 8}. Everything else (batch_size included) is the base's."""
    cores = max(2, cores or os.cpu_count() or 2)
    workers = [w for w in (1, 2, 4, 8, 16, 32, 64) if w <= cores]
    out = [base.replace(loader="sync", workers=0)]
    for depth in (2, 8):
        out.append(base.replace(loader="prefetch", workers=0, prefetch_depth=depth))
        out += [base.replace(loader=loader, workers=w, prefetch_depth=depth)
                for loader in ("threads", "processes") for w in workers]
    return out


@dataclass
class TuneResult:
    sweep_id: str
    budget_s: float
    spent_s: float = 0.0
    stop_reason: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)   # one per run: candidate, rung, epoch_s, ...
    configs: list[RunConfig] = field(default_factory=list)
    best_idx: int | None = None
    comparison: dict[str, Any] = field(default_factory=dict)    # stats.compare(candidate 0's runs, best's), confirmed
    baseline: dict[str, Any] = field(default_factory=dict)      # the user's setup as given: candidate 0
    confirm_rows: list[dict[str, Any]] = field(default_factory=list)   # the interleaved runs of sync and best

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
            raise ValueError("nothing to confirm: " + ("no run finished" if self.best is None
                                                       else "candidate 0 was the fastest"))
        ref, best = self.configs[0].to_dict(), self.best.to_dict()
        keys = yours.BASELINE_KEYS
        title = (f"{'your setup' if self.baseline else 'sync'} vs the best found by `python -m engine tune` "
                 f"{self.sweep_id}")
        return yours.confirm_sweep_toml(best, {k: ref[k] for k in keys}, {k: best[k] for k in keys}, repeats=repeats,
                                        title=title)

    def render(self) -> str:
        confirming = f" + {len(self.confirm_rows)} confirming runs" if self.confirm_rows else ""
        head = (f"tune {self.sweep_id}: {len(self.rows)} runs{confirming} in {self.spent_s:.0f} s of "
                f"{self.budget_s:.0f} s ({self.stop_reason})")
        if self.best is None:
            return head + "\nno run finished; check the runs with `python -m engine runs`"
        best_rows = [r for r in self.rows if r["candidate"] == self.best_idx and r["status"] == RunStatus.DONE]
        c = self.comparison
        lines = [head, f"best: {describe(self.best.to_dict())}: epoch {best_rows[-1]['epoch_s']:.3f} s "
                       f"(rung {best_rows[-1]['rung']}, {best_rows[-1]['steady_epochs']} steady epochs)"]
        ref = f"your setup ({describe(self.configs[0].to_dict())})" if self.baseline else "sync"
        if self.best_idx == 0 and (self.baseline or self.best.loader == "sync"):
            lines.append(f"{ref} was the fastest measured" if self.baseline
                         else "the sync loader (no background loading) was the fastest measured")
        elif c and not math.isnan(c.get("speedup", math.nan)):
            ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
            said = (f"best is {c['speedup']:.2f}x faster than {ref}" if c["verdict"] == "B faster"
                    else f"best vs {ref}: {c['speedup']:.2f}x by the medians, {c['verdict']}")
            lines.append(f"{said} ({ci}; {c['n_a']} + {c['n_b']} interleaved runs, {c['median_a']:.3f} s per "
                         f"epoch for {ref.split(' (')[0]})")
        elif self.best_idx != 0:
            lines.append(f"vs {ref}: not confirmed (the budget ran out before the interleaved runs)")
        if self.best_idx != 0 and (not c or math.isnan(c.get("speedup_lo", math.nan))):
            lines.append(f"confirm it ({CONFIRM_REPEATS} runs of each, in a random order): add --write-confirm "
                         "confirm.toml, then python -m engine sweep confirm.toml")
        lines.append(f"use it: python -m engine run {run_flags(self.best)}")
        return "\n".join(lines)


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


def tune(workload: str, model: str, *, budget_s: float, db: Db = None,
         base: dict[str, Any] | None = None, progress: bool = True, space: list[dict[str, Any]] | None = None,
         eta: int = ETA, rung0_epochs: int = RUNG0_EPOCHS, confirm_repeats: int = CONFIRM_REPEATS,
         seed: int = 0, baseline: str | dict[str, Any] | None = None) -> TuneResult:
    """Successive halving within budget_s seconds of wall time (see the module docstring).

    `space` replaces the default candidates: a list of field changes, e.g. [{"loader": "sync"},
    {"loader": "threads", "workers": 2}]. Put sync first: the speedup is reported over candidate 0.
    `baseline`: the user's setup, e.g. "loader=processes,workers=4,batch_size=64": it becomes candidate 0,
    the side the best is confirmed against; its batch_size is every candidate's unless `base` sets one.
    """
    given = yours.parse(baseline)
    cfg0, configs = _configs(workload, model, base, space, given)
    for warning in check_all(configs):  # a base this host cannot fit fails here, before the first run
        log.warning("%s", warning)
    result = TuneResult(sweep_id=new_sweep_id("tune"), budget_s=budget_s, configs=configs, baseline=given)
    survivors = list(range(len(result.configs)))
    epochs_of: dict[int, list[float]] = {}   # candidate -> steady epoch walls of its latest run
    t0 = time.monotonic()
    bar = tqdm(total=round(budget_s), desc=f"tune {workload}+{model}", unit="s", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    rung, steady, rng = 0, rung0_epochs, random.Random(seed)
    try:
        # one warm parent for all of tune's runs, as a sweep keeps: each forks instead of importing torch again
        with bar, WarmParent() as warm:
            while survivors:
                rng.shuffle(survivors)
                for idx in survivors:
                    cfg = result.configs[idx].replace(epochs=cfg0.warmup_epochs + steady)
                    # the first run always goes: with nothing finished there is nothing to report
                    if result.rows and time.monotonic() - t0 + _estimate(result.rows, epochs_of.get(idx), cfg) \
                            > budget_s * SEARCH_SHARE:
                        result.stop_reason = "search share of the budget spent"
                        break
                    result.rows.append(_measure(cfg, db, result.sweep_id, idx, rung, steady, epochs_of, warm))
                    bar.n = min(round(time.monotonic() - t0), bar.total)
                    bar.set_postfix_str(f"rung {rung}, {len(result.rows)} runs", refresh=True)
                if result.stop_reason:
                    break
                done = [r for r in result.rows if r["rung"] == rung and not math.isnan(r["epoch_s"])]
                if len(done) <= 1:
                    result.stop_reason = "one candidate left" if done else "every run of the rung failed"
                    break
                ranked = sorted(done, key=lambda r: r["epoch_s"])
                survivors = [r["candidate"] for r in ranked[:max(1, math.ceil(len(ranked) / eta))]]
                if len(survivors) == 1:
                    result.stop_reason = "one candidate left"
                    break
                rung, steady = rung + 1, steady * eta
            _pick_best(result)
            _confirm(result, cfg0.warmup_epochs + rung0_epochs, db, t0, confirm_repeats, rng, warm)
    except KeyboardInterrupt:
        result.stop_reason = "interrupted"
        log.warning("tune interrupted; reporting the runs finished so far")
    result.spent_s = time.monotonic() - t0
    _pick_best(result)
    _compare_confirmed(result)
    return result


def _configs(workload: str, model: str, base: dict[str, Any] | None, space: list[dict[str, Any]] | None,
             given: dict[str, Any]) -> tuple[RunConfig, list[RunConfig]]:
    """The fields every candidate shares (cfg0) and the candidates: the user's setup, if given, first."""
    batch = {"batch_size": given["batch_size"]} if "batch_size" in given else {}
    fields = {"bound": False, "tag": "tune", **batch, **(base or {}), "workload": workload, "model": model}
    cfg0 = RunConfig.from_dict(fields)
    configs = [cfg0.replace(**changes) for changes in space] if space else candidates(cfg0)
    if given:
        ref = cfg0.replace(**given)
        configs = [ref] + [c for c in configs if c != ref]
    return cfg0, configs


def _pick_best(result: TuneResult) -> None:
    """Best = fastest among candidates measured in the highest rung reached."""
    done = [r for r in result.rows if not math.isnan(r["epoch_s"])]
    if done:
        top = max(r["rung"] for r in done)
        result.best_idx = min((r for r in done if r["rung"] == top), key=lambda r: r["epoch_s"])["candidate"]


def _confirm(result: TuneResult, epochs: int, db: Db, t0: float, repeats: int, rng: random.Random,
             warm: Any = None) -> None:
    """Candidate 0 (sync, or the user's baseline) and the best, `repeats` runs each, interleaved, each pair in a
    random order, while the budget lasts: the runs are the samples of the final comparison (like with like, same
    spell)."""
    best = result.best_idx
    if best is None or best == 0 or (result.configs[0].loader != "sync" and not result.baseline):
        return
    scratch: dict[int, list[float]] = {}
    for rep in range(repeats):
        for idx in rng.sample([0, best], 2):
            cfg = result.configs[idx].replace(epochs=epochs)
            if time.monotonic() - t0 + _estimate(result.rows + result.confirm_rows, None, cfg) > result.budget_s:
                result.stop_reason += ("; budget spent while confirming" if result.confirm_rows
                                       else "; no time left to confirm against sync")
                return
            row = _measure(cfg, db, result.sweep_id, idx, -1, epochs - cfg.warmup_epochs, scratch, warm)
            result.confirm_rows.append({**row, "rung": "confirm", "repeat": rep})


def _compare_confirmed(result: TuneResult) -> None:
    """stats.compare over the confirmation runs' medians (one number per run: runs are the samples)."""
    if result.best_idx in (None, 0) or not result.confirm_rows:
        return
    runs = [r for r in result.confirm_rows if not math.isnan(r["epoch_s"])]
    sync = [r["epoch_s"] for r in runs if r["candidate"] == 0]
    best = [r["epoch_s"] for r in runs if r["candidate"] == result.best_idx]
    if sync and best:
        result.comparison = stats.compare(sync, best)


def _measure(cfg: RunConfig, db: Db, sweep_id: str, idx: int, rung: int, steady: int,
             epochs_of: dict[int, list[float]], warm: Any = None) -> dict[str, Any]:
    """One real run of candidate idx (forked from `warm`, an engine.warm.WarmParent, when it can); its row for the
    result table (epoch_s is nan when it failed)."""
    started = time.monotonic()
    run = launch(cfg, db=db, meta={"sweep_id": sweep_id, "config_idx": idx, "repeat_idx": rung}, warm=warm)
    walls = _steady_walls(run.run_dir) if run.status == RunStatus.DONE else []
    epochs_of[idx] = walls
    epoch_s = statistics.median(walls) if walls else math.nan
    log.info("tune rung %d: %s w=%d depth=%d -> %s %.3f s", rung, cfg.loader, cfg.workers, cfg.prefetch_depth,
             run.status, epoch_s)
    return {"candidate": idx, "rung": rung, "steady_epochs": steady, "epochs": cfg.epochs, "loader": cfg.loader,
            "workers": cfg.workers, "prefetch_depth": cfg.prefetch_depth, "batch_size": cfg.batch_size,
            "status": run.status, "run_id": run.run_id, "epoch_s": epoch_s, "run_s": time.monotonic() - started,
            "warm": run.warm}


def _steady_walls(run_dir: Any) -> list[float]:
    return [e["wall_s"] for e in read_events(run_dir)
            if e["type"] == "epoch" and not e.get("warmup") and e.get("model_idx", 0) == 0]


def _estimate(rows: list[dict[str, Any]], walls: list[float] | None, cfg: RunConfig) -> float:
    """Seconds the next run will take: start-up overhead + epochs x its last epoch time (or a typical one).

    Overhead (process start, imports, dataset build, ingest) is what the finished runs took beyond their epochs."""
    done = [r for r in rows if not math.isnan(r["epoch_s"])]
    if not done:
        return statistics.median(r["run_s"] for r in rows)  # only failures so far: they cost about this much
    overhead = statistics.median(max(0.0, r["run_s"] - r["epoch_s"] * r["epochs"]) for r in done)
    epoch = statistics.median(walls) if walls else statistics.median(r["epoch_s"] for r in done)
    return overhead + epoch * cfg.epochs
