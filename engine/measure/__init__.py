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

This face names the instruments' public parts: `from engine.measure import EpochTimer, usable_cpus`. The torch-free
ones are imported here; those of the six modules that import torch load when first asked for, so a torch-free
caller (the dashboard reads the verdicts) loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.measure.capacity import available_memory, usable_cores, usable_cpus
from engine.measure.idle import IdleSplit, clock_offset, split_idle
from engine.measure.machine import MACHINE_KEYS, THREAD_KEYS, machine_id
from engine.measure.pools import (
    cap_pools,
    extra_threads,
    hidden_pools,
    idle_pools_add_none,
    limit_pools,
    pool_fix,
    pools_record,
    pools_text,
)
from engine.measure.startup import PHASES
from engine.measure.throughput import epoch_walls, median_epoch_s, samples_per_s, span_s
from engine.measure.verdicts import ABOVE_ONE, OVERLAP_MIN, VERDICTS, efficiency_text, serial_kind, verdict_help
from engine.measure.waits import QUANTILES, wait_percentiles

if TYPE_CHECKING:  # the torch side, for the type checker and go-to-definition; loaded by __getattr__ at run time
    from engine.measure.cuda_events import DeviceBatch, EventPool, Span
    from engine.measure.host import fingerprint, thread_settings, tree_cpu_s
    from engine.measure.nvml import Gpu, gpu_facts
    from engine.measure.sampler import Sampler
    from engine.measure.timers import EpochTimer, arrived
    from engine.measure.trace import TRACE_FILE, TRACED_MODES

_TORCH_SIDE = {
    "DeviceBatch",
    "EventPool",
    "Span",
    "fingerprint",
    "thread_settings",
    "tree_cpu_s",
    "Gpu",
    "gpu_facts",
    "Sampler",
    "EpochTimer",
    "arrived",
    "TRACE_FILE",
    "TRACED_MODES",
}

__all__ = [
    "ABOVE_ONE",
    "DeviceBatch",
    "EpochTimer",
    "EventPool",
    "Gpu",
    "IdleSplit",
    "MACHINE_KEYS",
    "OVERLAP_MIN",
    "PHASES",
    "QUANTILES",
    "Sampler",
    "Span",
    "THREAD_KEYS",
    "TRACED_MODES",
    "TRACE_FILE",
    "VERDICTS",
    "arrived",
    "available_memory",
    "cap_pools",
    "clock_offset",
    "efficiency_text",
    "epoch_walls",
    "extra_threads",
    "fingerprint",
    "gpu_facts",
    "hidden_pools",
    "idle_pools_add_none",
    "limit_pools",
    "machine_id",
    "median_epoch_s",
    "pool_fix",
    "pools_record",
    "pools_text",
    "samples_per_s",
    "serial_kind",
    "span_s",
    "split_idle",
    "thread_settings",
    "tree_cpu_s",
    "usable_cores",
    "usable_cpus",
    "verdict_help",
    "wait_percentiles",
]


def __getattr__(name: str) -> Any:
    """A public part of the torch side, imported now (once): PEP 562's lazy package attributes."""
    if name not in _TORCH_SIDE:
        raise AttributeError(f"module 'engine.measure' has no attribute '{name}'")
    # NOTE: here, not at the top: these modules import torch, and the CLI and the dashboard import this face
    from engine.measure import cuda_events, host, nvml, sampler, timers, trace

    module = next(m for m in (cuda_events, host, nvml, sampler, timers, trace) if name in m.__all__)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
