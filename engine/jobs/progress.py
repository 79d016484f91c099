"""How far a job has got: what the Launch page shows while it runs.

A run's progress comes from its RunLog, tailed from where the last poll stopped, not from the store, so
the per-epoch chart grows while the run is going; a ray-sweep's progress is its runs landed in the store.

    p = job_progress(job_id)        # status, epochs done/total (or runs landed/planned), ETA, epoch rows
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from engine.errors import StoreHeld
from engine.jobs.queue import RAY_SWEEP, find_job, job_spec, marker, now
from engine.paths import Db, runs_dir
from engine.runlog import EPOCH_FIELDS, tail_events
from engine.status import ENDED, RunStatus
from engine.store import jobs as job_table

__all__ = ["job_progress"]


def job_progress(job_id: str, db: Db = None, row: dict[str, Any] | None = None) -> dict[str, Any]:
    """Status, ETA and progress. A run: epochs done/total and per-epoch rows from its RunLog (live while it
    runs). A ray-sweep: runs landed in the store with its sweep_id / runs planned, and counts by status.
    row: the job's row as the caller read it (engine.jobs.job_groups), so its status agrees with the caller's."""
    job = row or find_job(job_id, db)
    spec = job_spec(job["config_json"])
    out = {
        "job_id": job_id,
        "kind": spec.get("kind", "run"),
        "status": job["status"],
        "run_id": job["run_id"],
        "sweep_id": job["sweep_id"],
        "error": job["error"],
        "cancel_requested": job["status"] == RunStatus.RUNNING and marker(db, job_id).exists(),
    }
    if out["kind"] == RAY_SWEEP:
        try:
            landed = job_table.landed_runs(job["sweep_id"], db)
        except StoreHeld:  # held for writing by another program: none can be counted now
            landed = {}
        return {**out, **_sweep_progress(job, spec, landed)}
    return {**out, **_run_progress(job, spec, db)}


def _sweep_progress(job: dict[str, Any], spec: dict[str, Any], landed: dict[str, int]) -> dict[str, Any]:
    done, total = sum(landed.values()), int(spec.get("runs") or 0)
    eta = 0.0 if job["status"] in ENDED else None
    if job["status"] == RunStatus.RUNNING and done and job["started_at"] is not None:
        # runs land at the cluster's pace, several at a time: the mean time per landed run so far
        eta = max(0, total - done) * (now() - job["started_at"]).total_seconds() / done
    return {"runs_done": done, "runs_total": total, "run_counts": landed, "eta_s": eta, "address": spec.get("address")}


def _run_progress(job: dict[str, Any], spec: dict[str, Any], db: Db) -> dict[str, Any]:
    total = int(spec.get("epochs") or 0)
    rows = _epoch_rows(runs_dir(db) / job["run_id"])
    per_model: dict[tuple, int] = {}
    for r in rows:
        key = (r.get("model_idx"), r.get("rank"))
        per_model[key] = per_model.get(key, 0) + 1
    done = min(per_model.values()) if per_model else 0  # the slowest model/rank sets the pace
    eta = None
    if job["status"] in ENDED:
        eta = 0.0
    elif job["status"] == RunStatus.RUNNING and done:
        walls = [r["wall_s"] for r in rows if isinstance(r.get("wall_s"), (int, float))]
        eta = max(0, total - done) * sum(walls) / max(1, len(walls))
    return {"epochs_done": done, "epochs_total": total, "eta_s": eta, "epochs": rows}


_TAILS: dict[Path, tuple[int, list[dict[str, Any]]]] = {}  # run dir -> (bytes read, epoch rows): poll cheaply
_TAILS_LOCK = threading.Lock()


def _epoch_rows(run_dir: Path) -> list[dict[str, Any]]:
    with _TAILS_LOCK:
        offset, rows = _TAILS.get(run_dir, (0, []))
        events, offset = tail_events(run_dir, offset)
        rows = rows + [{k: e.get(k) for k in EPOCH_FIELDS} for e in events if e.get("type") == "epoch"]
        if len(_TAILS) > 256:
            _TAILS.clear()
        _TAILS[run_dir] = (offset, rows)
        return list(rows)
