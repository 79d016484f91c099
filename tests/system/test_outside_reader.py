"""A user's DuckDB session holds the store (another process, read-only, as a notebook does): runs, sweeps
and queued jobs still run, through the real CLI and the real job worker; their results wait in the RunLogs
and land once the session closes. Real subprocesses and real DuckDB files."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from engine import jobs
from engine.config import RunConfig
from engine.run.runner import kill_group
from engine.runlog import read_events
from engine.store import connect, get_run, list_runs, pending_summary
from tests._cli import cli_in_process
from tests._wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--workload",
    "tensor",
    "--n-samples",
    "64",
    "--image-size",
    "8",
    "--width",
    "8",
    "--batch-size",
    "32",
    "--epochs",
    "2",
    "--no-bound",
    "--device",
    "cpu",
]  # the CPU on every machine: these test the store
HOLD = "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], read_only=True); print('holding', flush=True); time.sleep(600)"
WAITING = "waiting to be stored: the results are safe in their RunLogs"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    """A real `python -m engine` process: for the commands whose runs and exits are the point (run, sweep, demo)."""
    return subprocess.run(
        [sys.executable, "-m", "engine", *args, "--db", str(db)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def reads(*args: str, db: Path) -> subprocess.CompletedProcess:
    """A reading command through the CLI's main() in this process (tests/_cli.py): what it prints and stores."""
    return cli_in_process(*args, db=db)


def store_waiting(db: Path) -> subprocess.CompletedProcess:
    """`worker --once` on an empty queue, in this process: the next command that writes, which stores what waits.
    NOTE: LOADERLAB_WARM=0: it has no job to fork, and its warm parent would import torch only to be closed."""
    return cli_in_process("worker", "--once", db=db, env={"LOADERLAB_WARM": "0"})


@pytest.fixture
def holder(store):
    """Starts a second process holding the store read-only; yields a function that terminates it."""
    list_runs(db=store)  # the file exists, so the session opens it as a user would
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"

    def close() -> None:
        proc.terminate()
        proc.wait(30)

    close.pid = proc.pid
    try:
        yield close
    finally:
        if proc.poll() is None:
            close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored_ids(store: Path) -> set[str]:
    with duckdb.connect(str(store), read_only=True) as conn:  # alongside the holder: readers share the file
        return {r[0] for r in conn.execute("SELECT run_id FROM runs").fetchall()}


def test_run_goes_ahead_while_a_session_holds_the_store(store, holder):
    out = cli("run", *TINY, "--loader", "threads", "--workers", "1", db=store)
    assert out.returncode == 0, out.stderr
    assert "epoch 1" in out.stdout  # it ran, from the start, without waiting for the store
    assert " · not stored yet; its RunLog is " in out.stdout.splitlines()[-1]  # which run, and where it is
    (line,) = [line for line in out.stderr.splitlines() if WAITING in line]
    assert line.startswith(f"1 run(s) {WAITING} and will be stored once the other session (pid {holder.pid} (")
    assert "error" not in out.stderr.lower() and "Traceback" not in out.stderr
    assert _stored_ids(store) == set()
    pending = pending_summary(store)
    assert pending["count"] == 1 and pending["holder"].startswith(f"pid {holder.pid} (python")
    listing = reads("runs", db=store)  # while held, `runs` still reads, and says what waits
    assert listing.returncode == 0 and WAITING in listing.stderr and "no runs yet" in listing.stdout
    holder()
    before = _sha(store)
    listing = reads("runs", db=store)  # a command that reads never stores: it says what waits, and writes nothing
    assert listing.returncode == 0 and WAITING in listing.stderr and "no runs yet" in listing.stdout
    assert _sha(store) == before
    assert store_waiting(store).returncode == 0  # the next command that writes stores it
    listing = reads("runs", db=store)
    assert listing.returncode == 0 and "done" in listing.stdout and WAITING not in listing.stderr
    (run_id,) = _stored_ids(store)
    assert get_run(run_id, db=store)["n_epochs"] == 2
    assert pending_summary(store)["count"] == 0


