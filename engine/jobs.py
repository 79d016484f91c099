"""The persistent job queue and its worker: runs launched from the browser outlive the tab and the dashboard.

The queue is the store's `jobs` table (queued -> running -> done | failed | cancelled; `pid` is the worker
that took the job). The worker is its own process, `python -m engine worker` (or `python -m engine.jobs`),
one per store, so one per host with the default store: the live worker holds an flock on
`<jobs_dir>/worker.lock`. It takes the oldest queued job and runs it with engine.runner.launch, whose
subprocess never opens DuckDB nor imports streamlit.

    job_id = submit(cfg); ensure_worker(); job_progress(job_id)   # what the launch page does
    python -m engine worker [--db PATH] [--ensure | --once]        # the worker

NOTE: one job at a time on the whole host, not one per device: runs on two GPUs still share the CPU
cores that load their data, so running them side by side would corrupt both timings.
NOTE: cancelling a running job drops a marker file `<jobs_dir>/<job_id>.cancel` that the worker watches,
so the page never waits for the writer lock while the worker ingests a run. A sweep job's position
(config_idx, repeat_idx) waits in `<jobs_dir>/<job_id>.json`, as the jobs table has no columns for it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import psutil

from engine.config import ConfigError, RunConfig, SweepConfig
from engine.paths import ROOT, db_path, jobs_dir, runs_dir
from engine.runlog import EPOCH_FIELDS, RunLog, iter_events, tail_events
from engine.store import StoreError, connect, ingest_pending, ingest_run

__all__ = ["JOB_STATUSES", "cancel", "ensure_worker", "estimate_duration", "job_progress", "list_jobs",
           "run_worker", "stop_worker", "submit", "submit_sweep", "worker_alive", "worker_main", "worker_pid"]

log = logging.getLogger(__name__)

JOB_STATUSES = ("queued", "running", "done", "failed", "cancelled")
STALE_AFTER_S = 30.0  # a run whose heartbeat is older is marked killed (DESIGN: stale runs)
SCAN_EVERY_S = 30.0  # how often an idle worker looks for stale or un-ingested RunLogs
# Duration estimate when the store has no similar run: seconds per sample-epoch (a small CPU MLP step)
# and the fixed cost of one run (subprocess start, torch import, dataset build).
DEFAULT_S_PER_SAMPLE = 1e-3
RUN_OVERHEAD_S = 5.0
_SCHEMA = pa.schema([("job_id", pa.string()), ("created_at", pa.timestamp("us")), ("status", pa.string()),
                     ("config_json", pa.string()), ("sweep_id", pa.string()), ("run_id", pa.string()),
                     ("device", pa.string())])


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # the store's TIMESTAMPs are naive UTC


def _marker(db: Any, job_id: str, suffix: str = ".cancel") -> Path:
    return jobs_dir(db) / f"{job_id}{suffix}"


# ---------------------------------------------------------------------------- queue (the page's side)


def submit(cfg: RunConfig, *, sweep_id: str | None = None, db: str | os.PathLike | None = None) -> str:
    """Queue one validated run; returns the job id. The run id is fixed now so the page can link to it."""
    return _insert([(cfg, None)], sweep_id, db)[0]


def submit_sweep(sweep: SweepConfig, db: str | os.PathLike | None = None) -> list[str]:
    """Queue every planned run of a sweep, in its seeded random order; returns the job ids in that order."""
    from engine.sweep import new_sweep_id  # noqa: PLC0415

    repeats: dict[int, int] = {}
    items = []
    for config_idx, cfg in sweep.plan():
        repeats[config_idx] = repeats.get(config_idx, -1) + 1
        items.append((cfg, {"config_idx": config_idx, "repeat_idx": repeats[config_idx]}))
    return _insert(items, new_sweep_id(sweep.name), db)


def _insert(items: list[tuple[RunConfig, dict | None]], sweep_id: str | None, db: Any) -> list[str]:
    from engine.devices import resolve  # noqa: PLC0415 - imports torch
    from engine.runner import new_run_id  # noqa: PLC0415

    stamp, now, run_ids = f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}", _now(), set()
    rows = []
    jobs_dir(db).mkdir(parents=True, exist_ok=True)
    for i, (cfg, position) in enumerate(items):
        job_id = f"job-{stamp}-{i:04d}"  # NOTE: the index suffix orders a sweep's jobs within one created_at
        while (run_id := new_run_id()) in run_ids:
            pass
        run_ids.add(run_id)
        if position:
            _marker(db, job_id, ".json").write_text(json.dumps(position))
        rows.append({"job_id": job_id, "created_at": now, "status": "queued", "config_json": cfg.to_json(),
                     "sweep_id": sweep_id, "run_id": run_id, "device": str(resolve(cfg.device))})
    table = pa.Table.from_pylist(rows, schema=_SCHEMA)
    with connect(db, read_only=False) as conn:
        conn.register("_new_jobs", table)
        conn.execute("INSERT INTO jobs BY NAME SELECT * FROM _new_jobs")
        conn.unregister("_new_jobs")
    log.info("queued %d job(s)%s", len(rows), f" of sweep {sweep_id}" if sweep_id else "")
    return [r["job_id"] for r in rows]


def list_jobs(db: str | os.PathLike | None = None, limit: int = 100) -> pd.DataFrame:
    """Newest first, with a short `label` of the config (workload/loader×workers/model/mode)."""
    with connect(db, read_only=True) as conn:
        df = conn.execute("SELECT * FROM jobs ORDER BY created_at DESC, job_id DESC LIMIT ?", [limit]).df()
    df["label"] = [_label(c) for c in df["config_json"]]
    return df


def _label(config_json: str) -> str:
    c = json.loads(config_json)
    workers = f"×{c.get('workers')}" if c.get("workers") else ""
    return f"{c.get('workload')}/{c.get('loader')}{workers}/{c.get('model')}/{c.get('mode')}"


def _job(conn: Any, job_id: str) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM jobs WHERE job_id = ?", [job_id])
    row = cur.fetchone()
    if row is None:
        raise ValueError(f"job '{job_id}' does not exist; list_jobs() shows the queue")
    return dict(zip([d[0] for d in cur.description], row))


def cancel(job_id: str, db: str | os.PathLike | None = None) -> str:
    """Cancel a job; returns its status now. Queued: cancelled at once. Running: the worker kills the
    run's process group within a second and marks it cancelled (finished epochs kept). Ended: unchanged."""
    with connect(db, read_only=True) as conn:
        status = _job(conn, job_id)["status"]
    if status == "queued":
        with connect(db, read_only=False) as conn:
            hit = conn.execute("UPDATE jobs SET status = 'cancelled', ended_at = ?, error = ? WHERE job_id = ? "
                               "AND status = 'queued' RETURNING job_id",
                               [_now(), "cancelled before it started", job_id]).fetchone()
            status = "cancelled" if hit else _job(conn, job_id)["status"]  # else the worker took it meanwhile
    if status == "running":
        _marker(db, job_id).touch()
    return status


