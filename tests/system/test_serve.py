"""The dashboard's lifetime (issue 19, section 7), with real processes: Ctrl-C on `make run` stops the job worker
it started, never one that ran before (tests/system/test_file_watcher.py: nor does it watch the checkout).

Ctrl-C is SIGINT to the terminal's foreground process group: each command here starts in a session of its own,
and the test signals that whole group as a terminal would.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from engine.jobs import ensure_worker, stop_worker, worker_pid
from tests._wait import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(store: Path) -> dict[str, str]:
    # NOTE: LOADERLAB_WARM=0: these workers run no job, and a worker's warm parent imports torch as it starts, which
    # its stop then waits for (tests/engine/test_jobs.py and test_crash.py stop workers that hold one)
    return {
        **os.environ,
        "LOADERLAB_WARM": "0",
        "LOADERLAB_DB": str(store),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def _start(cmd: list[str], store: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=_env(store),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _serving(port: int) -> bool:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stop_group(proc: subprocess.Popen, sig: int = signal.SIGINT) -> int:
    """Signal the whole process group, as Ctrl-C in a terminal does; the exit status."""
    os.killpg(proc.pid, sig)
    return proc.wait(90)


@pytest.fixture
def cleanup(store):
    """Processes to kill if a test fails half-way; the store's worker is stopped at the end."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stop_worker(store)


def _streamlit_pids(proc: subprocess.Popen) -> list[int]:
    kids = psutil.Process(proc.pid).children(recursive=True)
    return [k.pid for k in kids if "streamlit" in " ".join(k.cmdline())]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_ctrl_c_on_make_run_stops_the_dashboard_and_the_worker_it_started(store, tmp_path, cleanup):
    port, log = _free_port(), tmp_path / "make.log"
    # -o demo: the demo sweep (tests/app/test_demo.py) would give the worker 1.5 min of runs to cancel
    make = _start(["make", "-o", "demo", "run", f"VENV={sys.prefix}", f"PORT={port}"], store, log)
    cleanup.append(make)
    wait_for(lambda: _serving(port), "the dashboard serving", timeout_s=120)
    worker = wait_for(lambda: worker_pid(store), "the job worker running", timeout_s=60)
    dashboard = _streamlit_pids(make)
    assert dashboard, psutil.Process(make.pid).children(recursive=True)

    _stop_group(make)
    assert _gone(worker), f"the job worker (pid {worker}) outlived make run"
    assert all(_gone(pid) for pid in dashboard) and worker_pid(store) is None
    out = log.read_text()
    assert f"job worker started (pid {worker})" in out and f"stopping the job worker (pid {worker})" in out, out


@pytest.mark.slow
def test_a_worker_running_before_keeps_running_and_worker_stop_stops_it(store, tmp_path, cleanup):
    own = _start([sys.executable, "-m", "engine", "worker", "--db", str(store)], store, tmp_path / "worker.log")
    cleanup.append(own)
    wait_for(lambda: worker_pid(store) == own.pid, "the user's own worker running", timeout_s=60)
    port, log = _free_port(), tmp_path / "serve.log"
    serve = _start([sys.executable, "-m", "engine", "serve", "--port", str(port)], store, log)
    cleanup.append(serve)
    wait_for(lambda: _serving(port), "the dashboard serving", timeout_s=120)

    assert _stop_group(serve) == 0
    assert not _gone(own.pid) and worker_pid(store) == own.pid, "serve stopped a worker it did not start"
    out = log.read_text()
    assert "keeps running" in out and "python -m engine worker --stop" in out, out  # and says how to stop it

    stop = subprocess.run(
        [sys.executable, "-m", "engine", "worker", "--stop"],
        cwd=ROOT,
        env=_env(store),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert stop.returncode == 0 and f"worker stopped (pid {own.pid})" in stop.stdout, stop
    assert own.wait(30) is not None and worker_pid(store) is None


@pytest.mark.slow
def test_sigterm_stops_the_dashboard_and_a_worker_started_while_it_served(store, tmp_path, cleanup, monkeypatch):
    """A worker the dashboard started while serving (after the first one died) is this session's too; SIGTERM to
    serve alone (a process manager, a closed terminal's SIGHUP is handled alike) reaches the dashboard."""
    monkeypatch.setenv("LOADERLAB_WARM", "0")  # for the worker ensure_worker starts from here, as _env's
    port = _free_port()
    serve = _start([sys.executable, "-m", "engine", "serve", "--port", str(port)], store, tmp_path / "serve.log")
    cleanup.append(serve)
    wait_for(lambda: _serving(port), "the dashboard serving", timeout_s=120)
    first = wait_for(lambda: worker_pid(store), "the job worker running", timeout_s=60)
    dashboard = _streamlit_pids(serve)
    stop_worker(store)
    second = ensure_worker(store)  # what the Launch page does when it finds no worker
    assert second and second != first

    serve.send_signal(signal.SIGTERM)  # serve alone, not its group
    assert serve.wait(90) == 0
    # NOTE: waited for, not read at once: in ci32 (2026-11-29, under the parallel part's load) the worker, whose
    # "stopped" line serve had waited for, read as neither gone nor a zombie at the instant serve exited; a worker
    # that never ends still fails here
    wait_for(lambda: _gone(second), "the worker serve stopped to end", timeout_s=10)
    assert all(_gone(pid) for pid in dashboard) and worker_pid(store) is None
