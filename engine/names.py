"""The registries' names, the rule every registry keeps (a name means one thing), the spelling of a user's own
name, a plugin spec "module.path:callable", and the loaders that need workers, with that rule.

The names are written here as static tuples so that the schema (engine/config.py) can offer and check them
without importing the registries, which import torch. Each package builds its registry with `unique`, and
tests/engine/test_config.py holds every tuple equal to its registry's keys, in order.

    LOADERS = unique("loader", [("sync", SyncLoader), ("threads", ThreadLoader)])   # a plain dict
    NAMES["loaders"]                                                                 # ("sync", "prefetch", ...)
    is_spec("mypkg.data:build")                                                      # True
    check_workers("threads", 0)                                  # ConfigError("workers", "loader 'threads' needs ...")

A leaf module (it imports nothing from the engine but its errors): the schema checks a spec's spelling with neither
torch nor the plugin machinery, which sits above the schema, and the workers rule with neither the loaders nor torch:
the schema (engine/config.py) and the loaders' constructors (engine/loaders/_base.py) both call check_workers.
"""

from __future__ import annotations

import re
from typing import TypeVar

from engine.errors import ConfigError

__all__ = ["DEFAULT_CLASSES", "NAMES", "SPEC_RE", "WORKER_LOADERS", "check_workers", "is_spec", "unique"]

T = TypeVar("T")

# The built-in workloads' label classes when num_classes is auto (0); a user's dataset or model decides its own.
DEFAULT_CLASSES = 10

NAMES: dict[str, tuple[str, ...]] = {
    "workloads": ("tensor", "jpeg", "pyloop", "folder"),  # engine/workloads/__init__.py
    "loaders": ("sync", "prefetch", "threads", "processes", "spdl"),  # engine/loaders/__init__.py
    "models": ("mlp", "cnn", "transformer"),  # engine/models/__init__.py
    "modes": (
        "single",
        "dual-sequential",
        "dual-threads",
        "dual-processes",
        "dual-streams",
        "fused",
        "split",
        "ddp",
    ),  # engine/modes/__init__.py
}


# The loaders that load on `workers` threads or processes: they need one at least (each class's uses_workers reads it)
WORKER_LOADERS: tuple[str, ...] = ("threads", "processes", "spdl")


def check_workers(loader: str, workers: int) -> None:
    """The workers rule, for a config and for a loader built by hand alike: a loader of WORKER_LOADERS needs one."""
    if loader in WORKER_LOADERS and workers < 1:
        raise ConfigError("workers", f"loader '{loader}' needs workers >= 1, got {workers}; set workers to 1 or more")


def unique(kind: str, entries: list[tuple[str, T]]) -> dict[str, T]:
    """A plain dict from name to factory, in the given order; a name given twice raises."""
    out: dict[str, T] = {}
    for name, factory in entries:
        if name in out:
            raise RuntimeError(f"duplicate {kind} name '{name}' in the registry")
        out[name] = factory
    return out


SPEC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")


def is_spec(value: str) -> bool:
    """Whether `value` is spelled as a plugin spec, 'module.path:callable'."""
    return bool(SPEC_RE.match(value))
