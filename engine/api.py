"""The surface the dashboard pages and the CLI use: one import, `from engine import api`.

Names resolve lazily from the engine modules listed below (each module's `__all__`), so importing
the API is cheap for a page and no list of names is typed twice.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = ("engine.store", "engine.jobs", "engine.charts", "engine.stats", "engine.advisor", "engine.config",
            "engine.registry", "engine.presets", "engine.sweep", "engine.runner", "engine._browser",
            "engine.ray_executor")


def __getattr__(name: str) -> Any:
    for module_name in _MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            continue
        if name in getattr(module, "__all__", ()):
            return getattr(module, name)
    raise AttributeError(f"engine.api has no '{name}'")


def __dir__() -> list[str]:
    names: set[str] = set()
    for module_name in _MODULES:
        try:
            names.update(getattr(importlib.import_module(module_name), "__all__", ()))
        except ModuleNotFoundError:
            continue
    return sorted(names)
