"""The job queue and its worker, end to end: real worker processes, real runs, a real store."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from engine import jobs
from engine.config import ConfigError, RunConfig, SweepConfig
from engine.paths import runs_dir
from engine.run.runner import kill_group
from engine.store import connect, get_epochs, get_run
from engine.sweeps.ray import ray_available
from tests._wait import wait_for as _wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = ["-m", "engine", "worker"]
TINY = dict(
    workload="tensor",
    n_samples=64,
    image_size=8,
    width=8,
    epochs=2,
    batch_size=32,
    loader="sync",
    bound=False,
    sample_hz=0.0,
    device="cpu",
)  # the CPU on every machine: jobs queue per device
# ~0.3 s per epoch for 1000 epochs; a process loader so the run's group has more than one process
LONG = dict(TINY, latency_ms=10.0, n_samples=32, batch_size=8, epochs=1000, loader="processes", workers=1)


def wait_for(predicate, what="condition"):
    return _wait_for(predicate, what, timeout_s=90.0, poll_s=0.1)


def status(job_id, db):
    return jobs.job_progress(job_id, db)["status"]


def group_members(pgid):
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


@pytest.fixture
def workers(store):
    """start(*args) runs `python -m engine worker` in its own process group (warm=False: with no warm parent, for
    a worker that runs no job); teardown kills every worker and run left."""
    started = []

    def start(*args, warm=True):
        # NOTE: a worker's warm parent imports torch as it starts, and closing it waits for that import to end:
        # seconds spent for nothing by a worker that only recovers what a dead one left
        env = None if warm else {**os.environ, "LOADERLAB_WARM": "0"}
        proc = subprocess.Popen(
            [sys.executable, *WORKER, "--db", str(store), "--poll-s", "0.2", *args],
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
    jobs.stop_worker(store, timeout_s=30)
    for pid_file in runs_dir(store).glob("*/pid"):
        kill_group(int(pid_file.read_text()))


def run_pid(job_id, db):
    run_dir = runs_dir(db) / jobs.job_progress(job_id, db)["run_id"]
    return wait_for(lambda: (run_dir / "pid").exists() and int((run_dir / "pid").read_text()), what="run pid")


def test_cancel_running_job_kills_its_group_and_keeps_finished_epochs(store, workers):
    job_id = jobs.submit(RunConfig.from_dict(LONG), db=store, origin="cli")
    workers()
    wait_for(lambda: jobs.job_progress(job_id, store)["epochs_done"] >= 2, what="two epochs")
    pgid = run_pid(job_id, store)
    assert len(group_members(pgid)) >= 2  # the run and its loader worker process
    assert jobs.cancel(job_id, store) == "running"
    wait_for(lambda: status(job_id, store) == "cancelled", what="job cancelled")
    assert group_members(pgid) == []
    run = get_run(jobs.job_progress(job_id, store)["run_id"], db=store)
    assert run["status"] == "cancelled"
    assert len(get_epochs(run["run_id"], db=store)) >= 2
    assert jobs.cancel(job_id, store) == "cancelled"  # cancelling an ended job changes nothing
    with pytest.raises(ValueError, match="does not exist"):
        jobs.cancel("job-nope", store)


def test_queue_survives_worker_restarts(store, workers):
    long_job = jobs.submit(RunConfig.from_dict(LONG), db=store, origin="cli")
    dropped = jobs.submit(RunConfig.from_dict(TINY), db=store, origin="cli")
    later = jobs.submit(RunConfig.from_dict(TINY), db=store, origin="cli")
    assert jobs.cancel(dropped, store) == "cancelled"  # queued: cancelled at once, no worker needed
    first = workers()
    wait_for(lambda: jobs.job_progress(long_job, store)["epochs_done"] >= 1, what="first epoch")
    pgid = run_pid(long_job, store)
    first.send_signal(signal.SIGTERM)  # the worker cancels its run and exits
    assert first.wait(60) == 0
    assert group_members(pgid) == []
    progress = jobs.job_progress(long_job, store)
    assert progress["status"] == "cancelled" and "worker was stopped" in progress["error"]
    assert status(later, store) == "queued"
    assert workers("--once").wait(120) == 0
    assert [status(j, store) for j in (long_job, dropped, later)] == ["cancelled", "cancelled", "done"]
    progress = jobs.job_progress(later, store)
    assert (progress["epochs_done"], progress["epochs_total"], progress["eta_s"]) == (2, 2, 0.0)
    assert [r["epoch"] for r in progress["epochs"]] == [0, 1]
    run = get_run(progress["run_id"], db=store)
    assert run["status"] == "done" and run["job_id"] == later
    assert len(get_epochs(run["run_id"], db=store)) == 2


def test_job_left_running_by_a_dead_worker_is_failed_and_its_run_kept(store, workers):
    job_id = jobs.submit(RunConfig.from_dict(LONG), db=store, origin="cli")
    worker = workers()
    wait_for(lambda: jobs.job_progress(job_id, store)["epochs_done"] >= 1, what="first epoch")
    pgid = run_pid(job_id, store)
    os.kill(worker.pid, signal.SIGKILL)  # the worker dies; its run goes on as an orphan
    worker.wait()
    assert group_members(pgid)
    assert workers("--once", warm=False).wait(120) == 0
    progress = jobs.job_progress(job_id, store)
    assert progress["status"] == "failed" and "worker died" in progress["error"]
    assert group_members(pgid) == []
    run = get_run(progress["run_id"], db=store)
    assert run["status"] == "killed" and len(get_epochs(run["run_id"], db=store)) >= 1


def test_ensure_worker_starts_exactly_one(store):
    try:
        first = jobs.ensure_worker(store)
        assert isinstance(first, int)
        assert jobs.ensure_worker(store) is None
        assert jobs.worker_alive(store) and jobs.worker_pid(store) == first
        wait_for(lambda: "engine worker" in " ".join(psutil.Process(first).cmdline()), what="worker started")
        alive = [
            p
            for p in psutil.process_iter(["cmdline"])
            if "worker" in (p.info["cmdline"] or []) and str(store) in (p.info["cmdline"] or [])
        ]
        assert [p.pid for p in alive] == [first]
    finally:
        jobs.stop_worker(store, timeout_s=30)
    assert not jobs.worker_alive(store)


def test_estimate_uses_history_of_the_same_workload_and_model(store):
    cfg = RunConfig.from_dict(TINY)
    both = [cfg, cfg.replace(model="cnn")]
    before = jobs.estimate_duration(both, db=store)
    assert before["runs"] == 2 and before["from_history"] == 0
    assert before["seconds"] == pytest.approx(2 * (jobs.RUN_OVERHEAD_S + jobs.DEFAULT_S_PER_SAMPLE * 64 * 2))
    with connect(store, read_only=False) as conn:  # two finished mlp runs: 1 ms and 3 ms per sample
        conn.execute(
            "INSERT INTO runs (run_id, status, workload, model, n_samples, epoch_s, deleted) VALUES "
            "('a', 'done', 'tensor', 'mlp', 1000, 1.0, false), "
            "('b', 'done', 'tensor', 'mlp', 100, 0.3, false), ('c', 'failed', 'tensor', 'mlp', 100, 99.0, false)"
        )
    after = jobs.estimate_duration(both, db=store)
    assert after["from_history"] == 1
    mlp = jobs.RUN_OVERHEAD_S + 0.002 * 64 * 2  # the median of the done runs; the failed one is ignored
    assert after["seconds"] == pytest.approx(mlp + before["seconds"] / 2)


def test_ray_sweep_job_refused_without_ray_and_failed_when_its_worker_died(store, workers, monkeypatch):
    sweep = SweepConfig.from_dict({"name": "r", "base": TINY, "grid": {"batch_size": [8, 16]}})
    with monkeypatch.context() as mp:
        mp.setitem(sys.modules, "ray", None)  # what a missing package looks like to the import system
        with pytest.raises(ConfigError, match="requirements-cluster.txt") as err:
            jobs.submit_ray_sweep(sweep, db=store, origin="cli")
        assert err.value.field == "target" and jobs.list_jobs(store).empty
    if not ray_available():
        # NOTE: as in test_ray_executor.py: where Ray is required (LOADERLAB_REQUIRE_RAY=1, CI) its absence fails
        # the test
        assert os.environ.get("LOADERLAB_REQUIRE_RAY") != "1", "LOADERLAB_REQUIRE_RAY=1 but Ray is not installed"
        pytest.skip("Ray is not installed: pip install -r requirements-cluster.txt")
    job_id = jobs.submit_ray_sweep(sweep, address=" auto ", db=store, origin="cli")
    job = jobs.list_jobs(store).iloc[0]
    assert (job["kind"], job["device"], json.loads(job["config_json"])["address"]) == ("ray-sweep", "ray:auto", "auto")
    with connect(store, read_only=False) as conn:  # as a worker killed mid-sweep leaves it
        conn.execute("UPDATE jobs SET status = 'running', pid = 1 WHERE job_id = ?", [job_id])
    assert workers("--once", warm=False).wait(120) == 0
    progress = jobs.job_progress(job_id, store)
    assert progress["status"] == "failed" and "worker died during the Ray sweep" in progress["error"]
    assert (progress["runs_done"], progress["runs_total"], progress["eta_s"]) == (0, 2, 0.0)


def test_stop_sees_a_worker_that_exited_though_its_parent_has_not_reaped_it(store):
    """`worker --stop` beside `make run`: the worker is serve's child, and stays a zombie until serve reaps it. The
    stop waited for the pid to vanish (its whole limit, then a SIGKILL of the zombie) though the worker had ended."""
    parent = subprocess.Popen(["sh", "-c", "sleep 0.2 & echo $!; exec sleep 60"], stdout=subprocess.PIPE, text=True)
    lock = os.open(jobs.control.lock_path(store), os.O_RDWR | os.O_CREAT)
    try:
        zombie = psutil.Process(int(parent.stdout.readline()))
        _wait_for(lambda: zombie.status() == psutil.STATUS_ZOMBIE, "the unreaped child", timeout_s=10)
        fcntl.flock(lock, fcntl.LOCK_EX)  # held as a live worker holds it, naming the zombie
        jobs.control.write_pid(lock, zombie.pid)
        assert jobs.worker_pid(store) == zombie.pid
        started = time.monotonic()
        assert jobs.stop_worker(store, timeout_s=30.0)
        assert time.monotonic() - started < 15.0  # it saw the end, not its limit
    finally:
        os.close(lock)
        parent.kill()
        parent.wait()
