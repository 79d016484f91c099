"""The Ray executor on a real local Ray instance (2 CPUs, 127.0.0.1 only): a tiny sweep lands in the store
like a local one, one trial at a time on a CPU node; a trial whose Ray worker is killed mid-run is recorded
as failed with its finished epochs and the sweep goes on; cancel; the clear error without Ray; and the
instance leaves no process behind."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import psutil
import pytest

from engine.config import RunConfig, SweepConfig
from engine.store import get_epochs, get_steps, list_runs
from engine.sweeps.local import run_sweep
from engine.sweeps.ray import connect_ray, gpus_needed, ray_available, require_ray, run_sweep_ray
from engine.sweeps.ray._node import scratch_dir

pytestmark = pytest.mark.slow

TINY = {
    "workload": "tensor",
    "n_samples": 32,
    "image_size": 8,
    "width": 8,
    "batch_size": 16,
    "epochs": 30,
    "loader": "threads",
    "workers": 1,
    "device": "cpu",
    "bound": False,
}
# NOTE: 32 samples x 40 ms: about 1.3 s an epoch, 30 epochs; long enough to be killed after its second
SLOW = {**TINY, "latency_ms": 40.0}


def _ray_processes() -> set[int]:
    out = set()
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        text = " ".join(p.info["cmdline"] or []) + " " + (p.info["name"] or "")
        if any(s in text for s in ("raylet", "gcs_server", "ray::", "default_worker.py", "runtime_env/agent")):
            out.add(p.info["pid"])
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not ray_available() and os.environ.get("LOADERLAB_REQUIRE_RAY") != "1":
        pytest.skip("Ray is not installed: pip install -r requirements-cluster.txt")
    with pytest.MonkeyPatch.context() as mp:
        # NOTE: a token in the environment keeps Ray's token auth on without writing ~/.ray/auth_token
        mp.setenv("RAY_AUTH_TOKEN", "loaderlab-test-" + os.urandom(16).hex())
        mp.setenv("LOADERLAB_DATA", str(tmp_path_factory.getbasetemp() / "data"))
        with connect_ray(num_cpus=2) as ray:
            node = ray.nodes()[0]
            assert node["NodeManagerAddress"] == "127.0.0.1"
            # NOTE: this process's children only: a job-worker test on another xdist worker runs a Ray of its own
            started = _ray_processes() & {c.pid for c in psutil.Process().children(recursive=True)}
            assert started, "ray.init started no processes?"
            yield ray
        assert not ray.is_initialized()
    leftovers = [p for p in started if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not leftovers, f"Ray processes left after shutdown: {leftovers}"


class _Killer(threading.Thread):
    """Kills the Ray worker running the SLOW trial once that run has finished two epochs. NOTE: only a run under
    this process's own Ray (ray.init's raylet is its child): the job-worker tests on another xdist worker run their
    trials in the same scratch folder, and a kill of one of theirs left this sweep with no failed trial."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.killed = threading.Event(), {}

    def run(self) -> None:
        while not self.stop.wait(0.1):
            for p in psutil.process_iter(["pid", "cmdline"]):
                cmd = p.info["cmdline"] or []
                if "engine.run.runner" not in cmd or "loaderlab-ray" not in cmd[-1]:
                    continue
                run_dir = Path(cmd[-1])
                try:
                    if os.getpid() not in {a.pid for a in p.parents()}:
                        continue
                    slow = json.loads((run_dir / "config.json").read_text())["latency_ms"] > 0
                    epochs = (run_dir / "events.jsonl").read_text().count('"type":"epoch"')
                    worker = p.parent()
                except (OSError, ValueError, psutil.Error):
                    continue
                if slow and epochs >= 2:
                    self.killed = {
                        "run_id": run_dir.name,
                        "runner": p.pid,
                        "worker": " ".join(worker.cmdline()),
                        "run_dir": run_dir,
                    }
                    worker.kill()
                    return


@pytest.fixture(scope="module")
def ray_sweep(cluster, tmp_path_factory):
    db = tmp_path_factory.mktemp("ray") / "loaderlab.duckdb"
    # two trials, one at a time: a quick one, and SLOW, whose Ray worker gets killed mid-run
    sweep = SweepConfig.from_dict({"name": "ray-test", "base": TINY, "grid": {"latency_ms": [0.0, 40.0]}})
    killer = _Killer()
    killer.start()
    try:
        result = run_sweep_ray(sweep, db=db, progress=True)
    finally:
        killer.stop.set()
        killer.join()
    return result, db, killer.killed


def _runs(db: Path):
    return list_runs(db=db).set_index("run_id")


