"""What this machine lets a process use: CPUs (its affinity, capped by the cgroup's quota) and memory (what is
available, capped by the cgroup's limit). Torch-free: the host-aware limits (engine/run/hostfit.py) read it
before anything is launched, and the lower bound (engine/calibrate/bound.py) divides CPU-seconds by usable_cpus.

    usable_cpus()        # 1.5 in a container given one and a half CPUs
    usable_cores()       # 2: whole cores, one process each
    available_memory()   # bytes a new run may still take
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import psutil

__all__ = ["available_memory", "usable_cores", "usable_cpus"]

_CGROUP = Path("/sys/fs/cgroup")


def usable_cpus() -> float:
    """CPUs this process may use: its CPU affinity, capped by the cgroup's CPU quota (a container's share, which
    may be fractional: 1.5). The lower bound divides CPU-seconds by it (engine/calibrate/bound.py)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (psutil.cpu_count() or 1)
    quota = _cgroup_cpus()
    return max(0.01, min(float(cores), quota)) if quota else float(cores)


def usable_cores() -> int:
    """Whole cores this process may run on (usable_cpus, a fraction rounded up): one process per core fits."""
    return max(1, math.ceil(usable_cpus()))


def _cgroup_cpus() -> float | None:
    """cgroup v2 cpu.max ("200000 100000": 2 cores; "max ...": none), else v1's cfs quota and period."""
    for quota_file, period_file in (
        (_CGROUP / "cpu.max", None),
        (_CGROUP / "cpu" / "cpu.cfs_quota_us", _CGROUP / "cpu" / "cpu.cfs_period_us"),
    ):
        try:
            parts = quota_file.read_text().split()
            if period_file is not None:
                parts.append(period_file.read_text().strip())
            quota, period = parts[0], parts[1]
            if quota in ("max", "-1"):
                return None
            return int(quota) / int(period)
        except (OSError, ValueError, IndexError, ZeroDivisionError):
            continue
    return None


def available_memory() -> int:
    """Bytes a new run may still take: the host's available memory, or less where the cgroup's limit is lower."""
    available = psutil.virtual_memory().available
    for limit_file, usage_file in (
        (_CGROUP / "memory.max", _CGROUP / "memory.current"),
        (_CGROUP / "memory" / "memory.limit_in_bytes", _CGROUP / "memory" / "memory.usage_in_bytes"),
    ):
        try:
            limit, usage = int(limit_file.read_text().strip()), int(usage_file.read_text().strip())
        except (OSError, ValueError):  # "max" (no limit), or no such controller
            continue
        available = min(available, max(0, limit - usage))
        break
    return available
