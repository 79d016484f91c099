"""The job worker: its own process, `python -m engine worker`, that takes the oldest queued job, runs it and
closes it, one at a time. How the dashboard starts, finds and stops it: engine/jobs/control.py.

One worker per store, so one per host with the default store: the live worker holds an flock on
`<jobs_dir>/worker.lock` (its pid is written into the file). A job is one run (engine.run.runner.launch, a
subprocess that never opens DuckDB nor imports streamlit, forked from the worker's warm parent) or, kind
"ray-sweep", a whole sweep on a Ray cluster (engine.sweeps.ray.run_sweep_ray, whose driver ingests each
run as it lands). Either way Cancel is the marker file `<jobs_dir>/<job_id>.cancel`, watched here and
turned into the executor's cancel Event.

    python -m engine worker [--db PATH] [--ensure | --once]     # engine/cli/ parses the flags

NOTE: one job at a time on the whole host, not one per device: runs on two GPUs still share the CPU
cores that load their data, so running them side by side would corrupt both timings.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psutil

from engine.config import RunConfig, SweepConfig
from engine.errors import ConfigError, StoreBusy, StoreError
from engine.jobs import spool
from engine.jobs.control import lock_path, try_lock, unlock, write_pid
from engine.jobs.queue import RAY_SWEEP, job_spec, marker, now
from engine.paths import Db, db_path, runs_dir
from engine.run.runner import kill_group, launch
from engine.run.warm import WarmParent
from engine.runlog import dead_end, end_dead_run, iter_events
from engine.status import RunStatus
from engine.store import ingest_pending, ingest_run
from engine.store import jobs as job_table
from engine.store.ingest import DEFER_AFTER_S
from engine.sweeps.ray import reap_leftovers, run_sweep_ray

__all__ = ["run_worker"]

log = logging.getLogger(__name__)

STALE_AFTER_S = 30.0  # a run whose heartbeat is older is marked killed (docs/design.md: stale runs)
SCAN_EVERY_S = 30.0  # how often an idle worker looks for stale or un-ingested RunLogs


def run_worker(db: Db = None, *, once: bool = False, poll_s: float = 1.0, lock_fd: int | None = None) -> int:
    """Run queued jobs one at a time until SIGTERM (or, with once, until the queue is empty). Exit status 0."""
    fd = lock_fd if lock_fd is not None else try_lock(db)
    if fd is None:
        log.info("a worker for %s is alive already (see %s); exiting", db_path(db), lock_path(db))
        return 0
    write_pid(fd, os.getpid())
    stop = threading.Event()
    restore = _on_signals(stop)
    log.info("job worker pid %d serving %s", os.getpid(), db_path(db))
    _reap_ray(db)
    try:
        # NOTE: each run forks from the warm parent (engine/run/warm.py), which goes with the worker: no process left
        with WarmParent() as warm:
            _loop(db, stop, warm, once=once, poll_s=poll_s)
    finally:
        restore()
        unlock(fd)
        log.info("job worker pid %d stopped", os.getpid())
    return 0


def _loop(db: Db, stop: threading.Event, warm: WarmParent, *, once: bool, poll_s: float) -> None:
    """Take the oldest job and run it, the store's chores first; while the store is held, run jobs anyway."""
    chores, last_error = _Chores(db), None
    while not stop.is_set():
        try:
            chores.run()
            job, last_error = _take(db), None
        except StoreError as e:  # e.g. a user's duckdb shell or notebook: never wait for it, never crash
            job, last_error = _take_while_held(db, e, last_error)
            if job is None:
                stop.wait(5 * poll_s)
                continue
        if job is not None:
            _run_job(job, db, stop, poll_s, warm)
            chores.rescan_soon()  # its run may have been left in its RunLog (store held): store it next loop
        elif once:
            break
        else:
            stop.wait(poll_s)


class _Chores:
    """What the loop does for the store before each take: flush the spool, recover once, rescan now and then."""

    def __init__(self, db: Db):
        self.db, self.recovered, self.last_scan = db, False, 0.0

    def run(self) -> None:
        spool.flush(self.db)  # jobs queued or closed while the store was held; before _recover, which may close them
        if not self.recovered:  # in the loop: a store held at start-up is waited out like any other
            _recover(self.db)
            self.recovered = True
        if time.monotonic() - self.last_scan > SCAN_EVERY_S:
            ingest_pending(db=self.db, stale_after_s=STALE_AFTER_S)
            self.last_scan = time.monotonic()

    def rescan_soon(self) -> None:
        self.last_scan = 0.0