def test_every_sweep_run_lands_after_the_session_closes(store, holder, tmp_path):
    toml = tmp_path / "sweep.toml"
    toml.write_text(
        'name = "held"\nrepeats = 1\n[base]\nworkload = "tensor"\nn_samples = 64\nimage_size = 8\n'
        'width = 8\nbatch_size = 32\nepochs = 2\nbound = false\ndevice = "cpu"\n'
        '[grid]\nloader = ["sync", "threads"]\nworkers = [1]\n'
    )
    out = cli("sweep", str(toml), "--quiet", db=store)
    assert out.returncode == 0, out.stderr
    assert "2 done" in out.stdout
    (line,) = [line for line in out.stderr.splitlines() if WAITING in line]  # one line for the whole sweep
    assert line.startswith(f"2 run(s) {WAITING} and will be stored once the other session (pid {holder.pid} (")
    assert _stored_ids(store) == set()
    holder()
    assert store_waiting(store).returncode == 0  # a command that writes stores what waited
    run_dirs = sorted(d for d in (store.parent / "runs").iterdir() if (d / "events.jsonl").exists())
    assert len(run_dirs) == 2 and _stored_ids(store) == {d.name for d in run_dirs}
    for d in run_dirs:
        run = get_run(d.name, db=store)
        assert run["status"] == "done" and run["sweep_id"].startswith("held-")
        assert run["n_epochs"] == len([e for e in read_events(d) if e["type"] == "epoch"])


def test_a_job_running_when_a_session_opens_lands_when_it_closes(store, tmp_path):
    cfg = RunConfig.from_dict(
        {
            "workload": "tensor",
            "n_samples": 32,
            "image_size": 8,
            "width": 8,
            "batch_size": 16,
            "epochs": 2,
            "latency_ms": 100.0,
            "bound": False,
            "device": "cpu",
        }
    )
    job_id = jobs.submit(cfg, db=store, origin="cli")
    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "engine", "worker", "--db", str(store), "--poll-s", "0.2"],
        cwd=ROOT,
        env=_env(),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    hold = None
    try:
        wait_for(
            lambda: jobs.list_jobs(store).set_index("job_id").loc[job_id, "status"] == "running", "the job to start"
        )
        run_dir = store.parent / "runs" / jobs.list_jobs(store).set_index("job_id").loc[job_id, "run_id"]
        wait_for(lambda: (run_dir / "events.jsonl").exists(), "the run to start")
        hold = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdout=subprocess.PIPE, text=True)
        assert hold.stdout.readline().strip() == "holding"
        wait_for(lambda: any(e["type"] == "end" for e in read_events(run_dir)), "the run to end")
        worker_log = tmp_path / "worker.log"
        wait_for(lambda: "not writable now" in worker_log.read_text(), "the worker to try to close the job")
        assert _stored_ids(store) == set()
        assert pending_summary(store)["count"] == 1 and f"pid {hold.pid}" in pending_summary(store)["holder"]
        assert worker.poll() is None  # the worker waits it out, it does not crash
        hold.terminate()
        hold.wait(30)
        wait_for(lambda: jobs.list_jobs(store).set_index("job_id").loc[job_id, "status"] == "done", "the job to close")
        wait_for(lambda: get_run(run_dir.name, db=store) is not None, "the run to be stored", timeout_s=60)
        assert get_run(run_dir.name, db=store)["status"] == "done"
    finally:
        if hold is not None and hold.poll() is None:
            hold.kill()
            hold.wait()
        if worker.poll() is None:
            kill_group(worker.pid)
            worker.wait()
        log.close()
    text = (tmp_path / "worker.log").read_text()
    assert "Traceback" not in text and "not stored yet" in text, text[-3000:]


def _worker(store: Path, log_path: Path) -> tuple[subprocess.Popen, object]:
    log = open(log_path, "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "worker", "--db", str(store), "--poll-s", "0.2"],
        cwd=ROOT,
        env=_env(),
        stdout=log,
        stderr=log,
        start_new_session=True,
    ), log


def _job(store: Path, job_id: str) -> dict:
    return jobs.list_jobs(store).set_index("job_id").loc[job_id].to_dict()


def _stop(worker: subprocess.Popen, log) -> None:
    if worker.poll() is None:
        kill_group(worker.pid)
        worker.wait()
    log.close()


