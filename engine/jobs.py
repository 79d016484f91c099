"""The persistent job queue: runs launched from the browser outlive the tab and the dashboard.

The queue is the store's `jobs` table (queued -> running -> done | failed | cancelled; `pid` is the worker
that took the job). The worker is its own process, `python -m engine worker` (or `python -m engine.jobs`),
one per store, so one per host with the default store: the live worker holds an flock on
`<jobs_dir>/worker.lock`. Its loop is engine/_worker.py. A job is one run (engine.runner.launch, whose
subprocess never opens DuckDB nor imports streamlit), or a whole sweep on a Ray cluster (kind "ray-sweep").

    job_id = submit(cfg); ensure_worker(); job_progress(job_id)   # what the launch page does
    job_id = submit_ray_sweep(sweep, address=default_ray_address())  # the sweep as ONE job, run through Ray
    python -m engine worker [--db PATH] [--ensure | --once]        # the worker

NOTE: one job at a time on the whole host, not one per device: runs on two GPUs still share the CPU
cores that load their data, so running them side by side would corrupt both timings.
NOTE: cancelling a running job drops a marker file `<jobs_dir>/<job_id>.cancel` that the worker watches,
so the page never waits for the writer lock while the worker ingests a run. A sweep job's position
(config_idx, repeat_idx) waits in `<jobs_dir>/<job_id>.json`, as the jobs table has no columns for it.
A ray-sweep job keeps its spec in config_json ({"kind", "sweep", "address", "runs"}) and has no run_id:
its runs are the store's runs with its sweep_id.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import psutil

from engine import _spool
from engine._browser import check_browser_config
from engine._worker import RAY_SWEEP, job_spec, lock_path, marker, now, run_worker, try_lock, unlock
from engine.config import RunConfig, SweepConfig
from engine.errors import ConfigError
from engine.paths import ROOT, db_path, jobs_dir, runs_dir
from engine.ray_executor import INSTALL_HINT, ray_available
from engine.runlog import EPOCH_FIELDS, tail_events
from engine.runner import new_run_id
from engine.store import StoreHeld, connect
from engine.store.ingest import DEFER_AFTER_S
from engine.sweep import new_sweep_id

__all__ = ["INSTALL_HINT", "JOB_STATUSES", "RAY_ADDRESS_ENV", "cancel", "default_ray_address", "ensure_worker",
           "estimate_duration", "job_progress", "list_jobs", "ray_available", "run_worker", "stop_worker", "submit",
           "submit_ray_sweep", "submit_sweep", "worker_alive", "worker_main", "worker_pid"]

log = logging.getLogger(__name__)

JOB_STATUSES = ("queued", "running", "done", "failed", "cancelled")
RAY_ADDRESS_ENV = "LOADERLAB_RAY_ADDRESS"  # the launch page's default Ray address; empty: a local instance
# Duration estimate when the store has no similar run: seconds per sample-epoch (a small CPU MLP step)
# and the fixed cost of one run (subprocess start, torch import, dataset build).
DEFAULT_S_PER_SAMPLE = 1e-3
RUN_OVERHEAD_S = 5.0
_ENDED = ("done", "failed", "cancelled")
_SCHEMA = pa.schema([("job_id", pa.string()), ("created_at", pa.timestamp("us")), ("status", pa.string()),
                     ("config_json", pa.string()), ("sweep_id", pa.string()), ("run_id", pa.string()),
                     ("device", pa.string())])


# ---------------------------------------------------------------------------- queue (the page's side)


def submit(cfg: RunConfig, *, sweep_id: str | None = None, db: str | os.PathLike | None = None,
           origin: str = "cli") -> str:
    """Queue one validated run; returns the job id. The run id is fixed now so the page can link to it.

    origin="browser" adds the browser's rules (engine.config.check_browser_config) before anything is stored.
    """
    _check_origin([cfg], origin)
    return _insert([(cfg, None)], sweep_id, db)[0]


def _check_origin(configs: list[RunConfig], origin: str) -> None:
    if origin == "browser":
        for cfg in configs:
            check_browser_config(cfg)
    elif origin != "cli":
        raise ValueError(f"origin must be 'cli' or 'browser', not {origin!r}")


def submit_sweep(sweep: SweepConfig, db: str | os.PathLike | None = None, origin: str = "cli") -> list[str]:
    """Queue every planned run of a sweep, in its seeded random order; returns the job ids in that order."""
    _check_origin(sweep.configs(), origin)
    repeats: dict[int, int] = {}
    items = []
    for config_idx, cfg in sweep.plan():
        repeats[config_idx] = repeats.get(config_idx, -1) + 1
        items.append((cfg, {"config_idx": config_idx, "repeat_idx": repeats[config_idx]}))
    return _insert(items, new_sweep_id(sweep.name), db)


def default_ray_address() -> str:
    """$LOADERLAB_RAY_ADDRESS ("auto", "host:port" or "ray://host:port"), or "" for a local Ray instance."""
    return os.environ.get(RAY_ADDRESS_ENV, "").strip()


def submit_ray_sweep(sweep: SweepConfig | RunConfig, *, address: str | None = None,
                     db: str | os.PathLike | None = None, origin: str = "cli") -> str:
    """Queue a whole sweep (or one run) as ONE job the worker runs on a Ray cluster; returns the job id.

    address: "auto", "host:port" or "ray://host:port"; None or "" starts a local Ray instance (127.0.0.1).
    """
    if not ray_available():
        raise ConfigError("target", f"a Ray cluster target needs Ray, which is not installed: `{INSTALL_HINT}`")
    if isinstance(sweep, RunConfig):
        sweep = SweepConfig.from_dict({"name": "run", "base": sweep.to_dict()})
    _check_origin(sweep.configs(), origin)
    address = (address or "").strip() or None
    if address and any(c.isspace() for c in address):
        raise ConfigError("ray_address", f"{address!r} has spaces; use auto, host:port or ray://host:port")
    spec = {"kind": RAY_SWEEP, "sweep": dataclasses.asdict(sweep), "address": address, "runs": len(sweep.plan()),
            "cwd": os.getcwd()}  # the submitter's folder: its runs import a user's module from there
    row = {"job_id": _job_ids(1)[0], "created_at": now(), "status": "queued", "config_json": json.dumps(spec),
           "sweep_id": new_sweep_id(sweep.name), "run_id": None, "device": f"ray:{address or 'local'}"}
    _write([row], db)
    log.info("queued ray-sweep job %s: %d runs of sweep %s", row["job_id"], spec["runs"], row["sweep_id"])
    return row["job_id"]


def _job_ids(n: int) -> list[str]:
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    return [f"job-{stamp}-{i:04d}" for i in range(n)]  # NOTE: the index orders a sweep's jobs within one created_at


def _insert(items: list[tuple[RunConfig, dict | None]], sweep_id: str | None, db: Any) -> list[str]:
    # NOTE: imported here: engine.devices imports torch, which the dashboard loads only once a job is queued
    from engine.devices import resolve  # noqa: PLC0415

    created, run_ids, rows = now(), set(), []
    jobs_dir(db).mkdir(parents=True, exist_ok=True)
    for job_id, (cfg, position) in zip(_job_ids(len(items)), items):
        while (run_id := new_run_id()) in run_ids:
            pass
        run_ids.add(run_id)
        # the submitter's folder too: the run imports a user's module from there, as a CLI run would (meta cwd)
        marker(db, job_id, ".json").write_text(json.dumps({"cwd": os.getcwd(), **(position or {})}))
        rows.append({"job_id": job_id, "created_at": created, "status": "queued", "config_json": cfg.to_json(),
                     "sweep_id": sweep_id, "run_id": run_id, "device": str(resolve(cfg.device))})
    _write(rows, db)
    log.info("queued %d job(s)%s", len(rows), f" of sweep {sweep_id}" if sweep_id else "")
    return [r["job_id"] for r in rows]


def _write(rows: list[dict[str, Any]], db: Any) -> None:
    """Into the jobs table; while a program outside LoaderLab holds the store, into the spool (engine/_spool.py),
    which the worker runs from at once and moves into the store when it can: a launch never waits for a notebook."""
    table = pa.Table.from_pylist(rows, schema=_SCHEMA)
    try:
        with connect(db, read_only=False, outside_wait_s=DEFER_AFTER_S) as conn:
            conn.register("_new_jobs", table)
            conn.execute("INSERT INTO jobs BY NAME SELECT * FROM _new_jobs")
            conn.unregister("_new_jobs")
    except StoreHeld as e:
        for row in rows:
            _spool.put(db, row)
        log.info("the store is held (%s): %d job(s) queued beside it; they run now and are stored later",
                 e.holder or "another program", len(rows))


def list_jobs(db: str | os.PathLike | None = None, limit: int = 100) -> pd.DataFrame:
    """Newest first, with a `kind` ("run" or "ray-sweep") and a short `label` of the config.

    Jobs spooled while the store was held (engine/_spool.py) are laid over the store's rows."""
    try:
        with connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S) as conn:
            df = conn.execute("SELECT * FROM jobs ORDER BY created_at DESC, job_id DESC LIMIT ?", [limit]).df()
    except StoreHeld:  # held for writing by another program: the spool is all that can be read
        df = pd.DataFrame(columns=_spool.COLUMNS.names)
    spooled = _spool.rows(db)
    if spooled:
        extra = pd.DataFrame(spooled, columns=_spool.COLUMNS.names)
        df = pd.concat([df[~df["job_id"].isin(extra["job_id"])], extra], ignore_index=True) if len(df) else extra
        df = df.sort_values(["created_at", "job_id"], ascending=False).head(limit).reset_index(drop=True)
    specs = [job_spec(c) for c in df["config_json"]]
    df["kind"] = [s.get("kind", "run") for s in specs]
    df["label"] = [_label(s) for s in specs]
    return df


