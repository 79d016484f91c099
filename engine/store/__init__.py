"""The DuckDB results store, and every SQL statement LoaderLab runs: one connect() for every open, schema and
migrations, RunLog ingest, the reads behind every page and command, share links and saved queries, the job
queue's table, imports from other hosts, and the SQL sandbox. Nothing outside this package runs SQL.

    connect.py   the one way to open the file (sidecar locks, retries, errors that say who holds it); reads_only()
    schema.py    tables (tables.py), versions and migrations
    ingest.py    RunLog -> DuckDB (batched, idempotent, incremental; _events, _runrow, _stored)
    queries.py   runs: list, search, one run, epochs, steps, counts (one filter builder)
    explore.py   the Explore page's grouped medians and intervals (_explore_sql.py)
    views.py     share links and saved queries (the built-in ones are tables.BUILTIN_QUERIES)
    edits.py     tags, notes, delete, restore, purge, export
    merge.py     import another host's store or Parquet bundle, export-bundle
    jobs.py      the job queue's table (engine/jobs/ decides what it means)
    pending.py   RunLogs waiting to be stored, and who holds the store
    sandbox.py   the History page's and `query`'s read-only SQL
    tunes.py     a script's tune answered (`engine tune -- python train.py`): record_tune, tune_answers;
                 tune_trials, tune_ranking (_tune_rank.py)
    version.py   the data version the dashboard's caches are keyed on

    from engine import store
    store.ingest_pending()                     # RunLogs -> DuckDB, cheap to call often
    df = store.list_runs(filters={"status": "done"})
    store.run_query("SELECT loader, median(epoch_s) FROM runs GROUP BY ALL").df
"""

from engine.errors import QueryRejected, StoreBusy, StoreCorrupt, StoreError, StoreHeld, StoreVersionError
from engine.store.connect import DEFAULT_TIMEOUT_S, connect, prepare, reads_only
from engine.store.edits import export, purge, restore, set_notes, set_tags, soft_delete
from engine.store.explore import (
    EXPLORE_FILTERS,
    EXPLORE_METRICS,
    demo_summary,
    explore_axes,
    explore_filter_options,
    explore_predictions,
    explore_ranking,
    explore_summary,
)
from engine.store.ingest import ingest_pending, ingest_run
from engine.store.merge import export_bundle, import_results
from engine.store.pending import pending_summary
from engine.store.queries import (
    RUN_TABLE_COLUMNS,
    count_runs,
    done_runs,
    epoch_time_by,
    get_epochs,
    get_run,
    get_steps,
    list_runs,
    recent_done_runs,
    search_runs,
    table_schema,
)
from engine.store.sandbox import QueryResult, QueryStream, check_query, run_query, stream_query
from engine.store.schema import SCHEMA_VERSION, ensure_schema
from engine.store.tables import BUILTIN_QUERIES
from engine.store.tunes import record_tune, tune_answers
from engine.store._tune_rank import tune_ranking, tune_trials
from engine.store.views import delete_saved_query, list_saved_queries, load_view, save_query, save_view

__all__ = [
    "BUILTIN_QUERIES",
    "DEFAULT_TIMEOUT_S",
    "EXPLORE_FILTERS",
    "EXPLORE_METRICS",
    "QueryRejected",
    "QueryResult",
    "QueryStream",
    "RUN_TABLE_COLUMNS",
    "SCHEMA_VERSION",
    "StoreBusy",
    "StoreCorrupt",
    "StoreError",
    "StoreHeld",
    "StoreVersionError",
    "check_query",
    "connect",
    "count_runs",
    "delete_saved_query",
    "demo_summary",
    "done_runs",
    "ensure_schema",
    "epoch_time_by",
    "explore_axes",
    "explore_filter_options",
    "explore_predictions",
    "explore_ranking",
    "explore_summary",
    "export",
    "export_bundle",
    "get_epochs",
    "get_run",
    "get_steps",
    "import_results",
    "ingest_pending",
    "ingest_run",
    "list_runs",
    "list_saved_queries",
    "load_view",
    "pending_summary",
    "recent_done_runs",
    "prepare",
    "purge",
    "record_tune",
    "reads_only",
    "restore",
    "run_query",
    "save_query",
    "save_view",
    "search_runs",
    "set_notes",
    "set_tags",
    "soft_delete",
    "stream_query",
    "table_schema",
    "tune_answers",
    "tune_ranking",
    "tune_trials",
]
