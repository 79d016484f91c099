"""Warm start (engine/run/warm.py): runs forked from one parent that imported torch are the runs a cold start makes.

Real processes throughout: a real warm parent, real forked runs with real loader workers, a real store.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import psutil
import pytest

from engine.config import RunConfig, SweepConfig
from engine.paths import ROOT, runs_dir
from engine.run.runner import launch
from engine.run import warm as warm_mod
from engine.run.warm import WarmParent, borrowed, run_env, shared_pid
from engine.store import get_run
from engine.sweeps.local import run_sweep

TINY = dict(
    workload="tensor",
    n_samples=32,
    image_size=8,
    width=8,
    epochs=2,
    batch_size=8,
    bound=False,
    sample_hz=2.0,
    device="cpu",
)  # a CPU run on every machine (the warm parent never touches CUDA)
SLOW = dict(TINY, loader="processes", workers=2, epochs=12, latency_ms=8.0)  # long enough to be killed mid-run
PLUGIN = """
import torch
from torch import nn
from torch.utils.data import TensorDataset

def data(n_samples, image_size, **_):
    return TensorDataset(torch.zeros(n_samples, 3, image_size, image_size), torch.arange(n_samples) % 2)

def net(in_shape, num_classes, **_):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes))
"""


@pytest.fixture(scope="module")
def warm():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LOADERLAB_WARM", raising=False)
        parent = WarmParent()
    with parent:
        yield parent
    assert _gone(parent.pid), "the warm parent outlived close()"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _warm_parents() -> set[int]:
    found = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "engine.run._warm_server" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


def _rows(db: Path, sweep_id: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(
            "SELECT r.loader, r.config_idx, r.status, r.config_json, count(e.epoch), sum(e.samples) FROM runs r "
            "JOIN epochs e USING (run_id) WHERE r.sweep_id = ? GROUP BY ALL ORDER BY r.config_idx",
            [sweep_id],
        ).fetchall()


def test_a_warm_sweep_stores_the_rows_a_cold_one_does(store, monkeypatch, caplog):
    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    points = [{"loader": "sync"}, {"loader": "processes", "workers": 2}]
    sweep = SweepConfig.from_dict({"name": "w", "base": TINY, "points": points})
    before = _warm_parents()
    hot = run_sweep(sweep, db=store, progress=False)
    assert _warm_parents() - before <= {shared_pid()}  # the process's shared parent, kept for later sweeps; no other
    monkeypatch.setenv("LOADERLAB_WARM", "0")
    with caplog.at_level(logging.INFO, logger="engine.run.warm"):
        cold = run_sweep(sweep, db=store, progress=False)
    assert [r.warm for r in hot.results] == [True, True] and [r.warm for r in cold.results] == [False, False]
    assert "LOADERLAB_WARM=0: runs start cold" in caplog.text
    assert _rows(store, hot.sweep_id) == _rows(store, cold.sweep_id)
    assert [r[2] for r in _rows(store, hot.sweep_id)] == ["done", "done"]


def test_a_later_sweep_and_run_fork_from_the_shared_parent_and_start_no_other(store, monkeypatch, caplog):
    """A notebook's second sweep and its single runs import torch no more: they fork from the parent the first
    sweep left, and no new parent says it is ready."""
    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    sweep = SweepConfig.from_dict(
        {"name": "s", "base": TINY, "points": [{"loader": "sync"}, {"loader": "threads", "workers": 2}]}
    )
    first = run_sweep(sweep, db=store, progress=False)
    pid = shared_pid()
    assert pid is not None and all(r.warm for r in first.results)
    with caplog.at_level(logging.INFO, logger="engine.run.warm"):
        second = run_sweep(sweep, db=store, progress=False)
        with borrowed(enabled=False) as parent:  # a one-run sweep's or lab.run's borrow
            single = launch(RunConfig.from_dict(TINY), db=store, warm=parent)
    assert all(r.warm and r.status == "done" for r in second.results), [(r.status, r.error) for r in second.results]
    assert single.warm and single.status == "done", single.error
    assert shared_pid() == pid and "ready" not in caplog.text and "cold" not in caplog.text, caplog.text


def test_a_second_borrower_at_once_gets_a_parent_of_its_own_that_ends_with_its_block(monkeypatch):
    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    with borrowed() as shared:
        with borrowed() as own:  # another thread's sweep while this one runs: its own parent, as before sharing
            assert own is not shared and own.pid != shared.pid and own.ready()
            own_pid = own.pid
        assert _gone(own_pid) and shared.pid == shared_pid()
    assert shared_pid() == shared.pid  # kept for the next borrower


def test_an_error_in_a_borrowers_block_ends_the_shared_parent(monkeypatch):
    """A run may still be in flight when a sweep raises (Ctrl-C in a notebook): its exit would be read as the next
    fork's reply, so the parent goes with the error and the next borrower starts a new one."""
    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    with pytest.raises(KeyboardInterrupt), borrowed() as parent:
        pid = parent.pid
        raise KeyboardInterrupt
    assert _gone(pid) and shared_pid() is None
    with borrowed() as again:
        assert again.pid != pid and again.ready()


