"""The persistent job queue: runs launched from the browser outlive the tab and the dashboard.

The queue is the store's `jobs` table (queued -> running -> done | failed | cancelled; `pid` is the worker
that took the job), with a spool beside it while a program outside LoaderLab holds the store.

    queue.py     submit, submit_sweep, submit_ray_sweep, list_jobs, cancel      (the pages' and the CLI's side)
    progress.py  job_progress (RunLog tailing, ETA)
    estimate.py  estimate_duration: from finished jobs like them on this host, with a range
    groups.py    job_groups: a sweep's jobs as one thing (n of N, ETA), cancel_group
    worker.py    the worker process: its loop
    control.py   ensure_worker / worker_alive / worker_pid / stop_worker: the worker from outside
    serve.py     `python -m engine serve` (make run): the dashboard and the worker it started, stopped together
    spool.py     job rows waiting beside a held store
    (the SQL of the `jobs` table is engine/store/jobs.py)

    job_id = submit(cfg, origin="browser"); ensure_worker(); job_progress(job_id)   # what the launch page does
    python -m engine worker [--db PATH] [--ensure | --once | --stop]               # the worker
"""

from __future__ import annotations

from engine.jobs.estimate import DEFAULT_S_PER_SAMPLE, RUN_OVERHEAD_S, estimate_duration
from engine.jobs.groups import JobGroup, cancel_jobs, job_groups
from engine.jobs.progress import job_progress
from engine.jobs.queue import (
    RAY_ADDRESS_ENV,
    RAY_SWEEP,
    cancel,
    default_ray_address,
    list_jobs,
    submit,
    submit_ray_sweep,
    submit_sweep,
)
from engine.jobs.serve import serve
from engine.jobs.control import ensure_worker, stop_worker, worker_alive, worker_pid
from engine.jobs.worker import run_worker

__all__ = [
    "DEFAULT_S_PER_SAMPLE",
    "JobGroup",
    "RAY_ADDRESS_ENV",
    "RAY_SWEEP",
    "RUN_OVERHEAD_S",
    "cancel",
    "cancel_jobs",
    "default_ray_address",
    "ensure_worker",
    "estimate_duration",
    "job_groups",
    "job_progress",
    "list_jobs",
    "run_worker",
    "serve",
    "stop_worker",
    "submit",
    "submit_ray_sweep",
    "submit_sweep",
    "worker_alive",
    "worker_pid",
]