def test_a_job_queued_before_a_session_opened_runs_while_it_holds_the_store(store, tmp_path):
    """The queue lives in the store, which the worker can still read: it takes the job at once, runs it, and
    keeps the job's status beside the store (the spool) and its results in the RunLog until the session closes."""
    cfg = RunConfig.from_dict(
        {
            "workload": "tensor",
            "n_samples": 64,
            "image_size": 8,
            "width": 8,
            "batch_size": 32,
            "epochs": 2,
            "bound": False,
            "device": "cpu",
        }
    )
    list_runs(db=store)  # the store exists; queue first, as a browser did before the notebook opened ...
    job_id = jobs.submit(cfg, db=store, origin="cli")
    hold = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdout=subprocess.PIPE, text=True)
    assert hold.stdout.readline().strip() == "holding"  # ... then the notebook holds the store
    worker, log = _worker(store, tmp_path / "worker.log")
    try:
        wait_for(
            lambda: _job(store, job_id)["status"] == "done", "the job to run while the store is held", timeout_s=120
        )
        assert _stored_ids(store) == set()  # nothing written while held: its run waits in the RunLog
        assert pending_summary(store)["count"] == 1
        hold.terminate()
        hold.wait(30)
        run_id = _job(store, job_id)["run_id"]
        wait_for(lambda: get_run(run_id, db=store) is not None, "the run to be stored", timeout_s=60)
        wait_for(lambda: not list((store.parent / "jobs" / "spool").glob("job-*")), "the spool to empty", timeout_s=30)
        with connect(store, read_only=True) as conn:  # LoaderLab's own lock: the worker may be writing
            assert conn.execute("SELECT status FROM jobs WHERE job_id = ?", [job_id]).fetchall() == [("done",)]
    finally:
        if hold.poll() is None:
            hold.kill()
            hold.wait()
        _stop(worker, log)
    text = (tmp_path / "worker.log").read_text()
    assert "Traceback" not in text and text.count("store not writable now") == 1, text[-3000:]  # said once


def test_a_job_launched_while_a_session_holds_the_store_runs_and_lands_when_it_closes(store, holder, tmp_path):
    """Launch from the browser while a notebook holds the store: the job is queued beside it, runs at once, and
    the job row and the run land in the store when the session closes. A second one, cancelled while held, never runs."""
    cfg = RunConfig.from_dict(
        {
            "workload": "tensor",
            "n_samples": 64,
            "image_size": 8,
            "width": 8,
            "batch_size": 32,
            "epochs": 2,
            "bound": False,
            "device": "cpu",
        }
    )
    job_id = jobs.submit(cfg, db=store, origin="browser")
    dropped = jobs.submit(cfg, db=store, origin="browser")
    assert set(jobs.list_jobs(store).set_index("job_id").loc[[job_id, dropped], "status"]) == {"queued"}
    assert jobs.cancel(dropped, db=store) == "cancelled"
    worker, log = _worker(store, tmp_path / "worker.log")
    try:
        wait_for(
            lambda: _job(store, job_id)["status"] == "done", "the job to run while the store is held", timeout_s=120
        )
        run_id = _job(store, job_id)["run_id"]
        assert jobs.job_progress(job_id, db=store)["epochs_done"] == 2  # live progress reads the RunLog
        assert _stored_ids(store) == set()
        holder()
        wait_for(lambda: get_run(run_id, db=store) is not None, "the run to be stored", timeout_s=60)
        wait_for(lambda: not list((store.parent / "jobs" / "spool").glob("job-*")), "the spool to empty", timeout_s=30)
        with connect(store, read_only=True) as conn:
            stored = dict(conn.execute("SELECT job_id, status FROM jobs").fetchall())
        assert stored == {job_id: "done", dropped: "cancelled"}
        assert not (store.parent / "runs" / _job(store, dropped)["run_id"]).exists()  # never started
    finally:
        _stop(worker, log)


def test_a_read_write_session_does_not_stop_a_run_or_make_run(store):
    """A notebook's plain duckdb.connect(path) holds the file read-write: nothing can even read it. A run
    still goes ahead and waits in its RunLog, and `engine demo` (make run's first step) skips instead of
    failing, so the dashboard still starts."""
    list_runs(db=store)
    hold_rw = HOLD.replace(", read_only=True", "")
    proc = subprocess.Popen([sys.executable, "-c", hold_rw, str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding"
        # NOTE: the file stays held until the end: each wait for it runs to this timeout, so a short one
        env = {**_env(), "LOADERLAB_LOCK_TIMEOUT": "1"}
        run = subprocess.run(
            [sys.executable, "-m", "engine", "run", *TINY, "--db", str(store)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0 and "epoch 1" in run.stdout, run.stderr
        assert [line for line in run.stderr.splitlines() if WAITING in line], run.stderr
        demo = subprocess.run(
            [sys.executable, "-m", "engine", "demo", "--db", str(store)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert demo.returncode == 0 and demo.stderr.startswith("demo skipped: "), demo.stderr
    finally:
        proc.terminate()
        proc.wait(30)
    assert store_waiting(store).returncode == 0  # stored once it closed, by a command that writes
    assert pending_summary(store)["count"] == 0