def job_progress(job_id: str, db: str | os.PathLike | None = None) -> dict[str, Any]:
    """Status, epochs done/total, ETA and per-epoch rows, read from the run's RunLog (live while it runs)."""
    with connect(db, read_only=True) as conn:
        job = _job(conn, job_id)
    total = int(json.loads(job["config_json"]).get("epochs") or 0)
    rows = _epoch_rows(runs_dir(db) / job["run_id"])
    per_model: dict[tuple, int] = {}
    for r in rows:
        key = (r.get("model_idx"), r.get("rank"))
        per_model[key] = per_model.get(key, 0) + 1
    done = min(per_model.values()) if per_model else 0  # the slowest model/rank sets the pace
    eta = None
    if job["status"] in ("done", "failed", "cancelled"):
        eta = 0.0
    elif job["status"] == "running" and done:
        walls = [r["wall_s"] for r in rows if isinstance(r.get("wall_s"), (int, float))]
        eta = max(0, total - done) * sum(walls) / max(1, len(walls))
    return {"job_id": job_id, "status": job["status"], "run_id": job["run_id"], "error": job["error"],
            "epochs_done": done, "epochs_total": total, "eta_s": eta, "epochs": rows,
            "cancel_requested": job["status"] == "running" and _marker(db, job_id).exists()}


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


