"""A run's host facts: the machine it ran on (its fingerprint: engine/measure/machine.py) and its thread settings."""

from __future__ import annotations

import functools
import logging
import os
import platform
import resource
import socket
import subprocess
import sys
from typing import Any

import psutil
import torch

from engine.measure.machine import MACHINE_KEYS, THREAD_KEYS, machine_id
from engine.measure.nvml import gpu_facts
from engine.paths import ROOT

__all__ = ["MACHINE_KEYS", "THREAD_KEYS", "fingerprint", "thread_settings", "tree_cpu_s"]

log = logging.getLogger(__name__)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"gpu_name": None, "gpu_count": 0, "driver": None, "cuda_version": None}
    # NVML first: torch.cuda.get_device_name would give this process (the dashboard, the job worker) a context
    facts = gpu_facts() or {
        "gpu_name": torch.cuda.get_device_name(0),
        "gpu_count": torch.cuda.device_count(),
        "driver": None,
    }
    return {**facts, "cuda_version": torch.version.cuda}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def thread_settings() -> dict[str, Any]:
    """What sets how many cores a run's compute uses: torch's thread pools, the OpenMP/MKL variables, affinity."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "mkl_num_threads": os.environ.get("MKL_NUM_THREADS"),
        "affinity": len(cpus) or None,
        "affinity_cpus": _ranges(cpus),
    }


def tree_cpu_s() -> float:
    """CPU-seconds (user + system) of this process, its live descendants and the children it has reaped.

    NOTE: a loader's worker processes may exit (and be reaped) inside the timed stretch: the reaped ones are in
    RUSAGE_CHILDREN, the live ones in psutil; a difference of two readings counts each once.
    """
    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _ranges(cpus: list[int]) -> str | None:
    """[0, 1, 2, 5] -> '0-2,5': the affinity set in one short line."""
    out: list[str] = []
    for c in cpus:
        if out and int(out[-1].split("-")[-1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out) or None


@functools.cache
def fingerprint() -> dict[str, Any]:
    """Host facts, the thread settings beside them, and `fingerprint` (= `machine`): the short hash of the machine's
    facts that change results (MACHINE_KEYS: not the hostname, the commit or the thread settings)."""
    facts = {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        **_gpu(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "git_commit": _git_commit(),
        **thread_settings(),
        "executable": sys.executable,
    }
    # NOTE: the thread settings are recorded (the runner sets its threads before calling this, cached per process)
    # but never hashed in: one machine is one host, and a run's threads are one of its settings (the `threads`
    # field), which the pages rank and show as such.
    facts["fingerprint"] = facts["machine"] = machine_id(facts)
    return facts