def test_every_trial_lands_like_a_local_run(ray_sweep, tmp_path):
    result, db, killed = ray_sweep
    assert len(result.results) == 2 and result.counts == {"done": 1, "failed": 1}
    runs = _runs(db)
    assert set(runs.index) == {r.run_id for r in result.results}
    assert set(runs["sweep_id"]) == {result.sweep_id} and sorted(runs["config_idx"]) == [0, 1]
    local_db = tmp_path / "local.duckdb"
    local = run_sweep(SweepConfig.from_dict({"name": "local", "base": TINY}), db=local_db, progress=False)
    assert local.counts == {"done": 1}
    here, there = _runs(local_db).iloc[0], runs[runs["status"] == "done"].iloc[0]
    assert set(here[here.notna()].index) == set(there[there.notna()].index)  # the same columns filled in
    assert there["n_epochs"] == here["n_epochs"] and there["samples_per_s"] > 0
    assert there["host_fingerprint"] == here["host_fingerprint"]  # the node's own fingerprint
    assert Path(there["run_dir"]).parent == db.parent / "runs"
    assert len(get_steps(there.name, db=db)) == len(get_steps(here.name, db=local_db)) == 30 * 2
    # one trial at a time on a CPU node: the two runs do not overlap
    (_, first_end), (second_start, _) = sorted(zip(runs["started_at"], runs["ended_at"]))
    assert first_end <= second_start


def test_killed_worker_is_a_failed_run_with_its_epochs(ray_sweep):
    result, db, killed = ray_sweep
    assert killed, "the slow trial never ran"
    assert "loaderlab-trial" in killed["worker"]  # the Ray worker running the trial was killed, not the run
    run = _runs(db).loc[killed["run_id"]]
    assert run["status"] == "failed"
    assert "Ray worker" in run["error"] and "died" in run["error"]
    assert len(get_epochs(killed["run_id"], db=db)) >= 2  # salvaged from the node: finished epochs kept
    assert not killed["run_dir"].exists()  # the node's scratch store is gone
    runner = psutil.Process(killed["runner"]) if psutil.pid_exists(killed["runner"]) else None
    assert runner is None or runner.status() == psutil.STATUS_ZOMBIE  # the orphaned run was stopped


def test_cancel_stops_the_sweep_and_keeps_epochs(cluster, tmp_path):
    db = tmp_path / "loaderlab.duckdb"
    cancel = threading.Event()
    sweep = SweepConfig.from_dict({"name": "cancel", "base": SLOW, "repeats": 2})

    earlier = set(scratch_dir("x").parent.glob("*/runs/*"))  # another session's leftovers are not this sweep's

    def watch() -> None:  # cancel once this sweep's first run has finished two epochs
        while not cancel.wait(0.1):
            for run_dir in set(scratch_dir("x").parent.glob("*/runs/*")) - earlier:
                try:
                    ours = json.loads((run_dir / "meta.json").read_text())["sweep_id"].startswith("cancel-")
                    if ours and (run_dir / "events.jsonl").read_text().count('"type":"epoch"') >= 2:
                        cancel.set()
                except (OSError, ValueError, KeyError):
                    continue

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    result = run_sweep_ray(sweep, db=db, progress=False, cancel=cancel)
    cancel.set()
    t.join()
    assert [r.status for r in result.results] == ["cancelled"]  # the second repeat never started
    assert len(get_epochs(result.results[0].run_id, db=db)) >= 2
    assert _runs(db).iloc[0]["status"] == "cancelled"


def test_without_ray_the_error_says_how_to_install(monkeypatch, tmp_path, capsys):
    from engine.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # what a missing package looks like to `import ray`
    assert not ray_available()
    with pytest.raises(ValueError, match="requirements-cluster.txt"):
        require_ray()
    toml = tmp_path / "s.toml"
    toml.write_text('name = "x"\n[base]\nworkload = "tensor"\n')
    assert main(["sweep", str(toml), "--executor", "ray", "--db", str(tmp_path / "db.duckdb")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "executor" in err[0] and "pip install -r requirements-cluster.txt" in err[0]


@pytest.mark.parametrize(
    "fields, gpu_cluster, want",
    [
        ({"device": "cpu"}, True, 0),
        ({"device": "auto"}, False, 0),
        ({"device": "auto"}, True, 1),
        ({"device": "cuda"}, True, 1),
        ({"device": "cuda:1"}, True, 2),
        ({"device": "cuda", "mode": "ddp", "world_size": 3}, True, 3),
        ({"device": "cuda", "mode": "split", "devices": ["cuda:0", "cuda:1", "cuda:1"]}, True, 2),
    ],
)
def test_gpus_needed_is_whole_gpus(fields, gpu_cluster, want):
    assert gpus_needed(RunConfig(**fields), gpu_cluster) == want