def _lock_path(db: Any) -> Path:
    path = jobs_dir(db) / "worker.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _try_lock(db: Any) -> int | None:
    """An fd holding the worker lock, or None when a live worker holds it."""
    fd = os.open(_lock_path(db), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def worker_alive(db: str | os.PathLike | None = None) -> bool:
    fd = _try_lock(db)
    if fd is None:
        return True
    _unlock(fd)
    return False


def worker_pid(db: str | os.PathLike | None = None) -> int | None:
    """The live worker's pid (it writes it into the lock file), or None."""
    if not worker_alive(db):
        return None
    text = _lock_path(db).read_text().strip()
    return int(text) if text.isdigit() else None


def ensure_worker(db: str | os.PathLike | None = None) -> int | None:
    """Start a detached worker if none is alive; returns its pid, or None if one was alive already.

    NOTE: the lock is taken here and handed to the child (pass_fds), so two quick calls can never start two.
    """
    fd = _try_lock(db)
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


# ---------------------------------------------------------------------------- the worker loop


def run_worker(db: str | os.PathLike | None = None, *, once: bool = False, poll_s: float = 1.0,
               lock_fd: int | None = None) -> int:
    """Run queued jobs one at a time until SIGTERM (or, with once, until the queue is empty). Exit status 0."""
    fd = lock_fd if lock_fd is not None else _try_lock(db)
    if fd is None:
        log.info("a worker for %s is alive already (pid %s); exiting", db_path(db), worker_pid(db))
        return 0
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    stop = threading.Event()
    restore = _on_signals(stop)
    log.info("job worker pid %d serving %s", os.getpid(), db_path(db))
    try:
        _recover(db)
        last_scan = 0.0
        while not stop.is_set():
            try:
                if time.monotonic() - last_scan > SCAN_EVERY_S:
                    ingest_pending(db=db, stale_after_s=STALE_AFTER_S)
                    last_scan = time.monotonic()
                job = _take(db)
            except StoreError as e:  # e.g. a user's read-write duckdb shell: wait, never crash the worker
                log.warning("store busy, retrying: %s", e)
                stop.wait(5 * poll_s)
                continue
            if job is not None:
                _run_job(job, db, stop, poll_s)
            elif once:
                break
            else:
                stop.wait(poll_s)
    finally:
        restore()
        _unlock(fd)
        log.info("job worker pid %d stopped", os.getpid())
    return 0


def _on_signals(stop: threading.Event):
    """SIGTERM/SIGINT set `stop`: the current run is cancelled and the loop ends. Returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]


def _take(db: Any) -> dict[str, Any] | None:
    """Mark the oldest queued job running and return it; a read-only peek first keeps idle polls lock-free."""
    with connect(db, read_only=True) as conn:
        if not conn.execute("SELECT count(*) FROM jobs WHERE status = 'queued'").fetchone()[0]:
            return None
    with connect(db, read_only=False) as conn:
        cur = conn.execute(
            "UPDATE jobs SET status = 'running', pid = ?, started_at = ? WHERE job_id = (SELECT job_id FROM jobs "
            "WHERE status = 'queued' ORDER BY created_at, job_id LIMIT 1) AND status = 'queued' RETURNING *",
            [os.getpid(), _now()])
        row = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], row)) if row else None


def _finish(db: Any, job_id: str, status: str, error: str | None) -> None:
    with connect(db, read_only=False) as conn:
        conn.execute("UPDATE jobs SET status = ?, error = ?, ended_at = ? WHERE job_id = ?",
                     [status, error, _now(), job_id])
    for suffix in (".cancel", ".json"):
        _marker(db, job_id, suffix).unlink(missing_ok=True)
    log.info("job %s %s%s", job_id, status, f": {error}" if error else "")


def _job_status(run_status: str) -> str:
    return run_status if run_status in ("done", "cancelled") else "failed"


def _run_job(job: dict[str, Any], db: Any, stop: threading.Event, poll_s: float) -> None:
    from engine.runner import launch  # noqa: PLC0415

    job_id, marker = job["job_id"], _marker(db, job["job_id"])
    position = _marker(db, job_id, ".json")
    meta = {"run_id": job["run_id"], "sweep_id": job["sweep_id"], "job_id": job_id,
            **(json.loads(position.read_text()) if position.exists() else {})}
    if marker.exists():
        return _finish(db, job_id, "cancelled", "cancelled before it started")
    try:
        cfg = RunConfig.from_dict(json.loads(job["config_json"]))  # this machine may differ from the submitter's
        with _CancelWatch(marker, stop, poll_s) as watch:
            result = launch(cfg, db=db, meta=meta, cancel=watch.event)
        status, error = _job_status(result.status), result.error
        if status == "cancelled" and stop.is_set() and not marker.exists():
            error = "the worker was stopped (SIGTERM); finished epochs kept"
    except ConfigError as e:
        status, error = "failed", f"invalid config on this machine: {e}"
    except Exception as e:  # noqa: BLE001 - recorded on the job; the worker goes on with the next one
        log.exception("job %s failed", job_id)
        status, error = "failed", f"{type(e).__name__}: {e}"
    _finish(db, job_id, status, error)


class _CancelWatch:
    """Sets `event` when the job's cancel marker appears or the worker is told to stop."""

    def __init__(self, marker: Path, stop: threading.Event, poll_s: float):
        self.marker, self.stop, self.poll_s = marker, stop, min(poll_s, 0.5)
        self.event, self._done = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loaderlab-cancel-watch", daemon=True)

    def _loop(self) -> None:
        while not self._done.wait(self.poll_s):
            if self.stop.is_set() or self.marker.exists():
                self.event.set()
                return

    def close(self) -> None:
        self._done.set()
        self._thread.join()

    def __enter__(self) -> "_CancelWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _recover(db: Any) -> None:
    """Jobs left running by a dead worker: kill their orphaned run, keep its finished epochs, close the job."""
    with connect(db, read_only=True) as conn:
        stale = conn.execute("SELECT job_id, run_id FROM jobs WHERE status = 'running'").fetchall()
    for job_id, run_id in stale:
        run_dir = runs_dir(db) / run_id
        end = next((e for e in iter_events(run_dir) if e.get("type") == "end"), None)
        if end is not None:  # the run ended; only the worker's bookkeeping was lost
            status, error = _job_status(end.get("status")), end.get("error")
        else:
            _kill_orphan(run_dir)
            status, error = "failed", "worker died; finished epochs kept"
            if (run_dir / "events.jsonl").exists():
                with RunLog(run_dir) as runlog:
                    runlog.write("end", status="killed", error=error)
        if (run_dir / "events.jsonl").exists():
            try:
                ingest_run(run_dir, db=db, job_id=job_id)
            except ValueError as e:  # a log without a start event: nothing to keep
                log.warning("run %s of job %s not ingested: %s", run_id, job_id, e)
        _finish(db, job_id, status, error)


def _kill_orphan(run_dir: Path) -> None:
    from engine.runner import kill_group  # noqa: PLC0415

    try:
        pid = int((run_dir / "pid").read_text())
        if str(run_dir) not in " ".join(psutil.Process(pid).cmdline()):
            return  # the pid was reused by something else
    except (OSError, ValueError, psutil.Error):
        return
    kill_group(pid)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and psutil.pid_exists(pid):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.05)


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
