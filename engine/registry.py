"""Registries: plain dicts from name to factory, each filled by explicit imports in its own package.

    WORKLOADS[name](cfg)                       -> torch Dataset (engine/workloads/__init__.py)
    LOADERS[name](dataset, cfg, device)        -> Loader       (engine/loaders/__init__.py)
    MODELS[name](in_shape, num_classes, width, depth) -> nn.Module (engine/models/__init__.py)
    MODES[name]                                -> ModeSpec(run, check, bound) (engine/modes/__init__.py)

The CLI's choices, the launch form's select boxes and config validation all read these dicts, through
`names` and `check_config` here. A config's workload or model may instead be the user's own,
"module.path:callable": runs build both through engine.workloads.build_dataset and
engine.models.build_model, which fall back to these dicts for built-in names.

Why the run side does not import engine.config: validating a config needs this registry (its names, the
device, each mode's rules), so engine/config.py imports this module when it validates, inside a function
so that the dashboard stays free of torch. Everything this module imports (loaders, models, modes,
workloads, measure) therefore imports the config schema for annotations only (`if TYPE_CHECKING:`) and gets
configs as objects, so no chain of imports, at module level or inside functions, leads back to
engine.config (tests/engine/test_architecture.py checks the whole graph).
"""

from __future__ import annotations

from typing import Any

from engine import devices
from engine.loaders import LOADERS
from engine.measure import trace
from engine.models import MODELS
from engine.modes import MODES
from engine.workloads import WORKLOADS

__all__ = ["LOADERS", "MODELS", "MODES", "WORKLOADS", "check_config", "names"]

_KINDS = {"workloads": WORKLOADS, "loaders": LOADERS, "models": MODELS, "modes": MODES}


def names(kind: str) -> list[str]:
    return list(_KINDS[kind])


def check_config(cfg: Any) -> None:
    """The checks config validation leaves to the machine and the registry: the device exists here, and the
    rules that belong to one workload (e.g. a folder that must exist) or one mode.

    NOTE: --trace first: a mode the profiler cannot see refuses it on every machine, so that error is the one
    a user meets, the same on a laptop and on a GPU box; the device and the mode's rules may depend on the host
    (no CUDA here, one GPU for ddp's two ranks there) and would otherwise hide it on one kind of machine only."""
    trace.check(cfg)  # --trace only in the modes one in-process profiler sees whole
    devices.check_device("device", cfg.device)
    check = getattr(WORKLOADS.get(cfg.workload), "check", None)  # a plugin spec has none: preflight tries it
    if check is not None:
        check(cfg)
    MODES[cfg.mode].check(cfg)
