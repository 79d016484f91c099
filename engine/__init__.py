"""LoaderLab engine: workloads, loaders, modes, measurement, the DuckDB store and the CLI. Never imports streamlit.

`from engine import watch` is the one name at the package's face (engine/observe/): looked up on first use, so
that importing engine stays light (no torch, no store) for the CLI and the dashboard. This face, above the store,
hands the observer the function that stores a run: the observer sits below the store and never imports it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

__all__ = ["watch"]


def _store_run(run_dir: Path, db: Any) -> None:
    from engine.store import ingest_run  # NOTE: here: the store (DuckDB) loads only when a run ends

    ingest_run(run_dir, db=db)


def __getattr__(name: str) -> Any:
    if name == "watch":
        from engine.observe import watch  # NOTE: here: importing engine stays torch-free

        # NOTE: a partial, not a wrapper function: watch() names the run by its caller's frame, one frame up
        return functools.update_wrapper(functools.partial(watch, store_run=_store_run), watch)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
