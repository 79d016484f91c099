"""Registries: plain dicts from name to factory, filled by explicit imports.

    WORKLOADS[name](cfg)                       -> torch Dataset (see engine/workloads/_base.py)
    LOADERS[name](dataset, cfg, device)        -> Loader       (see engine/loaders/_base.py)
    MODELS[name](in_shape, num_classes, width, depth) -> nn.Module
    MODES[name]                                -> ModeSpec(run, check)  (see engine/modes/_base.py)

The CLI's choices, the launch form's select boxes and config validation all read these dicts.
A config's workload or model may instead be the user's own, "module.path:callable": runs build both
through engine.plugins.build_dataset / build_model, which fall back to these dicts for built-in names.
"""

from __future__ import annotations

from typing import Any

from engine.loaders.prefetch import PrefetchLoader
from engine.loaders.processes import ProcessLoader
from engine.loaders.sync import SyncLoader
from engine.loaders.threads import ThreadLoader
from engine.models.cnn import CNN
from engine.models.mlp import MLP
from engine.models.transformer import Transformer
from engine.measure import trace
from engine.modes import MODE_SPECS
from engine.workloads.folder import FolderWorkload
from engine.workloads.jpeg import JpegWorkload
from engine.workloads.pyloop import PyloopWorkload
from engine.workloads.tensor import TensorWorkload

__all__ = ["LOADERS", "MODELS", "MODES", "WORKLOADS", "check_config", "names"]


def _registry(kind: str, entries: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, factory in entries:
        if name in out:
            raise RuntimeError(f"duplicate {kind} name '{name}' in the registry")
        out[name] = factory
    return out


WORKLOADS = _registry("workload", [
    ("tensor", TensorWorkload), ("jpeg", JpegWorkload), ("pyloop", PyloopWorkload), ("folder", FolderWorkload),
])
LOADERS = _registry("loader", [
    ("sync", SyncLoader), ("prefetch", PrefetchLoader), ("threads", ThreadLoader), ("processes", ProcessLoader),
])
MODELS = _registry("model", [("mlp", MLP), ("cnn", CNN), ("transformer", Transformer)])
MODES = _registry("mode", list(MODE_SPECS))

_KINDS = {"workloads": WORKLOADS, "loaders": LOADERS, "models": MODELS, "modes": MODES}


def names(kind: str) -> list[str]:
    return list(_KINDS[kind])


def check_config(cfg: Any) -> None:
    """Cross-field checks that belong to one workload or mode (e.g. a folder that must exist)."""
    check = getattr(WORKLOADS.get(cfg.workload), "check", None)  # a plugin spec has none: preflight tries it
    if check is not None:
        check(cfg)
    MODES[cfg.mode].check(cfg)
    trace.check(cfg)  # --trace only in the modes one in-process profiler sees whole
