"""A script's tune answered (`engine tune -- python train.py`, engine/advice/tune_script.py): one `tunes` row per
tune, its trials being the runs whose sweep_id is the tune's id (config_idx: the candidate, repeat_idx: its trial).

    record_tune(db, row)          # one row, checked field by field, in one transaction
    tune_answers(db)              # newest first; tune_answers(db, "tune-0123456789ab") for one
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

import duckdb

from engine.paths import Db
from engine.store.connect import connect
from engine.store.tables import TUNE_COLUMNS

__all__ = ["TUNE_ID", "record_tune", "tune_answers"]

TUNE_ID = re.compile(r"tune-[0-9a-f]{12}")
_KINDS = ("script",)
# Fields that may be None: nothing to change, nothing finished, no interval, a budget the user did not set.
_NULLABLE = {
    "budget_s",
    "spent_s",
    "stop_reason",
    "best_config_idx",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "difference",
}


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _json_list(name: str, value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            return value
    raise ValueError(f"tune field '{name}' must be a JSON list (text or list), not {value!r:.80}")


def _checked(row: dict[str, Any]) -> dict[str, Any]:
    """The row as stored, or ValueError naming the first field that is unknown, missing or of the wrong kind."""
    if not isinstance(row, dict):
        raise ValueError(f"a tune row must be a dict, not {type(row).__name__}")
    for name in row:
        if name not in TUNE_COLUMNS:
            raise ValueError(f"tune field '{name}' is unknown; the fields are {', '.join(TUNE_COLUMNS)}")
    out: dict[str, Any] = {}
    for name, sql_type in TUNE_COLUMNS.items():
        if name not in row:
            if name == "created_at":  # the moment it is stored, where the caller did not say
                out[name] = _now()
                continue
            raise ValueError(f"tune field '{name}' is missing")
        value = row[name]
        if value is None:
            if name not in _NULLABLE:
                raise ValueError(f"tune field '{name}' must not be None")
            out[name] = None
            continue
        if name == "tune_id" and not (isinstance(value, str) and TUNE_ID.fullmatch(value)):
            raise ValueError(f"tune field 'tune_id' must read 'tune-' and 12 hex characters, not {value!r:.40}")
        if name == "kind" and value not in _KINDS:
            raise ValueError(f"tune field 'kind' must be one of {', '.join(_KINDS)}, not {value!r:.40}")
        if name in ("command", "settings_json"):
            value = _json_list(name, value)
        elif name == "created_at":
            if not isinstance(value, datetime):
                raise ValueError(f"tune field 'created_at' must be a datetime, not {type(value).__name__}")
            if value.tzinfo is not None:  # the store keeps UTC without a zone, as runs.created_at
                value = value.astimezone(timezone.utc).replace(tzinfo=None)
        elif sql_type == "DOUBLE":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ValueError(f"tune field '{name}' must be a number or None, not {value!r:.40}")
            value = float(value)
        elif sql_type == "INTEGER":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"tune field '{name}' must be a config index (an int >= 0) or None, not {value!r:.40}")
        elif not isinstance(value, str):
            raise ValueError(f"tune field '{name}' must be text, not {type(value).__name__}")
        out[name] = value
    return out


def record_tune(db: Db, row: dict[str, Any]) -> None:
    """Store one tune's answer (a second call with the same tune_id replaces it). ValueError naming the field for a
    row that is not the table's; nothing is stored then, and nothing half-stored if the write fails."""
    checked = _checked(row)
    names = list(TUNE_COLUMNS)
    cols = ", ".join(f'"{n}"' for n in names)
    with connect(db, read_only=False) as conn:
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(
                f"INSERT OR REPLACE INTO tunes ({cols}) VALUES ({', '.join('?' * len(names))})",
                [checked[n] for n in names],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def tune_answers(db: Db = None, tune_id: str | None = None) -> list[dict[str, Any]]:
    """Stored tunes as dicts, newest first ([] when none, or for a store older than the table read without
    upgrading it); with tune_id, that tune alone."""
    sql = "SELECT * FROM tunes" + (" WHERE tune_id = ?" if tune_id is not None else "")
    with connect(db, read_only=True) as conn:
        try:
            cur = conn.execute(sql + " ORDER BY created_at DESC, tune_id DESC", [tune_id] if tune_id else [])
        except duckdb.CatalogException:
            return []
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
