"""Tune a training script as it is: `python -m engine tune [--budget 90s] -- python train.py ARGS`.

    result = tune_script(["python", "train.py"], budget_s=90); print(result.render())

The script runs once per trial, unchanged, under the observer (engine/observe/_boot.py), with LOADERLAB_TRIAL=1 set
so it can skip its checkpoints and logging (engine/observe/_trial.py says how a trial is told its setting and when
it stops). Its output goes to a file per trial; a trial that fails is one row with its first error.

1. The first trial runs the script's own setting for a few seconds (FIRST_SHARE of the budget, within FIRST_S): the
   loader that delivered the most batches is the one tuned (training, not validation), named by file and line, and
   the batches it delivered are every later trial's length (STEPS_MIN at least).
2. The candidates (`candidates`): that DataLoader's num_workers {0, 1, 2, 4, ... <= cores} x prefetch_factor {2, 4}
   x the start method {the script's, spawn, fork} x intra-op threads {the script's, 1, cores - workers}, with persistent
   workers (and pin_memory on CUDA). Ranked by a prediction from the first trial's own split (`predict`: each
   batch's load spread over the workers, against the step), then tune's search (engine/advice/tune.py's constants
   and its memory cap, stats.compare): the first rung runs the TOP_K predicted fastest worker counts and the top
   pick's variants in the knobs the prediction does not read; successive halving keeps the best 1/ETA, which run
   ETA x as many batches (a whole rung or none), within SEARCH_SHARE of the budget and short of the time the pairs
   below need (a tight budget runs fewer of the first rung, the predicted fastest first); then the best and the
   script's own setting run in pairs, each pair in a random order, and the speedup's 95% interval comes from those
   runs (the first rung's runs of the two, of the same length, count among them).
3. The answer is the change to make: the DataLoader(...) call as it should read, a unified diff against the
   script's own source, with the speedup and its interval and the peak memory beside the script's.

A trial's figure is the tuned loader's seconds per batch after its first: each batch's wait and step, and each later
epoch's time to its first batch (workers that are not persistent start again there); the first epoch's start-up is
paid once and left out. A setting under which a full
epoch of the loader delivers a different number of samples than the script's own (an IterableDataset that does not
split itself over workers) changes what the script computes: it is a row, never the answer.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.advice import memory
from engine.advice.tune import CONFIRM_REPEATS, ETA, SEARCH_SHARE, TOP_K
from engine.analysis import stats
from engine.measure import usable_cpus
from engine.observe import (ENV_NAME, ENV_PREFIX, ENV_ROOT, ENV_RUNS, ENV_SECONDS, ENV_SETTING, ENV_SITE, ENV_STEPS,
                            ENV_STORE, ENV_TRIAL, LOADER_ARGS)
from engine.paths import ROOT, Db, db_path
from engine.run.observed import script_command
from engine.runlog import read_events

__all__ = ["FIRST_S", "STEPS_MIN", "ScriptTuneResult", "candidates", "predict", "tune_script"]

FIRST_S = (1.0, 10.0)  # the first trial's length after its first batch: FIRST_SHARE of the budget, within these
FIRST_SHARE = 0.03
STEPS_MIN = 8  # batches per trial at least: fewer and one slow batch decides
# not read by `predict`: the top pick's siblings in the first rung. NOTE: not the start method: a spawned worker
# imports torch again, which made each trial seconds longer and left too little of the budget for the interval; a
# script that starts its workers by spawn gets fork as a candidate all the same (`candidates`)
_KNOBS = ("prefetch_factor", "threads")


@dataclass
class ScriptTuneResult:
    command: list[str]
    budget_s: float
    site: str = ""               # file:line of the DataLoader tuned
    site_note: str = ""          # why that one
    steps: int = 0               # batches per first-rung trial
    base: dict[str, Any] = field(default_factory=dict)   # the script's own setting, as read from its DataLoader
    settings: list[dict[str, Any]] = field(default_factory=list)   # candidate -> its setting (0: the script's)
    rows: list[dict[str, Any]] = field(default_factory=list)       # one per trial
    best_idx: int | None = None
    comparison: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""
    spent_s: float = 0.0
    max_memory: int | None = None
    diff: str = ""
    error: str | None = None     # the script's own setting failed: nothing to tune

    def render(self) -> str:
        head = (f"tune `{' '.join(self.command)}`: the script ran once per trial, {len(self.rows)} trials in "
                f"{self.spent_s:.0f} s of {self.budget_s:.0f} s ({self.stop_reason or 'done'})")
        if self.error:
            return "\n".join([head, f"the script failed under its own setting: {self.error}"])
        width = max(len(describe(self.settings[r["candidate"]], self.base)) for r in self.rows)
        lines = [head, f"tuned: the DataLoader at {self.site} ({self.site_note}); each trial stopped once it had "
                       f"delivered {self.steps} batches (more in later rungs), with LOADERLAB_TRIAL=1 set",
                 f"  {'rung':>7}  {'setting':<{width}}  {'s/batch':>8}  {'gpu idle':>8}  {'peak':>8}  status"]
        for r in self.rows:
            per = "-" if math.isnan(r["s_per_batch"]) else f"{r['s_per_batch']:.4f}"
            idle = "-" if r.get("gpu_idle_share") is None else f"{r['gpu_idle_share']:.0%}"
            peak = "-" if r.get("peak_bytes") is None else memory.fmt_bytes(r["peak_bytes"])
            what = r["status"] + (f": {r['error']}" if r.get("error") else "")
            lines.append(f"  {str(r['rung']):>7}  {describe(self.settings[r['candidate']], self.base):<{width}}  {per:>8}  "
                         f"{idle:>8}  {peak:>8}  {what}")
        if self.best_idx is None:
            return "\n".join([*lines, "no trial finished under another setting"])
        own = "the script's own setting"
        if self.best_idx == 0:
            return "\n".join([*lines, f"{own} ({describe(self.base)}) was the fastest measured: no change to make"])
        c = self.comparison
        lines.append(f"best: {describe(self.settings[self.best_idx], self.base)} (the script's own: "
                     f"{describe(self.base)})")
        if c and not math.isnan(c.get("speedup", math.nan)):
            ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
            said = (f"{c['speedup']:.2f}x faster than {own}" if c["verdict"] == "B faster" else
                    f"{c['speedup']:.2f}x {own}'s speed by the medians, not confirmed" if c.get("note") else
                    f"{c['speedup']:.2f}x {own}'s speed by the medians: {c['verdict']}")
            lines.append(f"{said} ({ci}; {c['n_a']} + {c['n_b']} runs, interleaved; {c['median_a']:.4f} s per batch "
                         "under the script's own)")
        peaks = [r.get("peak_bytes") for r in self.rows if r["candidate"] == self.best_idx and r.get("peak_bytes")]
        yours = [r.get("peak_bytes") for r in self.rows if r["candidate"] == 0 and r.get("peak_bytes")]
        lines.append(memory.peak_line(max(peaks) if peaks else None, max(yours) if yours else None,
                                      self.max_memory, "the script's own"))
        lines += [f"the change to make, in {self.site}:", self.diff.rstrip("\n") or "(the call could not be located)"]
        return "\n".join(lines)


def describe(setting: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    """'num_workers=2, persistent_workers=True, prefetch_factor=2, threads=1'; with `base`, only what differs from it
    ('the script's own' where nothing does)."""
    keys = (*LOADER_ARGS, "threads") if setting.get("num_workers") else ("num_workers", "pin_memory", "threads")
    shown = [k for k in keys if setting.get(k) is not None and (base is None or setting.get(k) != base.get(k))]
    return ", ".join(f"{k}={setting[k]!r}" for k in shown) or "the script's own"


def candidates(base: dict[str, Any], cores: float, cuda: bool) -> list[dict[str, Any]]:
    """The script's own setting first, then the space (module doc), without repeats."""
    threads0 = base.get("threads") or 1
    out = [base]
    for w in sorted({w for w in (0, 1, 2, 4, 8, 16, 32, 64) if w <= max(2, cores)} | {base["num_workers"]}):
        if w == 0:
            for t in dict.fromkeys((threads0, max(1, int(cores)))):
                out.append({"num_workers": 0, "pin_memory": cuda or base["pin_memory"], "threads": t})
            continue
        for pf in (2, 4):
            for ctx in dict.fromkeys((base.get("multiprocessing_context"), "spawn", None)):
                for t in dict.fromkeys((threads0, 1, max(1, int(cores) - w))):
                    out.append({"num_workers": w, "pin_memory": cuda or base["pin_memory"], "persistent_workers": True,
                                "prefetch_factor": pf, "multiprocessing_context": ctx, "threads": t})
    seen, unique = set(), []
    for s in out:
        key = json.dumps(s, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique


def predict(setting: dict[str, Any], first: dict[str, Any], cores: float) -> float:
    """Seconds per batch, from the first trial's own split: each batch's load L and step S at the script's setting;
    w workers spread the load (at most over the cores), the loop itself loads in turn with the step."""
    w0, wait, step = first["workers"], first["wait"], first["step"]
    load = wait if w0 == 0 else (wait + step) * w0  # with workers, one worker's time per batch (an upper estimate)
    w = setting["num_workers"]
    return load + step if w == 0 else max(step, load / min(w, max(1.0, cores)))


def tune_script(command: list[str], *, budget_s: float, db: Db = None, max_memory: int | None = None,
                space: list[dict[str, Any]] | None = None, seed: int = 0,
                say: Callable[[str], None] = lambda line: None) -> ScriptTuneResult:
    """Search the training DataLoader's setting of the script, trial by trial (module doc). space: overrides of
    the script's own setting to try instead of `candidates`' (each a dict of DataLoader arguments and threads)."""
    argv = script_command(command)
    command = command[1:] if command[:1] == ["--"] else list(command)
    result = ScriptTuneResult(command=command, budget_s=budget_s, max_memory=max_memory)
    rng, t0 = random.Random(seed), time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="loaderlab-tune-"))
    trials = _Trials(argv, work, db, t0)
    try:
        first_s = min(max(FIRST_SHARE * budget_s, FIRST_S[0]), FIRST_S[1])
        first = trials.run({ENV_SECONDS: str(first_s)}, timeout_s=max(30.0, budget_s / 3))
        if first["status"] != "done" or not first["streams"]:
            result.error = first.get("error") or "no DataLoader was iterated"
            return result
        site, stream = max(first["streams"].items(), key=lambda kv: kv[1]["steps"])
        result.site, result.steps = site, max(STEPS_MIN, stream["steps"])
        result.site_note = (f"the most batches in the first trial: {stream['steps']} of "
                            f"{sum(s['steps'] for s in first['streams'].values())}")
        result.base = _setting_of(stream["settings"])
        cores, cuda = usable_cpus(), stream["gpu_idle_share"] is not None
        result.settings = [result.base, *[{**result.base, **s} for s in space]] if space is not None else \
            candidates(result.base, cores, cuda)
        result.rows.append(trials.row(first, stream, 0, 0))
        trials.walls.append((first["wall_s"], 1.0))
        say(f"tuning the DataLoader at {site}: {len(result.settings)} candidates")
        _search(result, trials, stream, cores, rng, every=space is not None)
    finally:
        result.spent_s = time.monotonic() - t0
        shutil.rmtree(work, ignore_errors=True)
    return result