def _label(c: dict[str, Any]) -> str:
    if c.get("kind") == RAY_SWEEP:
        runs = f"{c.get('runs')} run{'' if c.get('runs') == 1 else 's'}"
        return f"Ray sweep {c['sweep'].get('name')}: {runs} on {c.get('address') or 'a local instance'}"
    workers = f"×{c.get('workers')}" if c.get("workers") else ""
    return f"{c.get('workload')}/{c.get('loader')}{workers}/{c.get('model')}/{c.get('mode')}"


def _reader(stack: contextlib.ExitStack, db: Any) -> Any:
    """A read-only connection kept open by `stack`, or None while another program holds the store for writing."""
    try:
        return stack.enter_context(connect(db, read_only=True, outside_wait_s=DEFER_AFTER_S))
    except StoreHeld:
        return None


def _job(conn: Any, job_id: str, db: Any) -> dict[str, Any]:
    """The job's row: its spooled row if it has one (the newer), else the store's (conn may be None: held)."""
    spooled = _spool.row(db, job_id)
    if spooled is not None:
        return spooled
    cur = conn.execute("SELECT * FROM jobs WHERE job_id = ?", [job_id]) if conn is not None else None
    row = cur.fetchone() if cur is not None else None
    if row is None:
        raise ValueError(f"job '{job_id}' does not exist; list_jobs() shows the queue")
    return dict(zip([d[0] for d in cur.description], row))


