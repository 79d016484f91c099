"""A run's status, and its job's: one enum, whose values are what the store, the RunLogs and the pages hold.

    queued     a job waiting for the worker (the jobs table only)
    running    started; a run stays `running` while its heartbeat is fresh
    done       every epoch ran (and the summary was written)
    failed     it raised, or its process exited without finishing; the error says why
    cancelled  the user (or a stopped worker) cancelled it; finished epochs kept
    killed     its process died by a signal or went silent (a stale heartbeat): runs only

A str enum: RunStatus.DONE == "done", so stored rows, JSON events and SQL literals are unchanged.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ENDED", "JOB_STATUSES", "RunStatus"]


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    KILLED = "killed"


JOB_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED)
ENDED = (RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.KILLED)  # a run or job that is over
