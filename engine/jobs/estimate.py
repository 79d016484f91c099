"""How long queued runs will take, and how sure that is: what the Launch page says before a sweep is queued.

The first source is whole jobs on this host: the wall time from the worker taking a job to its end (subprocess,
dataset, calibration and ingest included), for runs of the same workload and model. Its epochs are scaled to the
new run's size; the fixed part of a job (the fastest job this host ever ran bounds it) is not. Without such runs,
the median epoch seconds per sample of any host's runs, plus RUN_OVERHEAD_S a run: a rough guess, and said so.

    est = estimate_duration(configs)   # {"seconds", "low_s", "high_s", "runs", "from_history", "similar", "basis"}
"""

from __future__ import annotations

import socket
import statistics
from typing import Any

from engine.config import RunConfig
from engine.errors import StoreError
from engine.paths import Db
from engine.store import jobs as job_table
from engine.store.queries import seconds_per_sample

__all__ = ["DEFAULT_S_PER_SAMPLE", "RUN_OVERHEAD_S", "estimate_duration"]

# Duration guess when the store has no similar run: seconds per sample-epoch (a small CPU MLP step)
# and the fixed cost of one run (subprocess start, torch import, dataset build).
DEFAULT_S_PER_SAMPLE = 1e-3
RUN_OVERHEAD_S = 5.0


def _passes(c: Any) -> float:
    """Sample-epochs a run reads: its epochs plus one for the lower bound's loader pass."""
    return max(1, int(c["n_samples"])) * (int(c["epochs"]) + int(bool(c["bound"])))


def _from_jobs(cfg: RunConfig, done: list[dict[str, Any]], fixed_s: float) -> dict[int, float]:
    """Finished job (its index in `done`) -> its prediction for cfg, for each job of the same pipeline on this host:
    its fixed part, plus its variable part scaled to cfg's sample-epochs."""
    mine = _passes({"n_samples": cfg.n_samples, "epochs": cfg.epochs, "bound": cfg.bound})
    return {
        i: fixed_s + max(0.0, j["job_s"] - fixed_s) * mine / _passes(j)
        for i, j in enumerate(done)
        if (j["workload"], j["model"]) == (cfg.workload, cfg.model)
    }


def _guess(cfg: RunConfig, seen: dict[tuple[str, str], float]) -> tuple[float, bool]:
    per_sample = seen.get((cfg.workload, cfg.model))
    passes = cfg.n_samples * (cfg.epochs + int(cfg.bound))
    return RUN_OVERHEAD_S + (per_sample or DEFAULT_S_PER_SAMPLE) * passes, per_sample is not None


def estimate_duration(configs: list[RunConfig], db: Db = None, host: str | None = None) -> dict[str, Any]:
    """Seconds the configs will take, one after another, with a range (low_s, high_s: the spread of the finished
    jobs like each one) and how it was reached. from_history counts the configs with any history; similar is the
    number of finished jobs like them on this host that the estimate used (0: no such job here)."""
    try:
        done = job_table.finished_job_times(host or socket.gethostname(), db)
    except StoreError:  # held by another program: the guess below still answers
        done = []
    fixed_s = min((j["job_s"] for j in done), default=0.0)
    seen: dict[tuple[str, str], float] | None = None
    total = low = high = 0.0
    known = from_jobs = 0
    used: set[int] = set()
    for cfg in configs:
        by_job = _from_jobs(cfg, done, fixed_s)
        if by_job:
            predictions = list(by_job.values())
            total += statistics.median(predictions)
            low, high = low + min(predictions), high + max(predictions)
            known, from_jobs = known + 1, from_jobs + 1
            used.update(by_job)
            continue
        seen = seconds_per_sample(db) if seen is None else seen
        guess, from_runs = _guess(cfg, seen)
        known += from_runs
        # NOTE: a guess gets a wide range on purpose: a guess from other workloads can be off several-fold (issue 28)
        total, low, high = total + guess, low + guess / 3, high + guess * 3
    return {
        "seconds": total,
        "low_s": low,
        "high_s": high,
        "runs": len(configs),
        "from_history": known,
        "similar": len(used),
        "basis": _basis(len(configs), from_jobs, known, len(used)),
    }


def _jobs(n: int) -> str:
    return f"{n} finished job{'' if n == 1 else 's'}"


def _basis(runs: int, from_jobs: int, known: int, similar: int) -> str:
    """How sure the estimate is, in words."""
    if runs and from_jobs == runs:
        return f"from {_jobs(similar)} like them on this host"
    if from_jobs:
        return f"from {_jobs(similar)} like some of them on this host; a rough guess for the rest"
    if known:
        return "a rough guess from the epoch times of similar runs; no job like them has finished on this host yet"
    return "a rough guess: no run like them has finished yet"
