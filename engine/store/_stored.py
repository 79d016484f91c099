"""What the store already holds of one run, read back inside an ingest's transaction.

Incremental ingest reads only the RunLog's new lines; the run-level summary still needs every epoch,
its steps' waits and the run's samples, so those come from the store rather than from re-reading the file.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pyarrow as pa

from engine.store._events import SAMPLE_FIELDS

__all__ = ["previous", "prior_events", "stored_epochs", "stored_samples", "stored_waits"]


def previous(conn: duckdb.DuckDBPyConnection, run_dir: str) -> dict[str, Any] | None:
    """The runs row of this RunLog folder as stored: run_id, ingested_bytes, status, error, ended_at, summary_json."""
    cur = conn.execute(
        "SELECT run_id, ingested_bytes, status, error, ended_at, summary_json FROM runs WHERE run_dir = ? LIMIT 1",
        [run_dir],
    )
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
    """Every epoch of the run, shaped as ev.unique_epochs returns them but without their steps: the summary
    needs of the steps only their waits, which stored_waits() reads in SQL."""
    epochs = (
        conn.sql(
            "SELECT * EXCLUDE (run_id) FROM epochs WHERE run_id = ? ORDER BY model_idx, rank, epoch", params=[run_id]
        )
        .to_arrow_table()
        .to_pylist()
    )
    for e in epochs:
        e["warmup"] = bool(e.get("warmup"))
        e["steps"] = []
    return epochs


def stored_waits(conn: duckdb.DuckDBPyConnection, run_id: str) -> list[float]:
    """The sorted data waits of the run's steady steps, each epoch's first step left out (engine/measure/waits.py).

    NOTE: in DuckDB, not Python: a long run's summary needs every step on each ingest, and reading a million
    of them back as Python rows would make each incremental ingest cost nearly a whole one."""
    rows = conn.sql(
        "SELECT s.data_wait_s FROM steps s JOIN epochs e USING (run_id, model_idx, rank, epoch) "
        "WHERE s.run_id = ? AND NOT e.warmup AND s.step <> 0 AND isfinite(s.data_wait_s) "
        "ORDER BY 1",
        params=[run_id],
    ).fetchnumpy()
    return rows["data_wait_s"].tolist()


def stored_samples(conn: duckdb.DuckDBPyConnection, run_id: str) -> pa.Table:
    return conn.sql(
        f"SELECT run_id, {', '.join(SAMPLE_FIELDS)} FROM samples WHERE run_id = ? ORDER BY t", params=[run_id]
    ).to_arrow_table()
