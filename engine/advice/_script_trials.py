"""The trials of `engine tune -- python train.py` (engine/advice/tune_script.py): the script run once per trial under
the observer, in its own process group, and the figures of each loader it iterated, read from the trial's RunLogs.

    trials = Trials(argv, work_dir, db, t0); trial = trials.run({ENV_STEPS: "40", ...}, timeout_s=60)
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from engine.observe import (ENV_NAME, ENV_PREFIX, ENV_ROOT, ENV_RUNS, ENV_SETTING, ENV_SITE, ENV_STEPS, ENV_STORE,
                            ENV_TRIAL)
from engine.paths import ROOT, Db, db_path
from engine.runlog import read_events

__all__ = ["Trials", "first_error", "merged", "stream_figures"]


class Trials:
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

    def measure(self, result: Any, idx: int, rung: Any, steps: int) -> dict[str, Any]:
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
            s = stream_figures(read_events(run_dir))
            if s is not None:  # NOTE: by line: a loader made anew each epoch is one stream per object, one loader here
                parts.setdefault(s["site"], []).append(s)
        streams = {site: merged(found) for site, found in parts.items()}
        if rc is None:
            return {"status": "timed out", "error": f"past {timeout_s:.0f} s", "wall_s": wall, "streams": streams}
        if rc != 0:
            return {"status": "failed", "error": first_error(err_path.read_text(errors="replace"), rc),
                    "wall_s": wall, "streams": streams}
        return {"status": "done", "wall_s": wall, "streams": streams}


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
    busy = sum(e["data_wait_s"] + e["compute_s"] for e in ordered) - sum(first_waits) + \
        sum(e["ttfb_s"] for e in ordered[1:])
    full = ordered[:-1] if summary.get("trial_stopped_by") == summary["observed_stream"] else ordered
    idle = [e.get("gpu_idle_s") for e in ordered]
    settings = json.loads(summary.get("observed_settings") or "{}")
    wait = sum(e["data_wait_s"] for e in ordered) - ordered[0]["ttfb_s"]
    return {"site": summary["observed_stream"], "settings": settings, "steps": steps, "busy": busy,
            "first_ttfb": ordered[0]["ttfb_s"], "t_start": ordered[0].get("t_start") or 0.0,
            "s_per_batch": busy / steps if steps else math.nan, "peak_bytes": summary.get("peak_rss_bytes"),
            "wait": wait / steps if steps else 0.0,
            "step": sum(e["compute_s"] for e in ordered) / steps if steps else 0.0,
            "gpu_idle_share": None if None in idle else sum(idle) / sum(e["wall_s"] for e in ordered),
            "full_epoch_samples": {e["samples"] for e in full}}


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
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


def first_error(stderr: str, rc: int) -> str:
    """The line that names the error that ended the trial (a traceback's last), else its exit status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b.*:", line)]
    text = named[-1] if named else lines[-1] if lines else f"exit status {rc}"
    return text[:200]