def _search(result: ScriptTuneResult, trials: "_Trials", first: dict[str, Any], cores: float,
            rng: random.Random, every: bool = False) -> None:
    """The first rung, the halving, then the interleaved pairs (module doc). every: the first rung runs every
    candidate (a space the caller named), each once while the whole budget lasts."""
    own = {"workers": first["settings"].get("num_workers") or 0, "wait": first["wait"], "step": first["step"]}
    ranked = sorted(range(1, len(result.settings)), key=lambda i: predict(result.settings[i], own, cores))
    rung0, told = [], set()
    for i in ranked:
        w = result.settings[i]["num_workers"]
        if len(told) < TOP_K and w not in told:
            told.add(w)
            rung0.append(i)
    top = result.settings[rung0[0]] if rung0 else {}
    rung0 += [i for i in range(1, len(result.settings)) if i not in rung0 and (every or _sibling(result.settings[i], top))]
    steps, rung, survivors, complete = result.steps, 0, rung0, 0
    # NOTE: the search stops where the pairs the interval needs (6 and 7 runs, less the first rung's) still fit: a
    # script's trial pays the interpreter's and torch's start-up each time, so SEARCH_SHARE alone left too few; a
    # tight budget tries fewer of the first rung, the predicted fastest first. A budget that cannot hold one more
    # trial and those pairs gets no interval anyway: the search keeps its share.
    pairs = 2 * CONFIRM_REPEATS - 2
    reserve = trials.fits(result.budget_s, 1 + pairs)
    while True:
        def deadline() -> float:
            return result.budget_s if every and rung == 0 else \
                min(result.budget_s * SEARCH_SHARE, result.budget_s - pairs * trials.per_trial()) if reserve \
                else result.budget_s * SEARCH_SHARE
        if rung and not trials.fits(deadline(), len(survivors) * steps / result.steps):
            result.stop_reason = "search share of the budget spent"  # NOTE: a rung cut short decides nothing
            break
        for idx in survivors:
            if (rung or idx != survivors[0]) and not trials.fits(deadline(), steps / result.steps):  # the first goes
                result.stop_reason = "search share of the budget spent"
                break
            result.rows.append(trials.measure(result, idx, rung, steps))
        else:
            complete = rung  # NOTE: a rung the budget cut short ran only some survivors: the pick is the last whole one
        done = [r for r in result.rows if r["rung"] == rung and r["status"] == "done"]
        if result.stop_reason or len(done) <= 1:
            result.stop_reason = result.stop_reason or "one candidate left"
            break
        ranked_rows = sorted(done, key=lambda r: r["s_per_batch"])
        survivors = [r["candidate"] for r in ranked_rows[:max(1, math.ceil(len(ranked_rows) / ETA))]]
        if len(survivors) == 1:
            result.stop_reason = "one candidate left"
            break
        rung, steps = rung + 1, steps * ETA
    fine = [r for r in result.rows if r["status"] == "done" and memory.fits(r.get("peak_bytes"), result.max_memory)]
    if not fine:
        return
    top_rung = max(r["rung"] for r in fine if r["rung"] <= complete) if any(r["rung"] <= complete for r in fine) \
        else max(r["rung"] for r in fine)
    result.best_idx = min((r for r in fine if r["rung"] == top_rung), key=lambda r: r["s_per_batch"])["candidate"]
    if result.best_idx != 0:
        _confirm(result, trials, rng)
        result.diff = change(result.site, result.base, result.settings[result.best_idx])