def cancel(job_id: str, db: str | os.PathLike | None = None) -> str:
    """Cancel a job; returns its status now. Queued: cancelled at once. Running: the worker kills the
    run's process group (or cancels the Ray sweep's trials) within a second and marks it cancelled
    (finished epochs kept). Ended: unchanged."""
    with contextlib.ExitStack() as stack:
        job = _job(_reader(stack, db), job_id, db)
    status = job["status"]
    if status == "queued":
        try:
            if _spool.row(db, job_id) is not None:
                raise StoreHeld("spooled")  # it lives in the spool until the worker can store it
            with connect(db, read_only=False, outside_wait_s=DEFER_AFTER_S) as conn:
                hit = conn.execute("UPDATE jobs SET status = 'cancelled', ended_at = ?, error = ? WHERE job_id = ? "
                                   "AND status = 'queued' RETURNING job_id",
                                   [now(), "cancelled before it started", job_id]).fetchone()
                status = "cancelled" if hit else _job(conn, job_id, db)["status"]  # else the worker took it
        except StoreHeld:
            _spool.put(db, {**job, "status": "cancelled", "ended_at": now(), "error": "cancelled before it started"})
            status = "cancelled"
    if status == "running":
        marker(db, job_id).touch()
    return status


def job_progress(job_id: str, db: str | os.PathLike | None = None) -> dict[str, Any]:
    """Status, ETA and progress. A run: epochs done/total and per-epoch rows from its RunLog (live while it
    runs). A ray-sweep: runs landed in the store with its sweep_id / runs planned, and counts by status."""
    with contextlib.ExitStack() as stack:
        conn = _reader(stack, db)
        job = _job(conn, job_id, db)
        spec = job_spec(job["config_json"])
        if spec.get("kind") == RAY_SWEEP:
            landed = dict(conn.execute("SELECT status, count(*) FROM runs WHERE sweep_id = ? GROUP BY status",
                                       [job["sweep_id"]]).fetchall()) if conn is not None else {}
    out = {"job_id": job_id, "kind": spec.get("kind", "run"), "status": job["status"], "run_id": job["run_id"],
           "sweep_id": job["sweep_id"], "error": job["error"],
           "cancel_requested": job["status"] == "running" and marker(db, job_id).exists()}
    if out["kind"] == RAY_SWEEP:
        return {**out, **_sweep_progress(job, spec, landed)}
    return {**out, **_run_progress(job, spec, db)}


def _sweep_progress(job: dict[str, Any], spec: dict[str, Any], landed: dict[str, int]) -> dict[str, Any]:
    done, total = sum(landed.values()), int(spec.get("runs") or 0)
    eta = 0.0 if job["status"] in _ENDED else None
    if job["status"] == "running" and done and job["started_at"] is not None:
        # runs land at the cluster's pace, several at a time: the mean time per landed run so far
        eta = max(0, total - done) * (now() - job["started_at"]).total_seconds() / done
    return {"runs_done": done, "runs_total": total, "run_counts": landed, "eta_s": eta,
            "address": spec.get("address")}


