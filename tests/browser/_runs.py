"""Runs for the browser tests' stores, run by the served dashboard's own job worker: it forks each from its warm
parent, so a test's seed runs pay no interpreter start and torch import of their own."""

from __future__ import annotations

from tests._wait import wait_for


def done_runs(db, *configs: dict) -> list[str]:
    """Queue each config (RunConfig's fields) for the dashboard's worker and wait until each run is done and stored:
    their run ids, in order."""
    from engine import api

    job_ids = [api.submit(api.RunConfig.from_dict(c), origin="cli", db=db) for c in configs]
    for job_id in job_ids:
        status = wait_for(
            lambda j=job_id: (s := api.job_progress(j, db)["status"]) in ("done", "failed", "cancelled") and s,
            f"job {job_id} ended",
            240,
        )
        assert status == "done", api.list_jobs(db=db, limit=1000).set_index("job_id").loc[job_id].to_dict()
    run_ids = [api.job_progress(j, db)["run_id"] for j in job_ids]
    for run_id in run_ids:
        wait_for(lambda r=run_id: api.get_run(r, db=db) is not None, f"run {run_id} stored", 60)
    return run_ids
