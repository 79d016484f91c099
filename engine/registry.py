"""Registries: plain dicts from name to factory, each filled by explicit imports in its own package.

    WORKLOADS[name](cfg)                       -> torch Dataset (engine/workloads/__init__.py)
    LOADERS[name](dataset, device, **knobs)    -> Loader       (engine/loaders/__init__.py; a run's: open_loader)
    MODELS[name](in_shape, num_classes, width, depth) -> nn.Module (engine/models/__init__.py)
    MODES[name]                                -> ModeSpec(run, check, bound) (engine/modes/__init__.py)
    check(cfg)                                 -> ConfigError unless this machine can run cfg

The names alone are static tuples in engine/names.py: the CLI's choices, the launch form's select boxes and the
schema read them there, without torch. A config's workload or model may instead be the user's own,
"module.path:callable": runs build both through engine.workloads.build_dataset and engine.models.build_model,
which fall back to these dicts for built-in names.

Why nothing here reaches back to engine.config: the schema checks what it can alone (types, limits, names) and
imports nothing heavy; the checks that need the machine (the device, --trace, each workload's and mode's rules)
are `check` here, which the launchers call beside their other checks: the run child before its RunLog starts,
jobs' submit, the dashboard's form (engine.api.check_host) and `run --dry-run`. The run side (loaders, models,
modes, workloads, measure) imports the schema for annotations only and gets configs as objects, so no chain of
imports leads from one to the other and back (tests/engine/test_architecture.py checks the whole graph).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from engine import devices
from engine.errors import ConfigError
from engine.loaders import LOADERS
from engine.measure import trace
from engine.models import MODELS
from engine.modes import MODES
from engine.workloads import WORKLOADS

__all__ = ["LOADERS", "MODELS", "MODES", "WORKLOADS", "check", "check_each", "names"]

_KINDS: dict[str, Mapping[str, Any]] = {"workloads": WORKLOADS, "loaders": LOADERS, "models": MODELS, "modes": MODES}


def names(kind: str) -> list[str]:
    return list(_KINDS[kind])


def check(cfg: Any) -> None:
    """The checks the schema leaves to the machine and the registry: the device exists here, and the rules that
    belong to one workload (e.g. a folder that must exist) or one mode. A sweep's config names its grid point.

    NOTE: --trace first: a mode the profiler cannot see refuses it on every machine, so that error is the one
    a user meets, the same on a laptop and on a GPU box; the device and the mode's rules may depend on the host
    (no CUDA here, one GPU for ddp's two ranks there) and would otherwise hide it on one kind of machine only."""
    try:
        trace.check(cfg)  # --trace only in the modes one in-process profiler sees whole
        devices.check_device("device", cfg.device)
        workload_check = getattr(WORKLOADS.get(cfg.workload), "check", None)  # a plugin has none: preflight tries it
        if workload_check is not None:
            workload_check(cfg)
        MODES[cfg.mode].check(cfg)
    except ConfigError as e:
        raise cfg.refused(e) from None


def check_each(configs: Iterable[Any]) -> None:
    """`check` on every config of a sweep, before any of them runs: the first refused stops them all."""
    for cfg in configs:
        check(cfg)