def _sibling(setting: dict[str, Any], top: dict[str, Any]) -> bool:
    """The top pick with one knob the prediction does not read changed."""
    return bool(top) and sum(setting.get(k) != top.get(k) for k in (*LOADER_ARGS, "threads")) == 1 and \
        any(setting.get(k) != top.get(k) for k in _KNOBS)


def _confirm(result: ScriptTuneResult, trials: "_Trials", rng: random.Random) -> None:
    """The script's own setting and the best, in pairs, each pair in a random order, while the budget lasts."""
    best = result.best_idx
    for rep in range(CONFIRM_REPEATS):
        for idx in rng.sample([0, best], 2):
            if not trials.fits(result.budget_s, 1.0):
                result.stop_reason += "; budget spent while confirming"
                break
            result.rows.append({**trials.measure(result, idx, "confirm", result.steps), "repeat": rep})
        else:
            continue
        break
    runs = [r for r in result.rows if r["status"] == "done" and r["rung"] in (0, "confirm") and
            r["steps"] == result.steps]
    own = [r["s_per_batch"] for r in runs if r["candidate"] == 0]
    top = [r["s_per_batch"] for r in runs if r["candidate"] == best]
    if own and top:
        result.comparison = stats.compare(own, top)


class _Trials:
    """Runs the script once per trial in its own process group, and reads the trial's RunLogs."""

    def __init__(self, argv: list[str], work: Path, db: Db, t0: float):
        self.argv, self.work, self.store, self.t0, self.n = argv, work, db_path(db), t0, 0
        self.walls: list[tuple[float, float]] = []  # (trial seconds, its length relative to the first rung's)
        self.epoch_samples: set[int] | None = None

    def per_trial(self) -> float:
        """Seconds a trial of the first rung's length takes, by the trials so far."""
        return statistics.median(w / s for w, s in self.walls) if self.walls else 0.0

    def fits(self, limit_s: float, scale: float) -> bool:
        """Whether the next trial (of `scale` x the first rung's batches) can end within limit_s of the start."""
        return time.monotonic() - self.t0 + self.per_trial() * scale <= limit_s

    def measure(self, result: ScriptTuneResult, idx: int, rung: Any, steps: int) -> dict[str, Any]:
        setting = result.settings[idx]
        env = {ENV_SITE: result.site, ENV_STEPS: str(steps), ENV_SETTING: json.dumps(setting)} if idx else \
            {ENV_SITE: result.site, ENV_STEPS: str(steps)}
        first_wall = self.walls[0][0] if self.walls else 60.0
        trial = self.run(env, timeout_s=max(30.0, 5 * first_wall * steps / max(1, result.steps)))
        self.walls.append((trial["wall_s"], steps / max(1, result.steps)))
        return self.row(trial, trial["streams"].get(result.site), idx, rung)

    def row(self, trial: dict[str, Any], stream: dict[str, Any] | None, idx: int, rung: Any) -> dict[str, Any]:
        status, error = trial["status"], trial.get("error")
        if status == "done" and stream is None:
            status, error = "failed", "the tuned DataLoader was not iterated"
        if status == "done" and stream["full_epoch_samples"]:
            if self.epoch_samples is None:
                self.epoch_samples = stream["full_epoch_samples"]
            elif stream["full_epoch_samples"] != self.epoch_samples:
                status, error = "changes the data", (f"an epoch of {sorted(stream['full_epoch_samples'])} samples, the "
                                                     f"script's own {sorted(self.epoch_samples)}: the dataset does not "
                                                     "split itself over workers")
        ok = status == "done"
        return {"candidate": idx, "rung": rung, "status": status, "error": error, "wall_s": trial["wall_s"],
                "steps": stream["steps"] if ok else 0, "s_per_batch": stream["s_per_batch"] if ok else math.nan,
                "peak_bytes": stream["peak_bytes"] if ok else None,
                "gpu_idle_share": stream["gpu_idle_share"] if ok else None}

    def run(self, env_extra: dict[str, str], timeout_s: float) -> dict[str, Any]:
        """One trial: the script under the observer with the trial's environment; its streams' figures by site."""
        self.n += 1
        prefix = f"t{self.n}"
        env = {**os.environ, ENV_RUNS: str(self.work), ENV_STORE: str(self.store), ENV_PREFIX: prefix, ENV_NAME: "",
               ENV_ROOT: str(ROOT), ENV_TRIAL: "1", **env_extra}
        started = time.monotonic()
        out_path, err_path = self.work / f"{prefix}.out", self.work / f"{prefix}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
            try:
                rc: int | None = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                try:  # NOTE: the whole group: the trial's DataLoader workers die with it, whatever the script did
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
        wall = time.monotonic() - started
        parts: dict[str, list[dict[str, Any]]] = {}
        for run_dir in sorted(self.work.glob(f"{prefix}-*")):
            s = _stream_figures(read_events(run_dir))
            if s is not None:  # NOTE: by line: a loader made anew each epoch is one stream per object, one loader here
                parts.setdefault(s["site"], []).append(s)
        streams = {site: _merged(found) for site, found in parts.items()}
        if rc is None:
            return {"status": "timed out", "error": f"past {timeout_s:.0f} s", "wall_s": wall, "streams": streams}
        if rc != 0:
            return {"status": "failed", "error": _first_error(err_path.read_text(errors="replace"), rc),
                    "wall_s": wall, "streams": streams}
        return {"status": "done", "wall_s": wall, "streams": streams}


