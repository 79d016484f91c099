"""Where things live: the store file, RunLogs, generated datasets. One place so every command agrees.

The store is `--db PATH`, else `$LOADERLAB_DB`, else `data/loaderlab.duckdb`. RunLogs and the job
queue sit beside the store (`<store dir>/runs`, `<store dir>/jobs`) so a temporary store in a test
gets temporary RunLogs too. Datasets are shared: `$LOADERLAB_DATA/datasets`, default `data/datasets`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["DATA_DIR", "datasets_dir", "db_path", "jobs_dir", "runs_dir"]

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "data"


def db_path(db: str | os.PathLike | None = None) -> Path:
    path = os.fspath(db or os.environ.get("LOADERLAB_DB") or DATA_DIR / "loaderlab.duckdb")
    return _resolved(path, "" if os.path.isabs(path) else os.getcwd())


@functools.lru_cache(maxsize=256)
def _resolved(path: str, cwd: str) -> Path:
    # NOTE: cached: Path.resolve() stats every component, and a dashboard view asks for the store's path a
    # dozen times (an eighth of the server's CPU with 20 viewers); keyed on the cwd a relative path depends on
    return Path(path).resolve()


def runs_dir(db: str | os.PathLike | None = None) -> Path:
    return db_path(db).parent / "runs"


def jobs_dir(db: str | os.PathLike | None = None) -> Path:
    return db_path(db).parent / "jobs"


def datasets_dir() -> Path:
    return Path(os.environ.get("LOADERLAB_DATA") or DATA_DIR) / "datasets"