def _run_progress(job: dict[str, Any], spec: dict[str, Any], db: Any) -> dict[str, Any]:
    total = int(spec.get("epochs") or 0)
    rows = _epoch_rows(runs_dir(db) / job["run_id"])
    per_model: dict[tuple, int] = {}
    for r in rows:
        key = (r.get("model_idx"), r.get("rank"))
        per_model[key] = per_model.get(key, 0) + 1
    done = min(per_model.values()) if per_model else 0  # the slowest model/rank sets the pace
    eta = None
    if job["status"] in _ENDED:
        eta = 0.0
    elif job["status"] == "running" and done:
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


def estimate_duration(configs: list[RunConfig], db: str | os.PathLike | None = None) -> dict[str, Any]:
    """Seconds the configs will take: per run, RUN_OVERHEAD_S + seconds per sample × samples × passes.

    Seconds per sample is the median epoch_s / n_samples of finished runs with the same workload and model,
    else DEFAULT_S_PER_SAMPLE. Passes are the epochs, plus one for the lower-bound calibration.
    """
    with connect(db, read_only=True) as conn:
        seen = {(w, m): s for w, m, s in conn.execute(
            "SELECT workload, model, median(epoch_s / n_samples) FROM runs WHERE status = 'done' AND NOT "
            "coalesce(deleted, false) AND epoch_s > 0 AND n_samples > 0 GROUP BY ALL").fetchall()}
    total, known = 0.0, 0
    for c in configs:
        per_sample = seen.get((c.workload, c.model))
        known += per_sample is not None
        total += RUN_OVERHEAD_S + (per_sample or DEFAULT_S_PER_SAMPLE) * c.n_samples * (c.epochs + int(c.bound))
    return {"seconds": total, "runs": len(configs), "from_history": known}


# ---------------------------------------------------------------------------- worker process management


def worker_alive(db: str | os.PathLike | None = None) -> bool:
    fd = try_lock(db)
    if fd is None:
        return True
    unlock(fd)
    return False


def worker_pid(db: str | os.PathLike | None = None) -> int | None:
    """The live worker's pid (it writes it into the lock file), or None."""
    if not worker_alive(db):
        return None
    text = lock_path(db).read_text().strip()
    return int(text) if text.isdigit() else None


def ensure_worker(db: str | os.PathLike | None = None) -> int | None:
    """Start a detached worker if none is alive; returns its pid, or None if one was alive already.

    NOTE: the lock is taken here and handed to the child (pass_fds), so two quick calls can never start two.
    """
    fd = try_lock(db)
    if fd is None:
        return None
    try:
        path = db_path(db)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        with open(jobs_dir(db) / "worker.log", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "engine.jobs", "--db", str(path), "--lock-fd", str(fd)],
                                    cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    pass_fds=(fd,), start_new_session=True)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{proc.pid}\n".encode(), 0)
    finally:
        os.close(fd)  # the child's copy keeps the lock
    log.info("started job worker pid %d for %s (log: %s)", proc.pid, path, jobs_dir(db) / "worker.log")
    return proc.pid


def stop_worker(db: str | os.PathLike | None = None, timeout_s: float = 30.0) -> bool:
    """SIGTERM the worker (it cancels its run and exits); SIGKILL it past timeout_s. True if one was stopped."""
    pid = worker_pid(db)
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        proc.wait(timeout_s)
    except psutil.TimeoutExpired:
        proc.kill()
    except psutil.NoSuchProcess:
        pass
    return True


def worker_main(argv: list[str]) -> int:
    """`python -m engine worker`: run the job worker in the foreground, or --ensure one runs in the background."""
    p = argparse.ArgumentParser(prog="python -m engine worker", description=worker_main.__doc__)
    p.add_argument("--db", default=None, help="store file (default: $LOADERLAB_DB or data/loaderlab.duckdb)")
    p.add_argument("--ensure", action="store_true", help="start a detached worker if none is alive, then return")
    p.add_argument("--once", action="store_true", help="run the queued jobs, then exit")
    p.add_argument("--poll-s", type=float, default=1.0, help="seconds between looks at an empty queue")
    p.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)  # handed over by ensure_worker
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("engine").setLevel(logging.INFO)
    if args.ensure:
        pid = ensure_worker(args.db)
        print(f"worker started (pid {pid})" if pid else f"worker already running (pid {worker_pid(args.db)})")
        return 0
    return run_worker(args.db, once=args.once, poll_s=args.poll_s, lock_fd=args.lock_fd)


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
