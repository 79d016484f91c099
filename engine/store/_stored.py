"""What the store already holds of one run, read back inside an ingest's transaction.

Incremental ingest reads only the RunLog's new lines; the run-level summary still needs every epoch,
its steps and the run's samples, so those come from the store rather than from re-reading the file.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from engine.runlog import STEP_FIELDS
from engine.store._events import SAMPLE_FIELDS

__all__ = ["previous", "prior_events", "stored_epochs", "stored_samples"]

_KEYS = ("model_idx", "rank", "epoch")


def previous(conn: duckdb.DuckDBPyConnection, run_dir: str) -> dict[str, Any] | None:
    """The runs row of this RunLog folder as stored: run_id, ingested_bytes, status, error, ended_at, summary_json."""
    cur = conn.execute("SELECT run_id, ingested_bytes, status, error, ended_at, summary_json FROM runs "
                       "WHERE run_dir = ? LIMIT 1", [run_dir])
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row)) if row else None


def prior_events(prev: dict[str, Any]) -> list[dict[str, Any]]:
    """Events standing in for the lines already ingested: their merged `summary`. (How the run ended is kept
    from the stored row by ingest itself, as for a full re-read.)"""
    out: list[dict[str, Any]] = []
    if prev.get("summary_json"):
        summary = json.loads(prev["summary_json"])
        out.append({**(summary if isinstance(summary, dict) else {}), "type": "summary"})
    return out


def stored_epochs(conn: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """Every epoch of the run, shaped as ev.unique_epochs returns them, each with its `steps` rows.

    Step values come back as floats (NULL as NaN, which the summary drops as it drops a malformed value).
    """
    epochs = conn.sql("SELECT * EXCLUDE (run_id) FROM epochs WHERE run_id = ? ORDER BY model_idx, rank, epoch",
                      params=[run_id]).to_arrow_table().to_pylist()
    cols = ", ".join(_KEYS + STEP_FIELDS)
    steps = conn.sql(f"SELECT {cols} FROM steps WHERE run_id = ? ORDER BY model_idx, rank, epoch, step",
                     params=[run_id]).to_arrow_table()
    by_key: dict[tuple, list] = {}
    if steps.num_rows:
        # NOTE: numpy, not a Python loop: a long run's summary reads a million steps back on each ingest
        keys = np.column_stack([steps.column(k).to_numpy() for k in _KEYS])
        values = np.column_stack([steps.column(f).to_numpy(zero_copy_only=False).astype(float)
                                  for f in STEP_FIELDS]).tolist()
        bounds = [0, *(np.flatnonzero((keys[1:] != keys[:-1]).any(axis=1)) + 1).tolist(), len(values)]
        for lo, hi in zip(bounds, bounds[1:]):
            by_key[tuple(keys[lo].tolist())] = values[lo:hi]
    for e in epochs:
        e["warmup"] = bool(e.get("warmup"))
        e["steps"] = by_key.get(tuple(e[k] for k in _KEYS), [])
    return epochs


def stored_samples(conn: duckdb.DuckDBPyConnection, run_id: str) -> pa.Table:
    return conn.sql(f"SELECT run_id, {', '.join(SAMPLE_FIELDS)} FROM samples WHERE run_id = ? ORDER BY t",
                    params=[run_id]).to_arrow_table()

