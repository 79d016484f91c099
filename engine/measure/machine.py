"""Which machine a run was on: the facts that change results, and their short hash (no torch: the store reads it).

    machine_id({"cpu_model": ..., "cores": 2, ...})     # '3ca308d5322b', the host fingerprint of every run there

A run's thread settings (THREAD_KEYS) are recorded beside these, as fields of the run, and never hashed in: a run at
1 intra-op thread ran on the same machine as one at torch's default, and the pages compare them as two settings.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["MACHINE_KEYS", "THREAD_KEYS", "machine_id"]

# The facts that change results: the machine and its software. Not the hostname or the commit.
MACHINE_KEYS = ("cpu_model", "cores", "gpu_name", "driver", "cuda_version", "torch_version", "python_version", "os")
# How many cores a run's compute may use: a setting of the run, not a fact of the machine.
THREAD_KEYS = ("intra_op_threads", "inter_op_threads", "omp_num_threads", "mkl_num_threads", "affinity")


def machine_id(facts: dict[str, Any]) -> str | None:
    """The short hash of facts' MACHINE_KEYS; None when a key is missing (a run recorded without them)."""
    if not all(k in facts for k in MACHINE_KEYS):
        return None
    keyed = {k: facts[k] for k in MACHINE_KEYS}
    return hashlib.sha1(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:12]
