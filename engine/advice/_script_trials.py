"""The trials of `engine tune -- python train.py` (engine/advice/tune_script.py): the script run once per trial under
the observer, in its own process group, and the figures of each loader it iterated, read from the trial's RunLogs.

    trials = Trials(argv, work_dir, db, t0, tune_id); trial = trials.run({ENV_STEPS: "40", ...}, timeout_s=60)
    row = trials.keep(trial, site, idx, rung, setting)

Each trial is stored as one observed run (`keep`), as `engine observe` stores one: the tuned loader's RunLog (the
first object made at its line, where one line makes a loader anew each epoch), under sweep_id = the tune's id,
config_idx = the candidate, repeat_idx = its trials so far, tagged "tune", with the trial's figures in its summary
(s_per_batch, trial_rung, trial_steps, tune_site, gpu_idle_share, peak_bytes). The trial's other loaders (a
validation loader) are no trial of the tune: their RunLogs are removed. A trial stops mid-epoch, so its epoch_s is
the median of the epochs it finished only (NULL where none did). A candidate under which the tuned loader never
ran (it broke the script first) is a failed run written here, with the trial's first error.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from engine.observe import (
    ENV_NAME,
    ENV_PREFIX,
    ENV_ROOT,
    ENV_RUNS,
    ENV_SETTING,
    ENV_SITE,
    ENV_STEPS,
    ENV_STORE,
    ENV_TRIAL,
)
from engine.errors import StoreBusy
from engine.paths import ROOT, Db, db_path, runs_dir
from engine.runlog import RunLog, claim, read_events
from engine.store import ingest_run

__all__ = ["Trials", "completed_epoch_s", "first_error", "merged", "stream_figures", "trial_config"]

log = logging.getLogger(__name__)


class Trials:
    """Runs the script once per trial in its own process group, and reads the trial's RunLogs."""

    def __init__(self, argv: list[str], work: Path, db: Db, t0: float, tune_id: str):
        self.argv, self.work, self.db, self.store, self.t0, self.n = argv, work, db, db_path(db), t0, 0
        self.tune_id, self.root = tune_id, runs_dir(db)
        self.walls: list[tuple[float, float]] = []  # (trial seconds, its length relative to the first rung's)
        self.epoch_samples: set[int] | None = None
        self.repeats: dict[int, int] = {}  # candidate -> its trials so far
        self.stored: list[str] = []  # run ids
        self.unstored: list[Path] = []  # RunLogs the store was too busy to take: ingested again at the end

    def per_trial(self) -> float:
        """Seconds a trial of the first rung's length takes, by the trials so far."""
        return statistics.median(w / s for w, s in self.walls) if self.walls else 0.0

    def fits(self, limit_s: float, scale: float) -> bool:
        """Whether the next trial (of `scale` x the first rung's batches) can end within limit_s of the start."""
        return time.monotonic() - self.t0 + self.per_trial() * scale <= limit_s

    def measure(self, result: Any, idx: int, rung: Any, steps: int) -> dict[str, Any]:
        setting = result.settings[idx]
        env = (
            {ENV_SITE: result.site, ENV_STEPS: str(steps), ENV_SETTING: json.dumps(setting)}
            if idx
            else {ENV_SITE: result.site, ENV_STEPS: str(steps)}
        )
        first_wall = self.walls[0][0] if self.walls else 60.0
        trial = self.run(env, timeout_s=max(30.0, 5 * first_wall * steps / max(1, result.steps)))
        self.walls.append((trial["wall_s"], steps / max(1, result.steps)))
        return self.keep(trial, result.site, idx, rung, setting)

    def keep(self, trial: dict[str, Any], site: str, idx: int, rung: Any, setting: dict[str, Any]) -> dict[str, Any]:
        """The trial's row, and the trial stored as one run (module doc)."""
        row = self.row(trial, trial["streams"].get(site), idx, rung)
        repeat = self.repeats[idx] = self.repeats.get(idx, -1) + 1
        dirs = trial["dirs"].get(site) or []
        for d in [d for found in trial["dirs"].values() for d in found if d not in dirs[:1]]:
            shutil.rmtree(d, ignore_errors=True)
        run_dir = dirs[0] if dirs else self._unstarted(trial["prefix"], site, setting)
        events = read_events(run_dir)
        with RunLog(run_dir) as runlog:
            if row["status"] != "done" or not any(e.get("type") == "end" for e in events):
                # NOTE: the last `end` is the run's: a trial's error is the one its row names (a timeout included)
                runlog.write("end", status="failed" if row["status"] != "done" else "done", error=row["error"])
            runlog.write(
                "summary",
                s_per_batch=None if math.isnan(row["s_per_batch"]) else row["s_per_batch"],
                trial_rung=rung,
                trial_steps=row["steps"],
                trial_status=row["status"],
                tune_site=site,
                gpu_idle_share=row["gpu_idle_share"],
                peak_bytes=row["peak_bytes"],
                epoch_s=completed_epoch_s(events),
            )
        row["repeat"] = repeat
        self._ingest(run_dir, {"sweep_id": self.tune_id, "config_idx": idx, "repeat_idx": repeat})
        return row

    def store_pending(self) -> None:
        """The trials the store was too busy for, tried once more (the tune's end)."""
        waiting, self.unstored = self.unstored, []
        for run_dir in waiting:
            meta = json.loads((run_dir / "tune.json").read_text())
            self._ingest(run_dir, meta)

    def _ingest(self, run_dir: Path, meta: dict[str, Any]) -> None:
        (run_dir / "tune.json").write_text(json.dumps(meta))
        try:
            self.stored.append(ingest_run(run_dir, db=self.db, sweep_meta=meta))
        except StoreBusy as e:
            log.warning("trial %s not stored yet (%s)", run_dir.name, e)
            self.unstored.append(run_dir)

    def _unstarted(self, prefix: str, site: str, setting: dict[str, Any]) -> Path:
        """The RunLog of a trial whose tuned loader never started (the script broke before): its start only."""
        run_dir = self.root / f"{prefix}-x"
        claim(run_dir, self.store)
        with RunLog(run_dir) as runlog:
            runlog.write("start", run_id=run_dir.name, config=trial_config(setting), host={}, pid=None)
            runlog.write("summary", source="observed", observed_stream=site)
        return run_dir

    def row(self, trial: dict[str, Any], stream: dict[str, Any] | None, idx: int, rung: Any) -> dict[str, Any]:
        status, error = trial["status"], trial.get("error")
        if status == "done" and stream is None:
            status, error = "failed", "the tuned DataLoader was not iterated"
        if status == "done" and stream is not None and stream["full_epoch_samples"]:
            if self.epoch_samples is None:
                self.epoch_samples = stream["full_epoch_samples"]
            elif stream["full_epoch_samples"] != self.epoch_samples:
                status, error = (
                    "changes the data",
                    (
                        f"an epoch of {sorted(stream['full_epoch_samples'])} samples, the "
                        f"script's own {sorted(self.epoch_samples)}: the dataset does not "
                        "split itself over workers"
                    ),
                )
        ok = stream if status == "done" else None  # done with no stream was made failed above
        return {
            "candidate": idx,
            "rung": rung,
            "status": status,
            "error": error,
            "wall_s": trial["wall_s"],
            "steps": ok["steps"] if ok is not None else 0,
            "s_per_batch": ok["s_per_batch"] if ok is not None else math.nan,
            "peak_bytes": ok["peak_bytes"] if ok is not None else None,
            "gpu_idle_share": ok["gpu_idle_share"] if ok is not None else None,
        }

    def run(self, env_extra: dict[str, str], timeout_s: float) -> dict[str, Any]:
        """One trial: the script under the observer with the trial's environment; its streams' figures by site."""
        self.n += 1
        prefix = f"{self.tune_id}-t{self.n}"
        # NOTE: the name is each run's tag: "tune", as the lab's tune tags its runs
        env = {
            **os.environ,
            ENV_RUNS: str(self.root),
            ENV_STORE: str(self.store),
            ENV_PREFIX: prefix,
            ENV_NAME: "tune",
            ENV_ROOT: str(ROOT),
            ENV_TRIAL: "1",
            **env_extra,
        }
        started = time.monotonic()
        out_path, err_path = self.work / f"{prefix}.out", self.work / f"{prefix}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                self.argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
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
        dirs: dict[str, list[Path]] = {}
        for run_dir in sorted(self.root.glob(f"{prefix}-*")):
            events = read_events(run_dir)
            s = stream_figures(events)
            # NOTE: by line: a loader made anew each epoch is one stream per object, one loader here
            site = s["site"] if s is not None else _site_of(events)
            dirs.setdefault(site, []).append(run_dir)
            if s is not None:
                parts.setdefault(site, []).append({**s, "dir": run_dir})
        streams = {site: merged(found) for site, found in parts.items()}
        dirs = {
            site: sorted(
                found, key=lambda d: min((p["t_start"] for p in parts.get(site, []) if p["dir"] == d), default=math.inf)
            )
            for site, found in dirs.items()
        }
        found_all = {"wall_s": wall, "streams": streams, "dirs": dirs, "prefix": prefix}
        if rc is None:
            return {**found_all, "status": "timed out", "error": f"past {timeout_s:.0f} s"}
        if rc != 0:
            return {**found_all, "status": "failed", "error": first_error(err_path.read_text(errors="replace"), rc)}
        return {**found_all, "status": "done"}


