"""Predict before you run: how long a steady epoch of a loader setting takes on this machine, and what limits it.

    model.py         the capacity model: a setting and a probe -> a predicted epoch and its limit (no torch)
    probe.py         what a batch, a step and the GIL cost on this machine, apart from any loader setting
    _probe_child.py  the probe in a child process (tune's, before its warm parent starts)
    forecast.py      a run's predicted epoch (prior: from a cached probe; own: from the run's) and predict's table
    learned.py       what earlier stored runs of a pipeline say: the residuals that adjust a prediction
    records.py       the probe and a prediction's fields, typed (Probe, PredictionFields)

It sits above the modes (the probe replays a mode's step) and below the run, which stores each prediction beside
its measured epoch. This face exports the model alone, so that importing it loads no torch: the CLI's parent, the
notebook API and the dashboard read it; the probe and the forecast are imported where torch is. It reads no store:
learned.py is handed the stored runs by its caller (engine.store.recent_done_runs).
"""

from engine.predict.model import (
    GIL_LIMIT,
    LOADER_SHAPES,
    MODES,
    LoaderShape,
    Prediction,
    adjusted,
    apart,
    load_probe,
    pool_use,
    predict,
    probe_path,
    rank,
    residuals,
    save_probe,
)
from engine.predict.records import ComputeAt, PredictionFields, Probe

__all__ = [
    "GIL_LIMIT",
    "LOADER_SHAPES",
    "MODES",
    "ComputeAt",
    "LoaderShape",
    "Prediction",
    "PredictionFields",
    "Probe",
    "adjusted",
    "apart",
    "load_probe",
    "pool_use",
    "predict",
    "probe_path",
    "rank",
    "residuals",
    "save_probe",
]