def test_a_changed_load_time_variable_replaces_the_shared_parent(monkeypatch):
    """OMP_NUM_THREADS is read as libraries load: a parent started under another value cannot fork this run's."""
    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    with borrowed() as before:
        assert before.ready()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    with borrowed() as after:
        assert after.pid != before.pid and after.ready() and after.pid == shared_pid()
    assert _gone(before.pid)


def test_the_shared_parent_exits_by_itself_once_idle_and_a_borrower_past_half_that_gets_a_new_one(monkeypatch):
    """Idle in a notebook, it gives torch's memory back on its own clock; a borrower replaces it well before then,
    so it can never exit between the check and a fork."""
    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    warm_mod._close_shared()
    monkeypatch.setattr(warm_mod, "SHARED_IDLE_S", 3.0)
    with borrowed() as first:
        assert first.ready()
    time.sleep(1.6)  # past half the idle time: replaced, not reused
    with borrowed() as second:
        assert second.pid != first.pid and second.ready()
    assert _gone(first.pid)
    deadline = time.monotonic() + 30
    while not _gone(second.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _gone(second.pid), "the idle shared parent did not exit by itself"
    assert shared_pid() is None


def test_the_warm_parent_forks_single_threaded_without_cuda(warm, store):
    before = warm.status()
    assert before["torch_loaded"] and before["cuda_initialized"] is False and before["python_threads"] == 1
    # its only threads are those numpy's BLAS makes on load: importing torch and the engine started no pool
    plain = subprocess.run(
        [sys.executable, "-c", "import numpy, os; print(len(os.listdir('/proc/self/task')))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert before["baseline_threads"] == int(plain.stdout)
    # device auto: on a GPU box the forked child initialises CUDA, which must stay out of the parent
    result = launch(RunConfig.from_dict(dict(TINY, threads=1, device="auto")), db=store, warm=warm)
    assert result.warm and result.status == "done", result.error
    start = json.loads((result.run_dir / "events.jsonl").read_text().splitlines()[0])
    assert start["host"]["intra_op_threads"] == 1 and start["pid"] != warm.pid  # its own process, its own threads
    after = warm.status()
    assert after["cuda_initialized"] is False and after["pid"] == before["pid"]


def test_a_warm_runs_start_up_skips_the_imports_a_cold_one_pays(warm, store):
    cfg = RunConfig.from_dict(TINY)
    cold, hot = launch(cfg, db=store), launch(cfg, db=store, warm=warm)
    assert (cold.warm, hot.warm) == (False, True)
    cold_run, hot_run = get_run(cold.run_id, db=store), get_run(hot.run_id, db=store)
    # the cold child starts an interpreter and imports torch (seconds); the warm one is forked with them loaded
    assert hot_run["startup_imports_s"] < 0.5 * cold_run["startup_imports_s"]


def test_kill_9_of_a_warm_runs_group_leaves_no_orphans_and_stores_it_killed(warm, store):
    run_dir, group = runs_dir(store) / f"warm-kill-{secrets.token_hex(2)}", []

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # once an epoch is logged its loader workers are up
            events = run_dir / "events.jsonl"
            if events.exists() and '"epoch"' in events.read_text():
                pid = int((run_dir / "pid").read_text())
                group.extend(p.pid for p in psutil.process_iter() if _pgid(p.pid) == pid)
                os.killpg(pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    t = threading.Thread(target=killer)
    t.start()
    result = launch(RunConfig.from_dict(SLOW), db=store, meta={"run_id": run_dir.name}, warm=warm)
    t.join()
    assert result.warm and result.status == "killed" and "signal 9" in result.error
    assert len(group) >= 3, f"expected the run and its 2 loader workers in its group, saw {group}"
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in group) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in group), [p for p in group if not _gone(p)]
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("killed",)]
        assert conn.execute("SELECT count(*) FROM epochs").fetchone()[0] >= 1  # finished epochs kept
    assert warm.status()["cuda_initialized"] is False  # and the parent serves on


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_a_users_module_in_the_launch_folder_imports_in_a_warm_run(warm, store, tmp_path, monkeypatch):
    name = f"mine_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)  # importable only from here: not on the parent's sys.path nor on PYTHONPATH
    assert str(tmp_path) not in os.environ.get("PYTHONPATH", "")
    result = launch(RunConfig.from_dict(dict(TINY, workload=f"{name}:data", model=f"{name}:net")), db=store, warm=warm)
    assert result.warm and result.status == "done", (result.error, (result.run_dir / "stderr.log").read_text())


def test_a_dead_warm_parent_means_cold_runs_with_a_log_line(store, caplog, monkeypatch):
    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    with WarmParent() as parent:
        parent.status()
        os.kill(parent.pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="engine.run.warm"):
            result = launch(RunConfig.from_dict(TINY), db=store, warm=parent)
    assert not result.warm and result.status == "done", result.error
    assert "runs start cold" in caplog.text
    assert _gone(parent.pid)


def test_ddp_runs_forked_warm_each_get_their_own_process_group(warm, store):
    """Each run spawns its ranks, which meet at a port of their own: two in a row from one warm parent both work."""
    cfg = RunConfig.from_dict(dict(TINY, mode="ddp", device="cpu", world_size=2))
    for _ in range(2):
        result = launch(cfg, db=store, warm=warm)
        assert result.warm and result.status == "done", (result.error, (result.run_dir / "stderr.log").read_text())
    with duckdb.connect(str(store), read_only=True) as conn:
        rows = conn.execute("SELECT status, summary_json FROM runs").fetchall()
    assert [(status, json.loads(summary)["world_size_run"]) for status, summary in rows] == [("done", 2)] * 2


def test_a_job_runs_warm_in_the_worker_and_imports_from_the_submitters_folder(store, tmp_path, monkeypatch, caplog):
    from engine import jobs  # noqa: PLC0415
    from engine.jobs import run_worker  # noqa: PLC0415

    monkeypatch.delenv("LOADERLAB_WARM", raising=False)
    name = f"mine_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    cfg = RunConfig.from_dict(dict(TINY, workload=f"{name}:data", model=f"{name}:net"))
    job_id = jobs.submit(cfg, db=store, origin="cli")
    monkeypatch.chdir(ROOT)  # the worker runs elsewhere, as one started by ensure_worker() does
    before = _warm_parents()
    with caplog.at_level(logging.INFO, logger="engine.run.warm"):
        assert run_worker(store, once=True) == 0
    progress = jobs.job_progress(job_id, store)
    assert progress["status"] == "done", progress
    assert "ready" in caplog.text and "starts cold" not in caplog.text, caplog.text
    assert _warm_parents() == before  # its warm parent ended with the worker


def test_a_warm_parent_closed_before_it_is_ready_is_killed_and_one_that_is_ready_exits_by_itself():
    """A job worker that ran no job stops at once: its warm parent, still importing torch, has forked nothing and is
    killed at close, not waited for; a ready one exits on its own when its stdin closes. Neither leaves a process."""
    import psutil

    from engine.run.warm import WarmParent

    importing = WarmParent()
    proc = psutil.Process(importing.pid)
    importing.close()
    assert importing._proc is not None and importing._proc.returncode == -signal.SIGKILL
    assert not proc.is_running()

    with WarmParent() as ready:
        assert ready.status()["torch_loaded"]  # waits for its ready message
        proc = psutil.Process(ready.pid)
    assert ready._proc is not None and ready._proc.returncode == 0
    assert not proc.is_running()


def test_tunes_probe_forked_warm_is_measured_saved_and_read_back_cold_and_a_failing_one_says_why(warm, store, tmp_path):
    """tune forks its probe from its warm parent (WarmParent.call: a module's main, stdin and stdout files); the
    probe it saves is the one a cold tune then reads from the cache, and a child that fails reports its last line."""
    from engine.advice.tune import _probe

    cfg = RunConfig.from_dict({**TINY, "bound": False, "tag": "tune"})
    probe, note, _ = _probe(cfg, store, 20.0, True, warm)
    assert probe is not None and "measured now" in note, note
    assert probe["n_samples"] == cfg.n_samples and probe["load_median_wall_s"] > 0
    again, cached, _ = _probe(cfg, store, 20.0, True, None)  # cold, from the calibrations the warm child wrote
    assert again == probe and "cached" in cached, cached
    (tmp_path / "stdin").write_text("not json")
    child = warm.call("engine.predict._probe_child", [str(tmp_path / "cal")], tmp_path, run_env())
    assert child is not None and child.wait(timeout=60) == 1
    assert "JSONDecodeError" in (tmp_path / "stderr.log").read_text()
    assert not (tmp_path / "stdout").read_text()
