"""The DuckDB results store: one connect() for every open, schema and migrations, RunLog ingest,
queries for the dashboard and the CLI, share links, and the SQL sandbox.

    from engine import store
    store.ingest_pending()                     # RunLogs -> DuckDB, cheap to call often
    df = store.list_runs(filters={"status": "done"})
    store.run_query("SELECT loader, median(epoch_s) FROM runs GROUP BY ALL").df
"""

from engine.store.connect import DEFAULT_TIMEOUT_S, connect
from engine.store.edits import export, purge, restore, set_notes, set_tags, soft_delete
from engine.errors import StoreBusy, StoreCorrupt, StoreError, StoreHeld, StoreVersionError
from engine.store.ingest import ingest_pending, ingest_run
from engine.store.pending import pending_summary
from engine.store.queries import epoch_time_by, get_epochs, get_run, get_steps, list_runs, table_schema
from engine.store.sandbox import QueryRejected, QueryResult, check_query, run_query
from engine.store.schema import SCHEMA_VERSION, ensure_schema
from engine.store.views import load_view, save_query, save_view, saved_queries

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "QueryRejected",
    "QueryResult",
    "SCHEMA_VERSION",
    "StoreBusy",
    "StoreCorrupt",
    "StoreError",
    "StoreHeld",
    "StoreVersionError",
    "check_query",
    "connect",
    "ensure_schema",
    "epoch_time_by",
    "export",
    "get_epochs",
    "get_run",
    "get_steps",
    "ingest_pending",
    "ingest_run",
    "list_runs",
    "load_view",
    "pending_summary",
    "purge",
    "restore",
    "run_query",
    "save_query",
    "save_view",
    "saved_queries",
    "set_notes",
    "set_tags",
    "soft_delete",
    "table_schema",
]
