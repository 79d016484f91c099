"""Starting, finding and stopping the job worker from outside: what `make run`, the dashboard and the CLI do.

One worker per store: the live worker holds an flock on `<jobs_dir>/worker.lock`, with its pid written in the file.

    ensure_worker(db); worker_alive(db); worker_pid(db); stop_worker(db)
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from engine.paths import ROOT, Db, db_path, jobs_dir
from engine.run.warm import run_env

__all__ = ["ensure_worker", "lock_path", "stop_worker", "try_lock", "unlock", "worker_alive", "worker_pid", "write_pid"]

log = logging.getLogger(__name__)


def lock_path(db: Db) -> Path:
    path = jobs_dir(db) / "worker.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def try_lock(db: Db) -> int | None:
    """An fd holding the worker lock, or None when a live worker holds it."""
    fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def write_pid(fd: int, pid: int) -> None:
    """Name the worker holding the lock: worker_pid reads it back."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{pid}\n".encode(), 0)


def worker_alive(db: Db = None) -> bool:
    fd = try_lock(db)
    if fd is None:
        return True
    unlock(fd)
    return False


def worker_pid(db: Db = None) -> int | None:
    """The live worker's pid (it writes it into the lock file), or None."""
    if not worker_alive(db):
        return None
    text = lock_path(db).read_text().strip()
    return int(text) if text.isdigit() else None


def ensure_worker(db: Db = None) -> int | None:
    """Start a detached worker (`python -m engine worker`) if none is alive; returns its pid, or None if one was
    alive already.

    NOTE: the lock is taken here and handed to the child (pass_fds), so two quick calls can never start two.
    """
    fd = try_lock(db)
    if fd is None:
        return None
    try:
        path = db_path(db)
        with open(jobs_dir(db) / "worker.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "engine", "worker", "--db", str(path), "--lock-fd", str(fd)],
                cwd=ROOT,
                env=run_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                pass_fds=(fd,),
                start_new_session=True,
            )
        write_pid(fd, proc.pid)
    finally:
        os.close(fd)  # the child's copy keeps the lock
    log.info("started job worker pid %d for %s (log: %s)", proc.pid, path, jobs_dir(db) / "worker.log")
    return proc.pid


def stop_worker(db: Db = None, timeout_s: float = 30.0) -> bool:
    """SIGTERM the worker (it cancels its run and exits); SIGKILL it past timeout_s. True if one was stopped."""
    pid = worker_pid(db)
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        proc.terminate()
        if not _ends(proc, timeout_s):
            proc.kill()
    except psutil.NoSuchProcess:
        pass
    return True


def _ends(proc: psutil.Process, timeout_s: float) -> bool:
    """Whether the process ends within timeout_s. NOTE: a worker another process started (serve, the dashboard)
    stays a zombie until that parent reaps it, and psutil's wait() on a process that is not our child waits for the
    pid to vanish: 30 s for `worker --stop` beside `make run`, though the worker had exited at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            proc.wait(min(0.1, max(0.0, deadline - time.monotonic())))  # reaps it when it is our child
            return True
        except psutil.TimeoutExpired:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
    return False
