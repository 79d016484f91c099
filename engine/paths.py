"""Where things live: the store file, RunLogs, generated datasets. One place so every command agrees.

The store is `--db PATH`, else `$LOADERLAB_DB`, else `data/loaderlab.duckdb`; every function that takes
one types it `db: Db`. RunLogs and the job queue sit beside the store (`<store dir>/runs`, `<store dir>/jobs`)
so a temporary store in a test gets temporary RunLogs too. Datasets are shared: `$LOADERLAB_DATA/datasets`,
default `data/datasets`. A run's profiler trace (`--trace`) is `<run_dir>/trace.json.gz`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = [
    "DATA_DIR",
    "Db",
    "ROOT",
    "TRACE_FILE",
    "calibrations_dir",
    "datasets_dir",
    "db_path",
    "jobs_dir",
    "runs_dir",
]

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data"
TRACE_FILE = "trace.json.gz"  # in the run's folder; engine/measure/trace.py writes it

Db = str | os.PathLike | None  # a store path: --db PATH, else $LOADERLAB_DB, else data/loaderlab.duckdb


def db_path(db: Db = None) -> Path:
    path = os.fspath(db or os.environ.get("LOADERLAB_DB") or DATA_DIR / "loaderlab.duckdb")
    return _resolved(path, "" if os.path.isabs(path) else os.getcwd())


@functools.lru_cache(maxsize=256)
def _resolved(path: str, cwd: str) -> Path:
    # NOTE: cached: Path.resolve() stats every component, and a dashboard view asks for the store's path a dozen
    # times (its share of the server's CPU: bench/RESULTS.md, "Load: 20 concurrent dashboard sessions"); keyed on
    # the cwd a relative path depends on
    return Path(path).resolve()


def runs_dir(db: Db = None) -> Path:
    return db_path(db).parent / "runs"


def calibrations_dir(db: Db = None) -> Path:
    """The bound's passes (per sweep) and the predictions' probes (per host), beside the store."""
    return db_path(db).parent / "calibrations"


def jobs_dir(db: Db = None) -> Path:
    return db_path(db).parent / "jobs"


def datasets_dir() -> Path:
    return Path(os.environ.get("LOADERLAB_DATA") or DATA_DIR) / "datasets"
