"""What earlier runs of a pipeline say about the predictor: every `done` run of the same pipeline on this host,
in the single mode, is a measured point (its setting and its median steady epoch). engine/predict/model.py's
`residuals` turns them into measured / predicted per limit, and `adjusted` scales a later prediction by them
(predicted_from 'prior+runs').

    runs = store.recent_done_runs(MODES, db)             # the caller reads the store: it sits above predict/
    points = earlier_runs(cfg, runs, machine)            # [(RunConfig, epoch_s)], newest first
    ranked = predict.rank(configs, probe, found=predict.residuals(points, probe))
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pandas as pd

from engine.config import RunConfig
from engine.errors import ConfigError
from engine.predict.model import residuals
from engine.predict.records import Probe

__all__ = ["PIPELINE_KEYS", "earlier_runs", "learned_residuals", "same_pipeline"]

log = logging.getLogger(__name__)

# what makes two runs the same pipeline (the probe's keys, engine/predict/probe.py, but the batch size: a
# residual is per sample, and the model scales it)
PIPELINE_KEYS = (
    "workload",
    "n_samples",
    "image_size",
    "num_classes",
    "work_us",
    "latency_ms",
    "folder",
    "seed",
    "model",
    "width",
    "depth",
    "optimizer",
    "lr",
    "collate",
    "loss",
)


def same_pipeline(a: RunConfig, b: RunConfig) -> bool:
    """The pipeline keys agree as they take effect; num_classes 0 (auto) agrees with the count it resolved to."""
    return _agree(a.effective(), b.effective())


def _agree(ea: dict[str, Any], eb: dict[str, Any]) -> bool:
    return all(ea.get(k) == eb.get(k) or (k == "num_classes" and not (ea.get(k) and eb.get(k))) for k in PIPELINE_KEYS)


def earlier_runs(
    cfg: RunConfig, runs: pd.DataFrame, machine: str, device: str = "cpu"
) -> list[tuple[RunConfig, float]]:
    """(setting, median steady epoch) of every run in `runs` (stored done runs of the modes the model covers,
    newest first: engine.store.recent_done_runs) of cfg's pipeline on `machine` (the host's `machine`
    fingerprint, engine/measure/host.py) and a device of type `device`, newest first."""
    out: list[tuple[RunConfig, float]] = []
    mine = cfg.effective()  # once, not once per stored run
    for _, row in runs.iterrows():
        run = _config(row)
        if (
            run is None
            or not _agree(run.effective(), mine)
            or _machine(row) != machine
            or str(run.device).split(":")[0] != device
        ):
            continue
        if row.get("epoch_s") is not None and row["epoch_s"] == row["epoch_s"] and row["epoch_s"] > 0:
            out.append((run, float(row["epoch_s"])))
    return out


def _config(row: Any) -> RunConfig | None:
    try:
        return RunConfig.from_dict(json.loads(row["config_json"]))
    except (ConfigError, TypeError, ValueError):  # a run of an older layout: not a point
        return None


def _machine(row: Any) -> str | None:
    try:
        return json.loads(row["host_json"]).get("machine")
    except (TypeError, ValueError, AttributeError):
        return None


def learned_residuals(cfg: RunConfig, runs: pd.DataFrame, probe: Probe) -> tuple[dict[str, list[float]], int]:
    """The residuals (engine/predict/model.py's `residuals`) of cfg's pipeline's earlier runs (in `runs`, as
    earlier_runs reads them) on the probe's host under `probe`, and how many runs they come from; nothing where
    there are none, or the probe does not say its host (an older probe)."""
    machine = probe.get("machine")
    if not machine:
        return {}, 0
    points = earlier_runs(cfg, runs, machine, device=probe["device"])
    return residuals(points, probe), len(points)
