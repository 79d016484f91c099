"""LoaderLab engine: workloads, loaders, modes, measurement, the DuckDB store and the CLI. Never imports streamlit.

`from engine import watch` is the one name at the package's face (engine/observe/): looked up on first use, so
that importing engine stays light (no torch, no store) for the CLI and the dashboard.
"""

import importlib
from typing import Any

__all__ = ["watch"]


def __getattr__(name: str) -> Any:
    if name == "watch":
        return importlib.import_module("engine.observe").watch
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
