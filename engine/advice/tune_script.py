"""Tune a training script as it is: `python -m engine tune [--budget 90s] -- python train.py ARGS`.

    result = tune_script(["python", "train.py"], budget_s=90); print(result.render())

The script runs once per trial, unchanged, under the observer (engine/observe/_boot.py), with LOADERLAB_TRIAL=1 set
so it can skip its checkpoints and logging (engine/observe/_trial.py says how a trial is told its setting and when
it stops). Its output goes to a file per trial; a trial that fails is one row with its first error.

1. The first trial runs the script's own setting for a few seconds (FIRST_SHARE of the budget, within FIRST_S): the
   loader that delivered the most batches is the one tuned (training, not validation), named by file and line, and
   the batches it delivered are every later trial's length (STEPS_MIN at least).
2. The candidates (`candidates`): that DataLoader's num_workers x prefetch_factor x the start method x intra-op
   threads, with persistent workers (and pin_memory on CUDA); for a map-style dataset, the lab's threads loader too
   (engine/observe/threads_loader.py). Ranked by the lab's model fed from the first trial
   (engine/advice/_script_predict.py), then tune's own search (engine/advice/_halving.py): successive halving, then
   the best and the script's own setting in interleaved pairs for the speedup's 95% interval. In full:
   docs/pipeline.md, "Tune your script as it is".
3. The answer is the change to make: the DataLoader(...) call as it should read, a unified diff against the
   script's own source, with the speedup and its interval and the peak memory beside the script's.
4. Each trial is a run in the store before this returns (engine/advice/_script_trials.py: sweep_id = the tune's id,
   config_idx = the candidate, repeat_idx = its trials so far, tag "tune"), and the answer is the tune's row
   (engine.store.record_tune: its settings, best, speedup and interval, diff and rendered answer).

A trial's figure: the tuned loader's seconds per batch after its first, later epochs' start-up included. A setting
under which an epoch's samples differ from the script's own changes what it computes: a row, never the answer.
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from engine.advice import memory
from engine.advice._script_change import change
from engine.advice._script_predict import probe_of, rank_settings
from engine.advice._script_trials import Trials
from engine.advice.tune import MAX_PROCESSES_PER_CORE, MAX_WORKERS, waits_of
from engine.advice._halving import CONFIRM_REPEATS, SEARCH_SHARE, TOP_K, Plan, confirm, first_rung, halve, pick
from engine.analysis import stats
from engine.measure import usable_cpus
from engine.observe import ENV_SECONDS, LOADER_ARGS
from engine.errors import StoreBusy
from engine.paths import Db
from engine.run.observed import script_command
from engine.store import record_tune

__all__ = ["FIRST_S", "STEPS_MIN", "ScriptTuneResult", "candidates", "change", "tune_script"]

FIRST_S = (1.0, 10.0)  # the first trial's length after its first batch: FIRST_SHARE of the budget, within these
FIRST_SHARE = 0.03
STEPS_MIN = 8  # batches per trial at least: fewer and one slow batch decides
# not read by `predict`: the top pick's siblings in the first rung. NOTE: not the start method: a spawned worker
# imports torch again, which made each trial seconds longer and left too little of the budget for the interval; a
# script that starts its workers by spawn gets fork as a candidate all the same (`candidates`)
_KNOBS = ("prefetch_factor", "threads")

log = logging.getLogger(__name__)


@dataclass
class ScriptTuneResult:
    command: list[str]
    budget_s: float
    site: str = ""  # file:line of the DataLoader tuned
    site_note: str = ""  # why that one
    steps: int = 0  # batches per first-rung trial
    base: dict[str, Any] = field(default_factory=dict)  # the script's own setting, as read from its DataLoader
    settings: list[dict[str, Any]] = field(default_factory=list)  # candidate -> its setting (0: the script's)
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per trial
    best_idx: int | None = None
    comparison: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""
    spent_s: float = 0.0
    max_memory: int | None = None
    diff: str = ""
    error: str | None = None  # the script's own setting failed: nothing to tune
    tune_id: str = ""  # the sweep_id of its trials' runs, and its row in the store's tunes
    stored: int = 0  # trials stored as runs
    unstored: int = 0  # trials the store was too busy to take (their RunLogs wait for the next write)
    recorded: bool = False  # the answer is the store's row of the tune (`tunes`)

    def render(self) -> str:
        head = (
            f"tune `{' '.join(self.command)}`: the script ran once per trial, {len(self.rows)} trials in "
            f"{self.spent_s:.0f} s of {self.budget_s:.0f} s ({self.stop_reason or 'done'})"
        )
        if self.error:
            return "\n".join([head, f"the script failed under its own setting: {self.error}"])
        width = max(len(describe(self.settings[r["candidate"]], self.base)) for r in self.rows)
        lines = [
            head,
            f"tuned: the DataLoader at {self.site} ({self.site_note}); each trial stopped once it had "
            f"delivered {self.steps} batches (more in later rungs), with LOADERLAB_TRIAL=1 set",
            f"  {'rung':>7}  {'setting':<{width}}  {'s/batch':>8}  {'gpu idle':>8}  {'peak':>8}  status",
        ]
        for r in self.rows:
            per = "-" if math.isnan(r["s_per_batch"]) else f"{r['s_per_batch']:.4f}"
            idle = "-" if r.get("gpu_idle_share") is None else f"{r['gpu_idle_share']:.0%}"
            peak = "-" if r.get("peak_bytes") is None else memory.fmt_bytes(r["peak_bytes"])
            what = r["status"] + (f": {r['error']}" if r.get("error") else "")
            setting = describe(self.settings[r["candidate"]], self.base)
            lines.append(f"  {str(r['rung']):>7}  {setting:<{width}}  {per:>8}  {idle:>8}  {peak:>8}  {what}")
        if self.best_idx is None:
            return "\n".join([*lines, "no trial finished under another setting"])
        own = "the script's own setting"
        if self.best_idx == 0:
            return "\n".join([*lines, f"{own} ({describe(self.base)}) was the fastest measured: no change to make"])
        c = self.comparison
        lines.append(
            f"best: {describe(self.settings[self.best_idx], self.base)} (the script's own: {describe(self.base)})"
        )
        if c and not math.isnan(c.get("speedup", math.nan)):
            ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
            said = (
                f"{c['speedup']:.2f}x faster than {own}"
                if c["difference"] == "B faster"
                else f"{c['speedup']:.2f}x {own}'s speed by the medians, not confirmed"
                if c.get("note")
                else f"{c['speedup']:.2f}x {own}'s speed by the medians: {c['difference']}"
            )
            lines.append(
                f"{said} ({ci}; {c['n_a']} + {c['n_b']} runs, interleaved; {c['median_a']:.4f} s per batch "
                "under the script's own)"
            )
        peaks = [r["peak_bytes"] for r in self.rows if r["candidate"] == self.best_idx and r.get("peak_bytes")]
        yours = [r["peak_bytes"] for r in self.rows if r["candidate"] == 0 and r.get("peak_bytes")]
        lines.append(
            memory.peak_line(
                max(peaks) if peaks else None, max(yours) if yours else None, self.max_memory, "the script's own"
            )
        )
        lines += [f"the change to make, in {self.site}:", self.diff.rstrip("\n") or "(the call could not be located)"]
        return "\n".join(lines)


def describe(setting: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    """'num_workers=2, persistent_workers=True, prefetch_factor=2, threads=1'; with `base`, only what differs from it
    ('the script's own' where nothing does)."""
    keys = (
        ("loader", "num_workers", "pin_memory", "prefetch_factor", "threads")
        if setting.get("loader")
        else (*LOADER_ARGS, "threads")
        if setting.get("num_workers")
        else ("num_workers", "pin_memory", "threads")
    )
    shown = [k for k in keys if setting.get(k) is not None and (base is None or setting.get(k) != base.get(k))]
    return ", ".join(f"{k}={setting[k]!r}" for k in shown) or "the script's own"


def candidates(
    base: dict[str, Any], cores: float, cuda: bool, map_style: bool = False, waits: float = 0.0
) -> list[dict[str, Any]]:
    """The script's own setting first, then the space (module doc), without repeats. map_style: the lab's threads
    loader over the script's dataset too (engine/observe/threads_loader.py). waits: the first trial's latency per
    second of loading work (tune.waits_of): where items wait, workers reach past the cores as in the lab's tune
    (threads to cores x (1 + waits), at most MAX_WORKERS; processes to MAX_PROCESSES_PER_CORE x cores)."""
    threads0 = base.get("threads") or 1
    out = [base]
    reach = cores * (1.0 + waits)
    if map_style:  # NOTE: threads overlap items that wait past the cores; the GIL limits them where items compute
        for w in (w for w in (2, 4, 8, 16, 32, 64) if w <= min(MAX_WORKERS, max(4, 2 * cores, reach))):
            out.append(
                {
                    "loader": "threads",
                    "num_workers": w,
                    "pin_memory": cuda or base["pin_memory"],
                    "prefetch_factor": 2,
                    "threads": threads0,
                }
            )
    processes = max(2, cores, min(reach, MAX_PROCESSES_PER_CORE * cores) if waits > 0 else 0)
    for w in sorted({w for w in (0, 1, 2, 4, 8, 16, 32, 64) if w <= processes} | {base["num_workers"]}):
        if w == 0:
            for t in dict.fromkeys((threads0, max(1, int(cores)))):
                out.append({"num_workers": 0, "pin_memory": cuda or base["pin_memory"], "threads": t})
            continue
        for pf in (2, 4):
            for ctx in dict.fromkeys((base.get("multiprocessing_context"), "spawn", None)):
                for t in dict.fromkeys((threads0, 1, max(1, int(cores) - w))):
                    out.append(
                        {
                            "num_workers": w,
                            "pin_memory": cuda or base["pin_memory"],
                            "persistent_workers": True,
                            "prefetch_factor": pf,
                            "multiprocessing_context": ctx,
                            "threads": t,
                        }
                    )
    seen, unique = set(), []
    for s in out:
        key = json.dumps(s, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique


def tune_script(
    command: list[str],
    *,
    budget_s: float,
    db: Db = None,
    max_memory: int | None = None,
    space: list[dict[str, Any]] | None = None,
    seed: int = 0,
    say: Callable[[str], None] = lambda line: None,
) -> ScriptTuneResult:
    """Search the training DataLoader's setting of the script, trial by trial (module doc). space: overrides of
    the script's own setting to try instead of `candidates`' (each a dict of DataLoader arguments and threads)."""
    argv = script_command(command, verb="tune", field="script")
    command = command[1:] if command[:1] == ["--"] else list(command)
    result = ScriptTuneResult(command=command, budget_s=budget_s, max_memory=max_memory)
    rng, t0 = random.Random(seed), time.monotonic()
    result.tune_id = f"tune-{uuid.uuid4().hex[:12]}"
    work = Path(tempfile.mkdtemp(prefix="loaderlab-tune-"))  # the trials' output; their RunLogs go beside the store
    trials = Trials(argv, work, db, t0, result.tune_id)
    try:
        first_s = min(max(FIRST_SHARE * budget_s, FIRST_S[0]), FIRST_S[1])
        first = trials.run({ENV_SECONDS: str(first_s)}, timeout_s=max(30.0, budget_s / 3))
        if first["status"] != "done" or not first["streams"]:
            result.error = first.get("error") or "no DataLoader was iterated"
            for found in first["dirs"].values():  # NOTE: no loader was tuned: its trial is no candidate's run
                for d in found:
                    shutil.rmtree(d, ignore_errors=True)
            return result
        site, stream = max(first["streams"].items(), key=lambda kv: kv[1]["steps"])
        result.site, result.steps = site, max(STEPS_MIN, stream["steps"])
        result.site_note = (
            f"the most batches in the first trial: {stream['steps']} of "
            f"{sum(s['steps'] for s in first['streams'].values())}"
        )
        result.base = _setting_of(stream["settings"])
        cores, cuda = usable_cpus(), stream["gpu_idle_share"] is not None
        result.settings = (
            [result.base, *[{**result.base, **s} for s in space]]
            if space is not None
            else candidates(
                result.base, cores, cuda, _map_style(stream["settings"]), waits_of(probe_of(stream, cores, cuda))
            )
        )
        result.rows.append(trials.keep(first, site, 0, 0, result.base))
        trials.walls.append((first["wall_s"], 1.0))
        say(f"tuning the DataLoader at {site}: {len(result.settings)} candidates")
        _search(result, trials, stream, cores, rng, every=space is not None)
    finally:
        result.spent_s = time.monotonic() - t0
        shutil.rmtree(work, ignore_errors=True)
        trials.store_pending()
        result.stored, result.unstored = len(trials.stored), len(trials.unstored)
    if result.rows:
        _record(result, db)
    return result


def _record(result: ScriptTuneResult, db: Db) -> None:
    """The answer, as the store's row of the tune (engine.store.record_tune); a busy store loses only this row."""
    c = result.comparison
    best = result.best_idx or None  # NOTE: 0, the script's own, is no change to make
    row = {
        "tune_id": result.tune_id,
        "created_at": datetime.now(timezone.utc).replace(tzinfo=None),
        "kind": "script",
        "command": json.dumps(result.command),
        "site": result.site,
        "budget_s": result.budget_s,
        "spent_s": result.spent_s,
        "stop_reason": result.stop_reason or "done",
        "best_config_idx": best,
        **{k: _finite(c.get(k)) if best else None for k in ("speedup", "speedup_lo", "speedup_hi")},
        "difference": c.get("difference") if best else None,
        "diff": result.diff,
        "answer": result.render(),
        "settings_json": json.dumps(result.settings, default=str),
    }
    try:
        record_tune(db, row)
        result.recorded = True
    except StoreBusy as e:
        log.warning("tune %s: its answer was not stored (%s)", result.tune_id, e)


def _finite(x: Any) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _search(
    result: ScriptTuneResult,
    trials: Trials,
    first: dict[str, Any],
    cores: float,
    rng: random.Random,
    every: bool = False,
) -> None:
    """tune's search (engine/advice/_halving.py) over the trials: the first rung, the halving, then the interleaved
    pairs. every: the first rung runs every candidate (a space the caller named), while the whole budget lasts."""
    ranked = rank_settings(result.settings, first, cores, first["gpu_idle_share"] is not None)

    def siblings(idx: int, picks: list[int]) -> list[int]:  # the top pick's only: the budget holds few trials
        if idx != picks[0]:
            return []
        return [i for i in range(1, len(result.settings)) if _sibling(result.settings[i], result.settings[idx])]

    rung0 = first_rung(
        ranked, lambda i: (result.settings[i].get("loader"), result.settings[i]["num_workers"]), TOP_K, siblings
    )
    if every:
        rung0 += [i for i in range(1, len(result.settings)) if i not in rung0]
    # NOTE: the search stops where the pairs the interval needs (6 and 7 runs, less the first rung's) still fit: a
    # script's trial pays the interpreter's and torch's start-up each time, so SEARCH_SHARE alone left too few; a
    # tight budget tries fewer of the first rung, the predicted fastest first. A budget that cannot hold one more
    # trial and those pairs gets no interval anyway: the search keeps its share.
    pairs = 2 * CONFIRM_REPEATS - 2
    reserve = trials.fits(result.budget_s, 1 + pairs)

    def limit_s(rung: int) -> float:
        if every and rung == 0:
            return result.budget_s
        share = result.budget_s * SEARCH_SHARE
        return min(share, result.budget_s - pairs * trials.per_trial()) if reserve else share

    plan = Plan(
        measure=lambda idx, rung, steps: trials.measure(result, idx, rung, steps),
        fits=lambda idxs, rung, steps, limit: trials.fits(limit, len(idxs) * steps / result.steps),
        limit_s=limit_s,
        figure="s_per_batch",
        length=result.steps,
        rng=rng,
        rows=result.rows,
    )
    result.stop_reason = halve(rung0, plan)[0]
    result.best_idx = best = pick(result.rows, "s_per_batch", result.max_memory)
    if best is not None and best != 0:
        stop = confirm(best, plan, CONFIRM_REPEATS, result.budget_s, result.rows, "the script's own setting")
        result.stop_reason += f"; {stop}" if stop else ""
        _compare(result)
        result.diff = change(result.site, result.base, result.settings[best])


def _sibling(setting: dict[str, Any], top: dict[str, Any]) -> bool:
    """The top pick with one knob the prediction does not read changed."""
    return (
        bool(top)
        and sum(setting.get(k) != top.get(k) for k in ("loader", *LOADER_ARGS, "threads")) == 1
        and any(setting.get(k) != top.get(k) for k in _KNOBS)
    )


def _compare(result: ScriptTuneResult) -> None:
    """stats.compare of the script's own setting and the best over their runs of the first rung's length (the
    confirming pairs, and the first rung's runs of the two)."""
    runs = [
        r for r in result.rows if r["status"] == "done" and r["rung"] in (0, "confirm") and r["steps"] == result.steps
    ]
    own = [r["s_per_batch"] for r in runs if r["candidate"] == 0]
    top = [r["s_per_batch"] for r in runs if r["candidate"] == result.best_idx]
    if own and top:
        result.comparison = stats.compare(own, top)


def _map_style(settings: dict[str, Any]) -> bool:
    """Whether the loader draws its batches of indices from a sampler (a map-style dataset, batched by DataLoader)."""
    return (
        settings.get("batch_size") is not None
        and settings.get("batch_sampler_class") is not None
        and "InfiniteConstantSampler" not in str(settings.get("sampler_class"))
    )


def _setting_of(settings: dict[str, Any]) -> dict[str, Any]:
    """The script's own setting in the candidates' keys, from the observed DataLoader's settings."""
    w = int(settings.get("num_workers") or 0)
    out: dict[str, Any] = {
        "num_workers": w,
        "pin_memory": bool(settings.get("pin_memory")),
        "threads": settings.get("intra_op_threads"),
    }
    if w:
        ctx = settings.get("multiprocessing_context")
        out.update(
            persistent_workers=bool(settings.get("persistent_workers")),
            prefetch_factor=settings.get("prefetch_factor"),
            multiprocessing_context=None if ctx in (None, "fork") else ctx,
        )
    return out
