"""Cached store reads for the pages, shared by every session of the server.

Each cache key carries the store's data version (engine.store.version: a sidecar file that ingest and
edits bump), so 20 viewers of one chart cost one query per version, and the job queue's own writes
(status, heartbeats: no result changes) do not throw the charts away. A store never bumped (written by
an older LoaderLab) falls back to the file's stat. `live=True` keys on the stat instead, for reads
that may touch tables the version does not cover (the SQL console can read the job queue).

    df = cached(api.explore_summary, "loader", metric="epoch_s")   # api.explore_summary(...), cached
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import streamlit as st

from engine import api

__all__ = ["cached", "clear", "data_token", "store_token"]

_SAFETY_TTL_S = 300  # NOTE: a writer outside LoaderLab (or an old one) does not bump; it shows within this


def store_token() -> str:
    """Changes whenever the store file is written (DuckDB appends to the WAL, then checkpoints the file)."""
    path = api.db_path()
    parts = [str(path)]
    for p in (path, path.with_name(path.name + ".wal")):
        try:
            s = os.stat(p)
            parts.append(f"{s.st_size}:{s.st_mtime_ns}")
        except FileNotFoundError:
            parts.append("-")
    return "|".join(parts)


def data_token() -> str:
    """Changes whenever results change (ingest, edits, imports bump the version)."""
    v = api.data_version()
    return f"{api.db_path()}|v{v}" if v else store_token()


@st.cache_data(max_entries=256, show_spinner=False, ttl=_SAFETY_TTL_S)
def _call(token: str, name: str, args_json: str, _fn: Callable[..., Any]) -> Any:
    # NOTE: `_fn` is not hashed (st.cache_data skips a leading underscore): `name` keys the function
    args, kwargs = json.loads(args_json)
    return _fn(*args, **kwargs)


def cached(fn: Callable[..., Any], *args: Any, live: bool = False, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` (an engine.api function), cached until the results change (`live`: until any write).
    Arguments must be JSON-able."""
    token = store_token() if live else data_token()
    name = f"{fn.__module__}.{fn.__qualname__}"
    return _call(token, name, json.dumps([args, kwargs], sort_keys=True, default=str), fn)


def clear() -> None:
    """After this session wrote to the store: a new version, so every session's cached reads refresh."""
    api.bump_data_version()
    _call.clear()
