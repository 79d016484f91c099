"""Cached store reads for the pages. Each cache key carries a token of the store file (path, size,
mtime of the file and its WAL), so any write invalidates every cached read without a timer.

    df = cached("explore_summary", "loader", metric="epoch_s")   # api.explore_summary(...), cached
"""

from __future__ import annotations

import json
import os
from typing import Any

import streamlit as st

from engine import api
from engine.paths import db_path

__all__ = ["cached", "clear", "store_token"]


def store_token() -> str:
    """Changes whenever the store is written (DuckDB appends to the WAL, then checkpoints the file)."""
    path = db_path()
    parts = [str(path)]
    for p in (path, path.with_name(path.name + ".wal")):
        try:
            s = os.stat(p)
            parts.append(f"{s.st_size}:{s.st_mtime_ns}")
        except FileNotFoundError:
            parts.append("-")
    return "|".join(parts)


@st.cache_data(max_entries=256, show_spinner=False)
def _call(token: str, name: str, args_json: str) -> Any:
    args, kwargs = json.loads(args_json)
    return getattr(api, name)(*args, **kwargs)


def cached(name: str, *args: Any, **kwargs: Any) -> Any:
    """`api.<name>(*args, **kwargs)`, cached until the store changes. Arguments must be JSON-able."""
    return _call(store_token(), name, json.dumps([args, kwargs], sort_keys=True, default=str))


def clear() -> None:
    """Forget every cached read (after this session wrote to the store)."""
    _call.clear()