def _take_while_held(db: Db, e: StoreError, last_error: str | None) -> tuple[dict[str, Any] | None, str]:
    """The job to run while the store cannot be written (from the spool, or the store while it can be read), and
    the error, logged once per holder rather than every 5 s for hours.

    NOTE: jobs still run; their RunLogs and statuses wait beside the store and are stored by the loop as soon as
    the holder closes it."""
    job = _take_held(db) if isinstance(e, StoreBusy) else None
    if str(e) != last_error:
        log.warning("store not writable now (jobs still run; results are stored when it is): %s", e)
    return job, str(e)


def _reap_ray(db: Db) -> None:
    """Stop what a killed worker's local Ray instance left running (it logs what it stopped); never fatal."""
    try:
        reap_leftovers(db)
    except Exception:  # noqa: BLE001 - a leftover must not keep the queue from running
        log.exception("could not check for leftover Ray processes")


def _on_signals(stop: threading.Event):
    """SIGTERM/SIGINT set `stop`: the current job is cancelled and the loop ends. Returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    return lambda: [signal.signal(s, h) for s, h in old.items()]


def _take(db: Db) -> dict[str, Any] | None:
    """Mark the oldest queued job running and return it (None when the queue is empty)."""
    return job_table.take_next_job(os.getpid(), now(), db)


def _take_held(db: Db) -> dict[str, Any] | None:
    """While the store cannot be written: the oldest queued job of the spool, or of the store if it can still be
    read (a read-only notebook), marked running in the spool. None when there is none."""
    spooled = spool.rows(db)
    queued = [r for r in spooled if r["status"] == RunStatus.QUEUED]
    if not queued:
        try:
            known = {r["job_id"] for r in spooled}  # e.g. cancelled while held: the spool is the newer
            queued = [r for r in job_table.queued_jobs(db) if r["job_id"] not in known]
        except StoreError:
            return None
    if not queued:
        return None
    job = {**queued[0], "status": RunStatus.RUNNING, "pid": os.getpid(), "started_at": now()}
    spool.put(db, job)
    log.info("job %s taken while the store is held; it runs now and is stored later", job["job_id"])
    return job


def _finish(
    db: Db,
    job_id: str,
    status: str,
    error: str | None,
    stop: threading.Event | None = None,
    job: dict[str, Any] | None = None,
) -> None:
    """Close the job in the store. With `job` (its row) and the store held by another program, close it in the
    spool instead, which the loop stores later; with `stop` and no row, retry while the store is held.

    If the worker is stopped first, the job stays `running` and the next worker's _recover closes it
    from its run's `end` event; the markers are kept for it.
    """
    if job is not None and (spool.row(db, job_id) is not None or job_table.store_held(db)):
        spool.put(db, {**job, "status": status, "error": error, "ended_at": now()})
        return _closed(db, job_id, status, error)
    for attempt in itertools.count():
        try:
            job_table.close_job(
                job_id, status, error, now(), db, outside_wait_s=None if stop is None else DEFER_AFTER_S
            )
            break
        except StoreError as e:
            if stop is None:
                raise
            (log.debug if attempt else log.warning)(
                "job %s %s, but the store is not writable now; retrying every 5 s: %s", job_id, status, e
            )
            if stop.wait(5.0):
                log.warning("job %s left running in the store; the next worker closes it from its RunLog", job_id)
                return
    _closed(db, job_id, status, error)


def _closed(db: Db, job_id: str, status: str, error: str | None) -> None:
    for suffix in (".cancel", ".json"):
        marker(db, job_id, suffix).unlink(missing_ok=True)
    log.info("job %s %s%s", job_id, status, f": {error}" if error else "")


def _job_status(run_status: str | None) -> str:
    """A job is done or cancelled as its run was; any other end (failed, killed) fails the job."""
    return run_status if run_status in (RunStatus.DONE, RunStatus.CANCELLED) else RunStatus.FAILED


def _run_job(job: dict[str, Any], db: Db, stop: threading.Event, poll_s: float, warm: WarmParent) -> None:
    job_id, cancel_marker = job["job_id"], marker(db, job["job_id"])
    if cancel_marker.exists():
        return _finish(db, job_id, RunStatus.CANCELLED, "cancelled before it started", stop, job)
    spec = job_spec(job["config_json"])

    def why() -> str:  # the run row records why it was cancelled, as the job does
        if stop.is_set() and not cancel_marker.exists():
            return "the worker was stopped (SIGTERM); finished epochs kept"
        return "cancelled by the user; finished epochs kept"

    try:
        with _CancelWatch(cancel_marker, stop, poll_s) as watch:
            if spec.get("kind") == RAY_SWEEP:
                status, error = _ray_sweep(job, spec, db, watch.event)
            else:
                status, error = _one_run(job, spec, db, watch.event, why, warm)
        if status == RunStatus.CANCELLED and stop.is_set() and not cancel_marker.exists():
            error = why()
    except ConfigError as e:  # this machine may differ from the submitter's
        status, error = RunStatus.FAILED, f"invalid config on this machine: {e}"
    except Exception as e:  # noqa: BLE001 - recorded on the job; the worker goes on with the next one
        log.exception("job %s failed", job_id)
        status, error = RunStatus.FAILED, f"{type(e).__name__}: {e}"
    _finish(db, job_id, status, error, stop, job)


def _one_run(
    job: dict[str, Any], spec: dict[str, Any], db: Db, cancel: threading.Event, why: Callable[[], str], warm: WarmParent
) -> tuple[str, str | None]:
    position = marker(db, job["job_id"], ".json")  # a sweep job's (config_idx, repeat_idx)
    meta = {
        "run_id": job["run_id"],
        "sweep_id": job["sweep_id"],
        "job_id": job["job_id"],
        **(json.loads(position.read_text()) if position.exists() else {}),
    }
    insist = bool(meta.pop("oversubscribe", False))  # the submitter insisted on oversubscribing (engine.run.hostfit)
    result = launch(
        RunConfig.from_dict(spec),
        db=db,
        meta=meta,
        cancel=cancel,
        cancel_reason=why,
        warm=warm,
        oversubscribe=insist or None,
    )
    return _job_status(result.status), result.error


def _ray_sweep(job: dict[str, Any], spec: dict[str, Any], db: Db, cancel: threading.Event) -> tuple[str, str | None]:
    """The whole sweep through the Ray executor; the job is done only when every planned run is."""
    sweep = SweepConfig.from_dict(spec["sweep"])
    planned = len(sweep.plan())
    log.info(
        "job %s: %d runs of sweep %s on %s",
        job["job_id"],
        planned,
        job["sweep_id"],
        spec.get("address") or "a local Ray instance",
    )
    result = run_sweep_ray(
        sweep,
        db=db,
        address=spec.get("address") or None,
        progress=False,
        sweep_id=job["sweep_id"],
        meta={"job_id": job["job_id"], "cwd": spec.get("cwd")},
        cancel=cancel,
    )
    done = result.counts.get(RunStatus.DONE, 0)
    if done == planned:
        return RunStatus.DONE, None
    runs = "run" if planned == 1 else "runs"
    if cancel.is_set():
        return RunStatus.CANCELLED, f"cancelled after {len(result.results)} of {planned} {runs}; finished epochs kept"
    first = next((r for r in result.results if r.status != RunStatus.DONE), None)
    why = f"; first: run {first.run_id} {first.status}: {first.error}" if first else ""
    return RunStatus.FAILED, f"{planned - done} of {planned} {runs} did not finish{why}"


class _CancelWatch:
    """Sets `event` when the job's cancel marker appears or the worker is told to stop."""

    def __init__(self, cancel_marker: Path, stop: threading.Event, poll_s: float):
        self.marker, self.stop, self.poll_s = cancel_marker, stop, min(poll_s, 0.5)
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


