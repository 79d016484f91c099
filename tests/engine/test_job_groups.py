"""A sweep's jobs as one thing (engine.jobs.job_groups, cancel_jobs) and the estimate from this host's finished jobs,
on a real store: rows written as the worker writes them, no worker needed."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

from engine import jobs
from engine.config import RunConfig, SweepConfig
from engine.jobs.queue import now
from engine.store import connect

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
)


def _sweep(store) -> list[str]:
    sweep = SweepConfig.from_dict(
        {"name": "s", "base": TINY, "grid": {"loader": ["threads", "processes"], "workers": [1, 2]}}
    )
    return jobs.submit_sweep(sweep, origin="cli", db=store)


def _finish(store, job_id: str, seconds: float, status: str = "done") -> None:
    """Mark a job ended after `seconds`, its run stored on this host, as the worker and ingest leave them."""
    end = now()
    with connect(store, read_only=False) as conn:
        conn.execute(
            "UPDATE jobs SET status = ?, started_at = ?, ended_at = ? WHERE job_id = ?",
            [status, end - timedelta(seconds=seconds), end, job_id],
        )
        conn.execute(
            "INSERT INTO runs (run_id, status, host, workload, model, n_samples, epochs, bound, deleted) "
            "SELECT run_id, ?, ?, 'tensor', 'mlp', 64, 2, false, false FROM jobs WHERE job_id = ?",
            [status, socket.gethostname(), job_id],
        )


def test_a_sweeps_jobs_are_one_group_with_n_of_n_and_a_lone_job_is_its_own(store):
    lone = jobs.submit(RunConfig.from_dict(TINY), origin="cli", db=store)
    ids = _sweep(store)
    groups = jobs.job_groups(store, limit=2)  # the limit counts jobs; a sweep is gathered whole anyway
    sweep = next(g for g in groups if g.kind == "sweep")
    assert [j["job_id"] for j in sweep.jobs] == ids  # the order the worker takes them
    assert (sweep.total, sweep.ended, sweep.status) == (4, 0, "queued")
    assert sweep.label == "sweep of 4 runs on tensor/mlp, varying loader, workers"
    assert lone not in sweep.active_ids and any(g.key == lone for g in jobs.job_groups(store))
    _finish(store, ids[0], 6.0)
    sweep = next(g for g in jobs.job_groups(store) if g.kind == "sweep")
    assert (sweep.ended, sweep.status, sweep.counts) == (1, "queued", {"done": 1, "queued": 3})
    assert sweep.eta_s == pytest.approx(3 * 6.0, rel=0.05) and "its 1 finished run, 6 s each" in sweep.eta_basis
    assert "run(s)" not in sweep.eta_basis and "6–6" not in sweep.eta_basis  # issue 39: "20–20 s each"


def test_cancel_all_cancels_every_queued_job_and_the_group_says_cancelled(store):
    ids = _sweep(store)
    _finish(store, ids[0], 3.0)
    sweep = next(g for g in jobs.job_groups(store) if g.kind == "sweep")
    assert jobs.cancel_jobs(sweep.active_ids, store) == {i: "cancelled" for i in ids[1:]}
    sweep = next(g for g in jobs.job_groups(store) if g.kind == "sweep")
    assert (sweep.status, sweep.ended, sweep.active_ids, sweep.eta_s) == ("cancelled", 4, [], 0.0)


def test_the_estimate_comes_from_this_hosts_finished_jobs_like_it_and_gives_its_range(store):
    cfg = RunConfig.from_dict(TINY)
    guess = jobs.estimate_duration([cfg], db=store)
    assert guess["similar"] == 0 and guess["basis"].startswith("a rough guess")
    assert guess["low_s"] < guess["seconds"] < guess["high_s"]
    ids = _sweep(store)
    for job_id, seconds in zip(ids, (4.0, 6.0, 8.0)):
        _finish(store, job_id, seconds)
    est = jobs.estimate_duration([cfg, cfg.replace(n_samples=128)], db=store)
    # the fixed part (the fastest job: 4 s) stays; the rest scales with the samples read: 0, 2 or 4 s for 64
    assert (est["low_s"], est["seconds"], est["high_s"]) == pytest.approx((4 + 4, 6 + 8, 8 + 12))
    assert est["similar"] == 3 and est["basis"] == "from 3 finished jobs like them on this host"
    elsewhere = jobs.estimate_duration([cfg], db=store, host="another-host")
    assert elsewhere["similar"] == 0  # another host's jobs say nothing about this one
