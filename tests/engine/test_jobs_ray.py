"""The job queue's Ray target end to end: sweeps queued as ONE "ray-sweep" job each, run by a real worker process
(--once) through a real local Ray instance (127.0.0.1), their runs landing in the store; Cancel through the
job's marker; and no Ray process left once the worker is done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from engine import jobs
from engine.config import SweepConfig
from engine.paths import jobs_dir
from engine.run.runner import kill_group
from engine.store import get_epochs, list_runs
from engine.sweeps.ray import ray_available
from engine.sweeps.ray._node import scratch_dir
from engine.sweeps.ray._session import sessions_dir

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "workload": "tensor",
    "n_samples": 32,
    "image_size": 8,
    "width": 8,
    "batch_size": 16,
    "epochs": 2,
    "loader": "sync",
    "device": "cpu",
    "bound": False,
    "sample_hz": 0.0,
}
# NOTE: 32 samples x 40 ms: about 1.3 s an epoch for 30 epochs; it gets cancelled after its first
SLOW = {**TINY, "latency_ms": 40.0, "epochs": 30}


def _tagged(token: str) -> set[int]:
    """Live processes (the worker's Ray instance, its workers, their runs) whose environment holds our token."""
    out = set()
    for p in psutil.process_iter():
        try:
            if p.environ().get("RAY_AUTH_TOKEN") == token and p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.Error:
            continue
    return out


def _alive(procs: list[psutil.Process]) -> list[str]:
    """Those of `procs` still running (the same process: psutil checks its start time), named."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.name()}")
        except psutil.Error:
            continue
    return out


def _first_epoch_of(sweep_id: str) -> bool:
    """Whether a trial of this sweep has finished an epoch in its node-local scratch store."""
    for run_dir in scratch_dir("x").parent.glob("*/runs/*"):
        try:
            ours = json.loads((run_dir / "meta.json").read_text()).get("sweep_id") == sweep_id
            if ours and '"type":"epoch"' in (run_dir / "events.jsonl").read_text():
                return True
        except (OSError, ValueError):
            continue
    return False


@pytest.fixture(scope="module", autouse=True)
def _needs_ray():
    if not ray_available() and os.environ.get("LOADERLAB_REQUIRE_RAY") != "1":
        pytest.skip("Ray is not installed: pip install -r requirements-cluster.txt")


def test_ray_sweep_jobs_run_through_the_worker_and_cancel(store):
    two = jobs.submit_ray_sweep(
        SweepConfig.from_dict({"name": "two", "base": TINY, "grid": {"batch_size": [8, 16]}}),
        address=None,
        db=store,
        origin="cli",
    )
    slow = jobs.submit_ray_sweep(
        SweepConfig.from_dict({"name": "slow", "base": SLOW, "repeats": 2}), db=store, origin="cli"
    )
    queued = jobs.list_jobs(store).set_index("job_id")
    assert list(queued["kind"]) == ["ray-sweep", "ray-sweep"] and queued["run_id"].isna().all()
    assert jobs.job_progress(two, store)["runs_total"] == 2
    # NOTE: a token in the environment keeps Ray's token auth on without writing ~/.ray/auth_token, and marks
    # every process of this worker's Ray instance, so that the leftover check ignores other tests' Ray
    token = "loaderlab-test-" + os.urandom(16).hex()
    worker = subprocess.Popen(
        [sys.executable, "-m", "engine", "worker", "--db", str(store), "--once", "--poll-s", "0.2"],
        cwd=ROOT,
        env={**os.environ, "RAY_AUTH_TOKEN": token},
        start_new_session=True,
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while not _first_epoch_of(jobs.job_progress(slow, store)["sweep_id"]):  # the second job's first run
            assert worker.poll() is None and time.monotonic() < deadline, "the slow sweep never ran"
            seen |= _tagged(token)
            time.sleep(0.2)
        seen |= _tagged(token)
        assert jobs.cancel(slow, store) == "running"
        assert worker.wait(120) == 0
    finally:
        if worker.poll() is None:
            kill_group(worker.pid, signal.SIGKILL)
            worker.wait()
    assert seen, "the worker started no Ray processes?"
    deadline = time.monotonic() + 10  # NOTE: ray.shutdown() has returned; give the kernel a moment to reap
    while (left := _tagged(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left after the worker exited: {left}"

    done = jobs.job_progress(two, store)
    assert (done["status"], done["error"], done["runs_done"], done["runs_total"]) == ("done", None, 2, 2)
    assert done["run_counts"] == {"done": 2} and done["eta_s"] == 0.0
    runs = list_runs(db=store).set_index("run_id")
    ours = runs[runs["sweep_id"] == done["sweep_id"]]
    assert len(ours) == 2 and set(ours["job_id"]) == {two} and sorted(ours["config_idx"]) == [0, 1]
    assert set(ours["status"]) == {"done"} and (ours["n_epochs"] == 2).all()

    cancelled = jobs.job_progress(slow, store)
    assert cancelled["status"] == "cancelled" and "1 of 2 runs" in cancelled["error"]
    assert cancelled["run_counts"] == {"cancelled": 1}  # the second repeat never started
    (run_id,) = runs.index[runs["sweep_id"] == cancelled["sweep_id"]]
    assert len(get_epochs(run_id, db=store)) >= 1  # its finished epochs were kept
    assert not list(jobs_dir(store).glob("*.cancel"))  # the worker cleared the job's cancel marker


def test_kill_9_of_the_worker_mid_sweep_leaves_no_ray_process_after_the_next_start(store, tmp_path):
    """SIGKILL of the job worker while its local Ray instance runs a trial: Ray's head dies with it, but agents
    and busy workers live on. The next worker start must stop every process of that session (and only it),
    say so in its log, and close the job."""
    job = jobs.submit_ray_sweep(SweepConfig.from_dict({"name": "doomed", "base": SLOW}), db=store, origin="cli")
    token = "loaderlab-test-" + os.urandom(16).hex()  # marks this test's Ray processes (see the test above)
    env = {**os.environ, "RAY_AUTH_TOKEN": token}
    cmd = [sys.executable, "-m", "engine", "worker", "--db", str(store), "--once", "--poll-s", "0.2"]
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not _first_epoch_of(jobs.job_progress(job, store)["sweep_id"]):
            assert first.poll() is None and time.monotonic() < deadline, "the sweep never ran"
            time.sleep(0.2)
        (record,) = sessions_dir(store).glob("*.json")  # the worker recorded the instance it started
        session = json.loads(record.read_text())
        assert session["owner_pid"] == first.pid
        # NOTE: every process of its Ray instance descends from the worker now; their environments cannot
        # tag them (Ray's agents overwrite theirs with their process title), so they are listed by ancestry
        tree = psutil.Process(first.pid).children(recursive=True)
        os.kill(first.pid, signal.SIGKILL)  # the worker only, as the OOM killer would
        first.wait()
        time.sleep(2)  # NOTE: give Ray's fate-sharing its moment, so that what is left really is left
        assert _alive(tree), "nothing of the killed worker's Ray instance was left: this test tests nothing"
        log_file = tmp_path / "second.log"
        with open(log_file, "wb") as out:
            second = subprocess.run(cmd, cwd=ROOT, env=env, stderr=out, timeout=120)
        said = log_file.read_text()
        # NOTE: checked before the finally below kills the first worker's process group: what is gone now
        # was stopped by the second worker's start, the code under test, not by this test's own cleanup
        left, tagged = _alive(tree), _tagged(token)
    finally:
        kill_group(first.pid, signal.SIGKILL)
    assert second.returncode == 0, said
    assert (
        f"Ray session {Path(session['session_dir']).name} of dead pid {first.pid}: cleaned up, not reattached" in said
        and "still alive" not in said
    ), said
    assert not left, f"processes of the killed worker's Ray session still alive: {left}\n{said}"
    assert not tagged
    assert not list(sessions_dir(store).glob("*.json"))  # the record went with its leftovers
    progress = jobs.job_progress(job, store)
    assert progress["status"] == "failed" and "worker died during the Ray sweep" in progress["error"]
