"""`python -m engine serve` (what `make run` and `make share` call): the dashboard and its job worker, with one
lifetime. Ctrl-C (or SIGTERM, or the terminal closing) stops the dashboard, then the worker this session started,
whether serve started it or the dashboard did while it served; a worker that was already running before is left
running, and serve says so and how to stop it.

Why: `streamlit run` alone leaves the detached worker it started running after it stops (re-parented to pid 1,
about 150 MB), with no word. Queued jobs are not lost when the worker stops: they wait in the store for the next
start. To keep jobs running with no dashboard, start `python -m engine worker --ensure` first.

    serve(db, address="127.0.0.1", port=8501)      # blocks until the dashboard stops; its exit status
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from typing import Callable

from engine.jobs.control import ensure_worker, stop_worker, worker_pid
from engine.paths import ROOT, Db, db_path
from engine.run.warm import run_env

__all__ = ["STOP_SIGNALS", "dashboard_command", "serve"]

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_GRACE_S = 15.0  # after a stop signal, how long the dashboard gets to exit before it is killed
STOP_HINT = "python -m engine worker --stop"


def dashboard_command(address: str, port: int) -> list[str]:
    """`streamlit run app.py` as make run has always served it (the rest of its settings: .streamlit/config.toml)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "app.py"),
        "--server.address",
        address,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]


def _start_worker(db: Db, say: Callable[[str], None]) -> int | None:
    """Make sure a worker runs; returns the pid of one that ran before serve (not ours to stop), else None."""
    before = worker_pid(db)
    started = ensure_worker(db)
    if started:
        say(
            f"job worker started (pid {started}); Ctrl-C stops it with the dashboard, and queued jobs wait for the "
            "next start"
        )
        return None
    before = before or worker_pid(db)
    say(
        f"job worker already running (pid {before}); it keeps running when the dashboard stops "
        f"(stop it with `{STOP_HINT}`)"
    )
    return before


def _wait(proc: subprocess.Popen) -> int:
    """Wait for the dashboard; a stop signal to serve reaches it too (Ctrl-C in the terminal already has)."""
    stop_at: list[float] = []

    def on_signal(signum: int, _frame: object) -> None:
        if not stop_at:
            stop_at.append(time.monotonic() + _GRACE_S)
            log.info("stopping the dashboard (signal %d)", signum)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # streamlit stops on SIGTERM as on Ctrl-C

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        while True:
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if stop_at and time.monotonic() > stop_at[0]:
                    proc.kill()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _stop_ours(db: Db, before: int | None, say: Callable[[str], None]) -> None:
    """Stop the worker unless it is the one that ran before serve started."""
    pid = worker_pid(db)
    if pid is None:
        return
    if pid == before:
        say(f"job worker (pid {pid}) keeps running, as it did before the dashboard; stop it with `{STOP_HINT}`")
        return
    say(f"stopping the job worker (pid {pid}) this dashboard started; queued jobs wait for the next start")
    stop_worker(db)


def serve(db: Db = None, *, address: str = "127.0.0.1", port: int = 8501, say: Callable[[str], None] = log.info) -> int:
    """Serve the dashboard on address:port with a job worker for the store; returns the dashboard's exit status
    once it stops (0 after a stop signal), having stopped the worker this session started."""
    path = db_path(db)
    before = _start_worker(path, say)
    env = {**run_env(), "LOADERLAB_DB": str(path)}  # the dashboard serves the store whose worker this is
    proc = subprocess.Popen(dashboard_command(address, port), cwd=ROOT, env=env)
    try:
        status = _wait(proc)
    finally:
        if proc.poll() is None:  # serve itself failed: never leave the dashboard behind
            proc.kill()
            proc.wait()
        _stop_ours(path, before, say)
    return 0 if status in (0, -signal.SIGTERM, -signal.SIGINT) else status
