"""The lower bound of a run's epoch: a loader-only and a compute-only pass, and how each mode combines them.

    bound.py     Calibrator, Phase, Pass, calibrate(): the bound, the efficiency and the verdict of a run
    _passes.py   the two passes (the loader alone in steady state; the step replayed on cached batches)

It sits above the loaders, workloads and models it drives, and below the modes, whose `ModeSpec.bound` says which
passes to take and how they combine.
"""

from engine.calibrate.bound import (
    COMPUTE_KEYS,
    EXPLAINED,
    FAIL_ENV,
    LOADER_KEYS,
    STALE,
    VERDICTS,
    Calibrator,
    Pass,
    Phase,
    calibrate,
    verdict,
)
from engine.calibrate._passes import compute_pass, loader_pass, time_again

__all__ = [
    "COMPUTE_KEYS",
    "EXPLAINED",
    "FAIL_ENV",
    "LOADER_KEYS",
    "STALE",
    "VERDICTS",
    "Calibrator",
    "Pass",
    "Phase",
    "calibrate",
    "compute_pass",
    "loader_pass",
    "time_again",
    "verdict",
]
