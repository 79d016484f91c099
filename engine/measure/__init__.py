"""Measurement: the instruments a run, its passes and its probe read, each in its own module. A leaf: it imports no
loader, mode, workload, bound or prediction (tests/engine/test_architecture.py keeps it so).

    timers.py       per step: data wait, copy to device, compute, total; per epoch: wall time, time to first batch
    cuda_events.py  CUDA events, pooled, read at epoch end (no per-step synchronize)
    sampler.py      CPU %, memory (PSS of the run's process tree) and GPU, sampled in a thread (nvml.py)
    host.py         the host facts of a run: its machine and its thread settings
    machine.py      the host fingerprint: which machine a run was on (no torch)
    pools.py        thread pools the lab does not set (BLAS, OpenMP in user code), found and limited by threadpoolctl
    capacity.py     the CPUs and memory this process may use (affinity, cgroup)
    idle.py         GPU idle split by cause (data wait, copy wait, other host time)
    startup.py      a run's start-up phases
    throughput.py   the median steady epoch, and samples per second over one span
    verdicts.py     what limits a run, in words, and what would help (no torch: the pages read it)
    waits.py        data-wait percentiles
    trace.py        --trace: one extra epoch under torch.profiler

This face names the instruments' public parts: `from engine.measure import EpochTimer, usable_cpus`. Each is loaded
from its module when first asked for, so a torch-free caller (the dashboard reads the verdicts) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "available_memory": "capacity", "usable_cores": "capacity", "usable_cpus": "capacity",
    "DeviceBatch": "cuda_events", "EventPool": "cuda_events", "Span": "cuda_events",
    "MACHINE_KEYS": "machine", "THREAD_KEYS": "machine", "machine_id": "machine",
    "fingerprint": "host", "thread_settings": "host",
    "tree_cpu_s": "host",
    "IdleSplit": "idle", "clock_offset": "idle", "split_idle": "idle",
    "Gpu": "nvml", "gpu_facts": "nvml",
    "cap_pools": "pools", "extra_threads": "pools", "hidden_pools": "pools", "limit_pools": "pools",
    "idle_pools_add_none": "pools", "pool_fix": "pools", "pools_record": "pools", "pools_text": "pools",
    "Sampler": "sampler",
    "PHASES": "startup",
    "epoch_walls": "throughput", "median_epoch_s": "throughput",
    "samples_per_s": "throughput", "span_s": "throughput",
    "EpochTimer": "timers", "arrived": "timers",
    "TRACED_MODES": "trace", "TRACE_FILE": "trace",
    "ABOVE_ONE": "verdicts", "OVERLAP_MIN": "verdicts", "VERDICTS": "verdicts", "efficiency_text": "verdicts",
    "serial_kind": "verdicts", "verdict_help": "verdicts",
    "QUANTILES": "waits", "wait_percentiles": "waits",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """An instrument's public part, from its module (imported now, once): PEP 562's lazy package attributes."""
    if name not in _WHERE:
        raise AttributeError(f"module 'engine.measure' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"engine.measure.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
