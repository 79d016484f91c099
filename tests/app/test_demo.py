"""The first visit: `python -m engine demo` (what `make run` calls) queues the demo sweep as jobs, with
enough repeats for intervals; the job worker runs them and Explore then shows medians with intervals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from engine import api
from engine.analysis.stats import MIN_FOR_CI
from engine.jobs.demo import demo_sweep, ensure_demo

DEMO_REPEATS = demo_sweep().repeats  # examples/demo.toml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_engine_demo_queues_the_sweep_once_with_seven_repeats_per_config(tmp_path):
    db = str(tmp_path / "loaderlab.duckdb")
    out = _cli("demo", "--db", db)
    assert out.returncode == 0, out.stderr
    assert "demo sweep queued" in out.stdout
    jobs = api.list_jobs(db=db)
    configs = Counter(
        (c["workload"], c["model"], c["loader"], c["workers"], c["threads"])
        for c in map(json.loads, jobs["config_json"])
    )
    # 6 runs give each median an interval, and 7 on each side the advisor's ratio
    assert DEMO_REPEATS >= MIN_FOR_CI + 1 == 7 and set(configs.values()) == {DEMO_REPEATS}
    assert set(configs) == {
        ("jpeg", "cnn", "sync", 0, 0),
        ("jpeg", "cnn", "prefetch", 0, 0),
        ("jpeg", "cnn", "threads", 2, 0),
        ("jpeg", "cnn", "processes", 2, 0),
        ("jpeg", "cnn", "processes", 2, 1),
    }  # the four loaders, and what the lab recommends
    assert (jobs["status"] == "queued").all() and jobs["sweep_id"].nunique() == 1

    again = _cli("demo", "--db", db)  # the second `make run`: nothing more queued
    assert again.returncode == 0 and "demo skipped" in again.stdout
    assert len(api.list_jobs(db=db)) == len(jobs)


@pytest.mark.slow
def test_a_tiny_demo_run_by_the_worker_gives_medians_with_intervals(tmp_path, monkeypatch):
    """One config of a tiny demo (the others cancelled, to keep the test short) run by a real worker."""
    monkeypatch.setenv("LOADERLAB_DATA", str(tmp_path / "data"))
    db = str(tmp_path / "loaderlab.duckdb")
    assert ensure_demo(db=db, n_samples=32, image_size=16, epochs=2, bound=False)
    jobs = api.list_jobs(db=db)
    for job_id, cfg in zip(jobs["job_id"], jobs["config_json"]):
        if json.loads(cfg)["loader"] != "sync":
            api.cancel(job_id, db=db)
    out = _cli("worker", "--db", db, "--once")
    assert out.returncode == 0, out.stderr[-2000:]
    summary = api.explore_summary("loader", filters={"tag": ["demo"]}, db=db)
    row = summary.set_index("loader").loc["sync"]
    assert row["n"] == DEMO_REPEATS and row["lo"] <= row["median"] <= row["hi"]
    assert row["n_configs"] == 1
