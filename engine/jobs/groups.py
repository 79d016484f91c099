"""The queue as a person reads it: a sweep's jobs are ONE thing (n of N runs, an ETA, cancel-all), a lone job is one.

The Launch page's cards and its table both draw these groups, read once per refresh, so they cannot disagree.

    groups = job_groups(limit=30)      # newest first
    g.status, g.counts, g.ended, g.total, g.eta_s, g.eta_basis, g.active_ids
    cancel_jobs(g.active_ids)          # the queued ones first, so the worker takes none of them meanwhile
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from engine.config import RunConfig
from engine.errors import StoreHeld
from engine.jobs.estimate import estimate_duration
from engine.jobs.queue import RAY_SWEEP, cancel, list_jobs, now, with_labels
from engine.paths import Db
from engine.status import ENDED, RunStatus
from engine.store import jobs as job_table

__all__ = ["JobGroup", "cancel_jobs", "job_groups"]

_PIPELINE = ("workload", "model")


@dataclass
class JobGroup:
    key: str  # the sweep id of a sweep's jobs, else the job id
    kind: str  # "run" (a lone job), "sweep" (a sweep's jobs), RAY_SWEEP (a whole sweep as one job)
    label: str
    jobs: list[dict[str, Any]] = field(default_factory=list)  # rows, oldest first (the order the worker takes)
    eta_s: float | None = None
    eta_basis: str = ""

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for j in self.jobs:
            out[j["status"]] = out.get(j["status"], 0) + 1
        return out

    @property
    def status(self) -> str:
        """running while any runs, queued while any waits; then done, or what stopped it (cancelled before failed)."""
        counts = self.counts
        for status in (RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.CANCELLED, RunStatus.FAILED):
            if counts.get(status):
                return str(status)
        return str(RunStatus.DONE)

    @property
    def total(self) -> int:
        return len(self.jobs)

    @property
    def ended(self) -> int:
        return sum(j["status"] in ENDED for j in self.jobs)

    @property
    def active_ids(self) -> list[str]:
        """Queued jobs first, then the running one: the order cancel_jobs needs."""
        return [
            j["job_id"] for status in (RunStatus.QUEUED, RunStatus.RUNNING) for j in self.jobs if j["status"] == status
        ]

    @property
    def run_ids(self) -> list[str]:
        return [j["run_id"] for j in self.jobs if j.get("run_id")]

    @property
    def created_at(self) -> Any:
        return self.jobs[0]["created_at"]

    def config(self, i: int = 0) -> dict[str, Any]:
        return json.loads(self.jobs[i]["config_json"])

    def varied(self) -> list[str]:
        """The config fields whose values differ among the sweep's jobs (its axes, as far as they show)."""
        configs = [json.loads(j["config_json"]) for j in self.jobs]
        return [k for k in configs[0] if len({json.dumps(c.get(k)) for c in configs}) > 1]


def _plain_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame rows as dicts with None where pandas put NaN/NaT."""
    return [
        {k: (None if not isinstance(v, (list, dict)) and pd.isna(v) else v) for k, v in r.items()}
        for r in df.to_dict("records")
    ]


def job_groups(db: Db = None, limit: int = 30) -> list[JobGroup]:
    """The newest `limit` jobs, a sweep's jobs gathered into one group (all of them, even beyond `limit`)."""
    df = list_jobs(db, limit=limit)
    sweep_ids = sorted({s for s, k in zip(df["sweep_id"], df["kind"]) if s and k == "run" and not pd.isna(s)})
    try:
        extra = job_table.sweep_jobs(sweep_ids, db)
    except StoreHeld:  # a program outside LoaderLab holds it for writing: what list_jobs read is all there is
        extra = df.iloc[:0]
    extra = extra[~extra["job_id"].isin(df["job_id"])]
    if len(extra):
        df = pd.concat([df, with_labels(extra)], ignore_index=True)
    groups: dict[str, JobGroup] = {}
    for row in sorted(_plain_rows(df), key=lambda r: (r["created_at"], r["job_id"])):
        lone = row["kind"] == RAY_SWEEP or not row["sweep_id"]
        key = row["job_id"] if lone else row["sweep_id"]
        if key not in groups:
            groups[key] = JobGroup(key, row["kind"] if lone else "sweep", row["label"])
        groups[key].jobs.append(row)
    out = sorted(groups.values(), key=lambda g: (g.jobs[-1]["created_at"], g.key), reverse=True)
    for g in out:
        if g.kind == "sweep":
            g.label = _sweep_label(g)
            g.eta_s, g.eta_basis = _sweep_eta(g, db)
    return out


def _sweep_label(g: JobGroup) -> str:
    first, varied = g.config(), g.varied()
    pipeline = "/".join(str(first.get(k)) for k in _PIPELINE if k not in varied)
    axes = f", varying {', '.join(varied)}" if varied else ""
    return f"sweep of {g.total} run{'' if g.total == 1 else 's'} on {pipeline}{axes}"


def _sweep_eta(g: JobGroup, db: Db) -> tuple[float | None, str]:
    """Seconds until the sweep's last job ends, and what that rests on: its own finished jobs once it has some
    (they ran here, a moment ago), else estimate_duration over what is left."""
    active = [j for j in g.jobs if j["status"] in (RunStatus.QUEUED, RunStatus.RUNNING)]
    if not active:
        return 0.0, "ended"
    took = [
        (j["ended_at"] - j["started_at"]).total_seconds()
        for j in g.jobs
        if j["status"] == RunStatus.DONE and j["started_at"] and j["ended_at"]
    ]
    if took:
        per_run = statistics.median(took)
        lo, hi = f"{min(took):.0f}", f"{max(took):.0f}"
        basis = (
            f"from its {len(took)} finished run{'' if len(took) == 1 else 's'}, "
            f"{lo if lo == hi else f'{lo}–{hi}'} s each"
        )
        remaining = [per_run] * len(active)
    else:
        est = estimate_duration([RunConfig.from_dict(json.loads(j["config_json"])) for j in active], db)
        remaining, basis = [est["seconds"] / max(1, len(active))] * len(active), est["basis"]
    running = [j for j in active if j["status"] == RunStatus.RUNNING and j["started_at"]]
    if running:  # the running one is partly done
        remaining[0] = max(0.0, remaining[0] - (now() - running[0]["started_at"]).total_seconds())
    return sum(remaining), basis


def cancel_jobs(job_ids: list[str], db: Db = None) -> dict[str, str]:
    """Cancel each job in order (engine.jobs.cancel); returns each job's status now. Give the queued ones first
    (JobGroup.active_ids does): cancelling the running one first would let the worker take the next meanwhile."""
    return {job_id: cancel(job_id, db) for job_id in job_ids}