def _recover(db: Db) -> None:
    """Jobs left running by a dead worker: kill their orphaned run, keep its finished epochs, close the job."""
    for job_id, run_id in job_table.running_jobs(db):
        if run_id is None:  # a ray-sweep: its driver died with the worker; the runs that landed are stored
            _finish(db, job_id, RunStatus.FAILED, "worker died during the Ray sweep; the runs that landed are kept")
            continue
        run_dir, unlogged = runs_dir(db) / run_id, []
        end = next((e for e in iter_events(run_dir) if e.get("type") == "end"), None)
        if end is not None:  # the run ended; only the worker's bookkeeping was lost
            status, error = _job_status(end.get("status")), end.get("error")
        else:
            _kill_orphan(run_dir)
            run_status, error = dead_end("worker died", killed=True)
            status = _job_status(run_status)
            if (run_dir / "events.jsonl").exists():
                unlogged = end_dead_run(run_dir, run_status, error)
        if (run_dir / "events.jsonl").exists():
            try:
                ingest_run(run_dir, db=db, job_id=job_id, extra_events=unlogged)
            except ValueError as e:  # a log without a start event: nothing to keep
                log.warning("run %s of job %s not ingested: %s", run_id, job_id, e)
        _finish(db, job_id, status, error)


def _kill_orphan(run_dir: Path) -> None:
    try:
        pid = int((run_dir / "pid").read_text())
        proc = psutil.Process(pid)  # a cold run names run_dir in its command; a warm-forked one has its stderr.log open
        if str(run_dir) not in " ".join(proc.cmdline()) and not any(
            f.path.startswith(str(run_dir)) for f in proc.open_files()
        ):
            return  # the pid was reused by something else
    except (OSError, ValueError, psutil.Error):
        return
    kill_group(pid)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and psutil.pid_exists(pid):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.05)
