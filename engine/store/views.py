"""Share links and saved SQL: a chart's state stored under a short id, and named queries for the History page.

    view_id = save_view({"x": "workers", "color": "loader", "filters": {...}})   # -> e.g. "q3Zk9a_B"
    state = load_view(view_id)                                                  # the same dict
    list_saved_queries(); save_query("mine", "SELECT ...")                      # built-ins first

Ids are content-addressed (the same state gives the same link) and URL-safe. The built-in queries are
engine.store.tables.BUILTIN_QUERIES; their names cannot be taken by a user's query.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from engine.paths import Db, db_path
from engine.store.connect import connect
from engine.store.tables import BUILTIN_QUERIES

__all__ = ["delete_saved_query", "list_saved_queries", "load_view", "save_query", "save_view"]

VIEW_ID = re.compile(r"^[A-Za-z0-9_-]{4,32}$")
_MAX_STATE = 64_000


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _one(rows: list[tuple]) -> tuple | None:
    return rows[0] if rows else None


def save_view(state: dict[str, Any], db: Db = None) -> str:
    """Store a chart/page state (plain JSON data) and return its 8-character id."""
    if not isinstance(state, dict):
        raise ValueError(f"a view state must be a dict of plain JSON data, got {type(state).__name__}")
    try:
        text = json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"a view state must be plain JSON data (str, number, bool, list, dict): {e}") from None
    if len(text) > _MAX_STATE:
        raise ValueError(f"the view state is {len(text)} characters; at most {_MAX_STATE} can be shared")
    view_id = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()[:6]).decode()
    with connect(db, read_only=False) as conn:
        existing = _one(conn.execute("SELECT state_json FROM views WHERE view_id = ?", [view_id]).fetchall())
        if existing is not None and existing[0] != text:  # a 48-bit collision: practically never
            view_id = base64.urlsafe_b64encode(secrets.token_bytes(6)).decode()
            existing = None
        if existing is None:
            conn.execute("INSERT INTO views VALUES (?, ?, ?)", [view_id, _now(), text])
    return view_id


def load_view(view_id: str, db: Db = None) -> dict[str, Any]:
    """The state saved under view_id. ValueError for a malformed or unknown id."""
    if not isinstance(view_id, str) or not VIEW_ID.match(view_id):
        raise ValueError(
            f"view id {str(view_id)[:40]!r} is malformed: an id is 4-32 letters, digits, '-' or '_'; "
            "copy the whole link"
        )
    with connect(db, read_only=True) as conn:
        row = _one(conn.execute("SELECT state_json FROM views WHERE view_id = ?", [view_id]).fetchall())
    if row is None:
        raise ValueError(
            f"view '{view_id}' is not in the store {db_path(db)}; the link may come from another machine's store"
        )
    return json.loads(row[0])


def list_saved_queries(db: Db = None) -> pd.DataFrame:
    """name, sql, builtin: the built-in queries, then the user's, by name."""
    with connect(db, read_only=True) as conn:
        stored = conn.execute("SELECT name, sql, builtin FROM saved_queries ORDER BY builtin DESC, name").fetchdf()
    ours = pd.DataFrame({"name": list(BUILTIN_QUERIES), "sql": list(BUILTIN_QUERIES.values()), "builtin": True})
    out = pd.concat([ours, stored], ignore_index=True).drop_duplicates("name")
    return out.sort_values(["builtin", "name"], ascending=[False, True], ignore_index=True)


def save_query(name: str, sql: str, db: Db = None) -> None:
    """Save (or replace) a named query. A built-in query's name cannot be taken."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValueError("a saved query needs a name of 1 to 100 characters")
    if not (sql or "").strip():
        raise ValueError(f"saved query '{name}' has no SQL")
    if name in BUILTIN_QUERIES:
        raise ValueError(f"'{name}' is a built-in query; save yours under another name")
    with connect(db, read_only=False) as conn:
        row = _one(conn.execute("SELECT builtin FROM saved_queries WHERE name = ?", [name]).fetchall())
        if row is not None and row[0]:  # a built-in an older LoaderLab stored
            raise ValueError(f"'{name}' is a built-in query; save yours under another name")
        conn.execute("INSERT OR REPLACE INTO saved_queries VALUES (?, ?, false, ?)", [name, sql, _now()])


def delete_saved_query(name: str, db: Db = None) -> bool:
    """Delete a user query; built-ins stay. Returns whether one was deleted."""
    with connect(db, read_only=False) as conn:
        n = conn.execute("DELETE FROM saved_queries WHERE name = ? AND NOT builtin RETURNING name", [name]).fetchall()
    return bool(n)