def stream_figures(events: list[dict[str, Any]]) -> dict[str, Any] | None:
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
    busy = (
        sum(e["data_wait_s"] + e["compute_s"] for e in ordered)
        - sum(first_waits)
        + sum(e["ttfb_s"] for e in ordered[1:])
    )
    full = ordered[:-1] if summary.get("trial_stopped_by") == summary["observed_stream"] else ordered
    idle = [e["gpu_idle_s"] for e in ordered if e.get("gpu_idle_s") is not None]  # none where any went unmeasured
    settings = json.loads(summary.get("observed_settings") or "{}")
    wait = sum(e["data_wait_s"] for e in ordered) - ordered[0]["ttfb_s"]
    return {
        "site": summary["observed_stream"],
        "settings": settings,
        "steps": steps,
        "busy": busy,
        "first_ttfb": ordered[0]["ttfb_s"],
        "t_start": ordered[0].get("t_start") or 0.0,
        "s_per_batch": busy / steps if steps else math.nan,
        "peak_bytes": summary.get("peak_rss_bytes"),
        "cpu_pct": summary.get("mean_cpu_pct"),
        "wait": wait / steps if steps else 0.0,
        "step": sum(e["compute_s"] for e in ordered) / steps if steps else 0.0,
        "gpu_idle_share": None if len(idle) < len(ordered) else sum(idle) / sum(e["wall_s"] for e in ordered),
        "full_epoch_samples": {e["samples"] for e in full},
    }


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One line's streams as one: their batches and times summed, the first one's settings, the highest peak."""
    if len(parts) == 1:
        return parts[0]
    parts = sorted(parts, key=lambda p: p["t_start"])
    steps = sum(p["steps"] for p in parts)
    busy = sum(p["busy"] for p in parts) + sum(p["first_ttfb"] for p in parts[1:])  # later loaders' start-up counts
    peaks = [p["peak_bytes"] for p in parts if p["peak_bytes"] is not None]
    idle = [p["gpu_idle_share"] for p in parts]
    return {
        **parts[0],
        "steps": steps,
        "busy": busy,
        "peak_bytes": max(peaks) if peaks else None,
        "s_per_batch": busy / steps if steps else math.nan,
        **{k: sum(p[k] * p["steps"] for p in parts) / steps if steps else math.nan for k in ("wait", "step")},
        "gpu_idle_share": None if None in idle else statistics.fmean(idle),
        "full_epoch_samples": set().union(*(p["full_epoch_samples"] for p in parts)),
    }


def completed_epoch_s(events: list[dict[str, Any]]) -> float | None:
    """The median wall time of the steady epochs the trial finished: the epoch its stop cut short is left out."""
    cut = {e["trial_cut_epoch"] for e in events if e.get("type") == "summary" and "trial_cut_epoch" in e}
    epochs = {e["epoch"]: e for e in events if e.get("type") == "epoch"}
    walls = [e["wall_s"] for k, e in epochs.items() if not e.get("warmup") and k not in cut]
    return statistics.median(walls) if walls else None


def trial_config(setting: dict[str, Any]) -> dict[str, Any]:
    """A candidate's setting as the run config's fields (engine/observe/_settings.py maps a DataLoader the same)."""
    w = int(setting.get("num_workers") or 0)
    out: dict[str, Any] = {
        "mode": "single",
        "tag": "tune",
        "loader": setting.get("loader") or ("processes" if w else "sync"),
        "workers": w,
        "pin_memory": bool(setting.get("pin_memory")),
    }
    if setting.get("threads"):
        out["threads"] = int(setting["threads"])
    if out["loader"] == "threads":
        out["prefetch_depth"] = int(setting.get("prefetch_factor") or 2)
    elif w:
        out.update(
            persistent_workers=bool(setting.get("persistent_workers")),
            start_method=setting.get("multiprocessing_context") or multiprocessing.get_start_method(),
        )
        if setting.get("prefetch_factor") is not None:
            out["prefetch_depth"] = int(setting["prefetch_factor"])
    return out


def _site_of(events: list[dict[str, Any]]) -> str:
    return next((e["observed_stream"] for e in events if e.get("type") == "summary" and "observed_stream" in e), "?")


def first_error(stderr: str, rc: int) -> str:
    """The line that names the error that ended the trial (a traceback's last), else its exit status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b.*:", line)]
    text = named[-1] if named else lines[-1] if lines else f"exit status {rc}"
    return text[:200]
