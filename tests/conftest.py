"""Shared fixtures: every test gets its own store and data folder, never the repo's data/."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYTHONPATH", str(ROOT))


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    """A fresh store path (RunLogs land beside it) set as LOADERLAB_DB for this test."""
    db = tmp_path / "store" / "loaderlab.duckdb"
    db.parent.mkdir()
    monkeypatch.setenv("LOADERLAB_DB", str(db))
    return db


@pytest.fixture(autouse=True)
def _data_dir(tmp_path_factory, monkeypatch) -> None:
    # generated datasets are shared across the session (the JPEG set takes seconds to make)
    monkeypatch.setenv("LOADERLAB_DATA", str(tmp_path_factory.getbasetemp() / "data"))