def _stream_figures(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One stream of a trial: its site and settings, its batches, seconds per batch after its first (module doc),
    peak memory, GPU idle share, and the samples of the epochs it finished."""
    summary: dict[str, Any] = {}
    epochs: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["type"] == "summary":
            summary.update(e)
        elif e["type"] == "epoch":
            epochs[e["epoch"]] = e  # NOTE: the last of an epoch's records: a run of one epoch writes it twice
    if "observed_stream" not in summary or not epochs:
        return None
    ordered = [epochs[k] for k in sorted(epochs)]
    steps = sum(e["n_steps"] for e in ordered)
    # each batch's wait and step, and each later epoch's time to its first batch (iter() starts workers that are not
    # persistent): the first epoch's is start-up, paid once
    first_waits = [e["steps"][0][1] if e.get("steps") else 0.0 for e in ordered]
    busy = sum(e["data_wait_s"] + e["compute_s"] for e in ordered) - sum(first_waits) + \
        sum(e["ttfb_s"] for e in ordered[1:])
    full = ordered[:-1] if summary.get("trial_stopped_by") == summary["observed_stream"] else ordered
    idle = [e.get("gpu_idle_s") for e in ordered]
    settings = json.loads(summary.get("observed_settings") or "{}")
    wait = sum(e["data_wait_s"] for e in ordered) - ordered[0]["ttfb_s"]
    return {"site": summary["observed_stream"], "settings": settings, "steps": steps, "busy": busy,
            "first_ttfb": ordered[0]["ttfb_s"], "t_start": ordered[0].get("t_start") or 0.0,
            "s_per_batch": busy / steps if steps else math.nan, "peak_bytes": summary.get("peak_rss_bytes"),
            "wait": wait / steps if steps else 0.0, "step": sum(e["compute_s"] for e in ordered) / steps if steps else 0.0,
            "gpu_idle_share": None if None in idle else sum(idle) / sum(e["wall_s"] for e in ordered),
            "full_epoch_samples": {e["samples"] for e in full}}


def _merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One line's streams as one: their batches and times summed, the first one's settings, the highest peak."""
    if len(parts) == 1:
        return parts[0]
    parts = sorted(parts, key=lambda p: p["t_start"])
    steps = sum(p["steps"] for p in parts)
    busy = sum(p["busy"] for p in parts) + sum(p["first_ttfb"] for p in parts[1:])  # later loaders' start-up counts
    peaks = [p["peak_bytes"] for p in parts if p["peak_bytes"] is not None]
    idle = [p["gpu_idle_share"] for p in parts]
    return {**parts[0], "steps": steps, "busy": busy, "peak_bytes": max(peaks) if peaks else None,
            "s_per_batch": busy / steps if steps else math.nan,
            **{k: sum(p[k] * p["steps"] for p in parts) / steps if steps else math.nan for k in ("wait", "step")},
            "gpu_idle_share": None if None in idle else statistics.fmean(idle),
            "full_epoch_samples": set().union(*(p["full_epoch_samples"] for p in parts))}


def _setting_of(settings: dict[str, Any]) -> dict[str, Any]:
    """The script's own setting in the candidates' keys, from the observed DataLoader's settings."""
    w = int(settings.get("num_workers") or 0)
    out: dict[str, Any] = {"num_workers": w, "pin_memory": bool(settings.get("pin_memory")),
                           "threads": settings.get("intra_op_threads")}
    if w:
        ctx = settings.get("multiprocessing_context")
        out.update(persistent_workers=bool(settings.get("persistent_workers")),
                   prefetch_factor=settings.get("prefetch_factor"),
                   multiprocessing_context=None if ctx in (None, "fork") else ctx)
    return out


def _first_error(stderr: str, rc: int) -> str:
    """The line that names the error that ended the trial (a traceback's last), else its exit status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b.*:", line)]
    text = named[-1] if named else lines[-1] if lines else f"exit status {rc}"
    return text[:200]


def change(site: str, base: dict[str, Any], best: dict[str, Any]) -> str:
    """The unified diff that turns the DataLoader(...) call at site (file:line) into one under `best`: each changed
    argument set in place (a keyword's value, or one given by position), the others added before the call's
    closing parenthesis; other intra-op threads are a torch.set_num_threads line before the call's statement."""
    path_text, _, line_text = site.rpartition(":")
    path, line = Path(path_text), int(line_text)
    source = path.read_text()
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    loaders = [n for n in calls if "DataLoader" in (ast.get_source_segment(source, n.func) or "")] or calls
    if not loaders:
        return ""
    call = min(loaders, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    data = source.encode()
    starts = [0]
    for text_line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(text_line.encode()))

    def at(lineno: int, col: int) -> int:  # ast's columns are UTF-8 byte offsets
        return starts[lineno - 1] + col

    changes = {k: best.get(k) for k in LOADER_ARGS if best.get(k) != base.get(k) and (k in best or k in base)}
    if not best.get("num_workers"):
        changes = {k: v for k, v in changes.items() if k in ("num_workers", "pin_memory")}
        for kw in call.keywords:  # settings only workers take: a loader without workers refuses them
            if kw.arg in ("persistent_workers", "prefetch_factor", "multiprocessing_context"):
                changes[kw.arg] = {"persistent_workers": False}.get(kw.arg)
    edits: list[tuple[int, int, bytes]] = []
    positional = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn",
                  "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context")
    given = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    given.update({positional[i]: a for i, a in enumerate(call.args[:len(positional)])})
    added = []
    for key, value in changes.items():
        if key in given:
            node = given[key]
            edits.append((at(node.lineno, node.col_offset), at(node.end_lineno or node.lineno,
                                                                  node.end_col_offset or 0), repr(value).encode()))
        else:
            added.append(f"{key}={value!r}")
    if added:
        args = [*call.args, *call.keywords]
        if args:
            last = max(args, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
            end = at(last.end_lineno or last.lineno, last.end_col_offset or 0)
            edits.append((end, end, (", " + ", ".join(added)).encode()))
        else:
            end = at(call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1)
            edits.append((end, end, ", ".join(added).encode()))
    if best.get("threads") and best.get("threads") != base.get("threads"):
        stmt = min((n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno <= call.lineno
                    <= (n.end_lineno or n.lineno)), key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
        indent = source.splitlines()[stmt.lineno - 1][:stmt.col_offset]
        plain = any(isinstance(n, ast.Import) and any(a.name == "torch" and not a.asname for a in n.names)
                    for n in ast.walk(tree))
        torch_name = "torch" if plain else "__import__('torch')"
        begin = at(stmt.lineno, 0)
        edits.append((begin, begin, f"{indent}{torch_name}.set_num_threads({best['threads']})\n".encode()))
    for begin, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:begin] + text + data[end:]
    try:
        name = str(path.resolve().relative_to(Path.cwd()))
        before, after = f"a/{name}", f"b/{name}"
    except ValueError:  # outside the working folder: its own path on both sides
        before = after = str(path)
    return "".join(difflib.unified_diff(source.splitlines(keepends=True), data.decode().splitlines(keepends=True),
                                        before, after))
