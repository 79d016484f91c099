"""The SQL page's sandbox: one read-only query, bounded in time and rows.

    result = run_query("SELECT loader, median(epoch_s) FROM runs GROUP BY loader")
    result.df, result.truncated, result.elapsed_s
    with stream_query("SELECT * FROM steps", max_rows=10**8) as stream:   # large results, a batch at a time
        for df in stream.batches: ...
        stream.truncated

Defense in depth, each layer enough alone for most attacks:
  1. the statement is parsed: exactly one, of type SELECT (DESCRIBE, SHOW, VALUES, WITH, FROM ...), or
     EXPLAIN of one; functions that read files or run other SQL are refused by name;
  2. the store is opened read-only, through connect();
  3. that database instance is opened with external access, extension loading and Python-variable
     scans off (LOCKDOWN), and its configuration is locked, so the query cannot SET them back;
  4. a timer interrupts a query whose first rows, or any later batch, take longer than timeout_s;
  5. rows are fetched in batches and at most max_rows come back; `truncated` says whether there were more;
     at most 4 DuckDB threads run it, so a streamed result's memory does not grow with the host's cores.
Anything refused or failing raises QueryRejected (a ValueError) whose message says what to change.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import duckdb
import pandas as pd

from engine.errors import QueryRejected
from engine.measure import usable_cores
from engine.paths import Db, db_path
from engine.store.connect import _CORRUPT, _classify, connect

__all__ = [
    "LOCKDOWN",
    "QueryRejected",
    "QueryResult",
    "QueryStream",
    "check_query",
    "run_query",
    "sandbox_connection",
    "stream_query",
]

log = logging.getLogger(__name__)

LOCKDOWN: dict[str, object] = {
    "enable_external_access": False,  # no files, no network, no ATTACH, no COPY TO
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,  # (connect() sets it too) a table name must not read a Python variable
    # NOTE: a streamed result's peak memory grows with DuckDB's threads, each scanning ahead; the store's tables
    # are small enough that 4 threads lose nothing, and no more than the cores this process may use (affinity, cgroup quota): os.cpu_count() counts the machine's
    "threads": min(4, usable_cores()),
}  # then run_query sets lock_configuration, so that the query cannot SET any of them back
# Table/scalar functions refused by name: they read files or the network, or run SQL given as text.
_REFUSED = re.compile(
    r"^(read_\w+|\w+_scan|glob|sniff_csv|parquet_\w+|query|query_table|json_execute_serialized_sql|"
    r"checkpoint|force_checkpoint|getenv|duckdb_secrets|which_secret|\w+_attach|iceberg_\w+|"
    r"postgres_\w+|mysql_\w+|sqlite_\w+)$",
    re.I,
)
_EXPLAIN = re.compile(r"^\s*EXPLAIN(\s+ANALY[SZ]E)?\s+", re.I)
_NAME = re.compile(rb'"[^"]*"|[^\s/(-]+')  # a function's name at a token's start, in the UTF-8 text
_MAX_SQL = 100_000
_BATCH_VECTORS = 32  # a batch is 32 DuckDB vectors of 2048 rows: memory stays bounded whatever max_rows is


@dataclass(frozen=True)
class QueryResult:
    df: pd.DataFrame
    truncated: bool
    elapsed_s: float


@dataclass
class QueryStream:
    """A running query's rows, a DataFrame per batch (the first may be empty: it still names the columns).

    `truncated` is known once `batches` is exhausted: there were more than max_rows rows."""

    batches: Iterator[pd.DataFrame]
    truncated: bool = False


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _one_statement(sql: str) -> duckdb.Statement:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryRejected(f"the query does not parse: {_first_line(e)}") from None
    if not statements:
        raise QueryRejected("the query has no statement, only comments; write one SELECT")
    if len(statements) != 1:
        raise QueryRejected(
            f"write exactly one statement; found {len(statements)} (remove the extra ';' and what follows it)"
        )
    return statements[0]


def check_query(sql: str) -> duckdb.Statement:
    """Parse and vet the SQL without running it. Returns the one statement; raises QueryRejected."""
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRejected("the query is empty; write one SELECT statement")
    if len(sql) > _MAX_SQL:
        raise QueryRejected(f"the query is {len(sql)} characters long; at most {_MAX_SQL} are allowed")
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: DuckDB's parser takes UTF-8 only, and would raise TypeError
        raise QueryRejected(
            f"the query holds a character that is not text (position {e.start}); retype that part of it"
        ) from None
    statement = _one_statement(sql)
    kind = statement.type
    if kind == duckdb.StatementType.EXPLAIN:
        explained = _EXPLAIN.sub("", statement.query, count=1)
        if explained == statement.query or _one_statement(explained).type != duckdb.StatementType.SELECT:
            raise QueryRejected("EXPLAIN is allowed only in front of a SELECT query")
    elif kind != duckdb.StatementType.SELECT:
        raise QueryRejected(
            f"only read-only queries can run here (SELECT, WITH, VALUES, DESCRIBE, SHOW, "
            f"SUMMARIZE, EXPLAIN); this statement is of type {kind.name}"
        )
    _check_functions(sql)
    return statement


def _check_functions(sql: str) -> None:
    # NOTE: DuckDB's token offsets count bytes of the UTF-8 text, not characters: names are cut from the bytes,
    # else each wider character before a name (é, 中, 🚀) shifts the cut and can hide the name from this check.
    # Comments are dropped first: `read_text /* x */ (...)` is a call of read_text too.
    raw = sql.encode("utf-8")
    tokens = [t for t in duckdb.tokenize(sql) if t[1] != duckdb.token_type.comment]
    for (start, typ), (nxt, _) in zip(tokens, tokens[1:]):
        if typ not in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            continue
        found = _NAME.match(raw, start)
        name = found.group().strip(b'"').decode("utf-8", "replace") if found else ""
        if raw[nxt : nxt + 1] == b"(" and _REFUSED.match(name):
            raise QueryRejected(
                f"{name}() reads files or runs other SQL, which the SQL page does not allow; "
                "query the store's tables (runs, epochs, steps, samples, ...) instead"
            )


@contextmanager
def sandbox_connection(db: Db = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Layers 2 and 3 alone: a read-only connection with LOCKDOWN applied and the configuration locked."""
    with connect(db, read_only=True, config=LOCKDOWN) as conn:
        # NOTE: locked here, not in LOCKDOWN, so that connect() can still turn the progress bar off first.
        # Another sandbox query of this process may share the instance and have locked it already.
        locked = "SELECT current_setting('lock_configuration')"
        if not conn.execute(locked).fetchall()[0][0]:
            conn.execute("SET lock_configuration = true")
        if not conn.execute(locked).fetchall()[0][0]:
            raise QueryRejected("the SQL sandbox could not lock its settings, so nothing was run; please report this")
        yield conn


class _Budget:
    """The query's time limit, for each engine call: the first rows must come within timeout_s, and so must every
    later batch. A result of any size can stream out (max_rows bounds it), but a query that stalls is stopped."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, timeout_s: float, db: Db):
        self.conn, self.timeout_s, self.db = conn, timeout_s, db
        self.timed_out = threading.Event()

    def _stop(self) -> None:
        self.timed_out.set()
        self.conn.interrupt()

    @contextmanager
    def spending(self) -> Iterator[None]:
        """Run one engine call (execute or fetch) under the limit; its errors become QueryRejected."""
        timer = threading.Timer(self.timeout_s, self._stop)
        timer.daemon = True
        timer.start()
        try:
            yield
        except duckdb.Error as e:
            raise self._rejected(e) from None
        finally:
            timer.cancel()

    def _rejected(self, e: duckdb.Error) -> Exception:
        if self.timed_out.is_set():
            return QueryRejected(f"query took longer than {self.timeout_s:g} s and was stopped; add a LIMIT or a WHERE")
        if _CORRUPT.search(str(e)):
            return _classify(db_path(self.db), e)  # a damaged store: say how to recover, not "bad SQL"
        if isinstance(e, duckdb.PermissionException):
            return QueryRejected(
                "the query tried to reach files, extensions or the network, which the SQL "
                f"page does not allow ({_first_line(e)})"
            )
        return QueryRejected(str(e).strip()[:1000] or type(e).__name__)


def _batches(
    conn: duckdb.DuckDBPyConnection, stream: QueryStream, budget: _Budget, max_rows: int
) -> Iterator[pd.DataFrame]:
    """At most max_rows rows, a batch at a time; the first batch even when it is empty (it names the columns)."""
    left, first = max_rows, True
    while True:
        with budget.spending():
            df = conn.fetch_df_chunk(_BATCH_VECTORS)
        if df.empty:
            if first:
                yield df
            return
        if left == 0:
            stream.truncated = True
            return
        first = False
        if len(df) > left:
            stream.truncated = True
            yield df.iloc[:left].reset_index(drop=True)
            return
        left -= len(df)
        yield df


@contextmanager
def stream_query(sql: str, db: Db = None, *, timeout_s: float = 10.0, max_rows: int = 10_000) -> Iterator[QueryStream]:
    """Run one vetted read-only query on the store and hand its rows over in batches, for results of any size."""
    statement = check_query(sql)
    with sandbox_connection(db) as conn:
        budget = _Budget(conn, timeout_s, db)
        with budget.spending():
            # NOTE: the parsed statement as the user wrote it, not wrapped in a relation's subquery: nothing else
            # in the text can run, and a parser error names the user's own line ("LINE 1"), not the wrapper's
            conn.execute(statement)
        if conn.description is None:
            raise QueryRejected("the statement returned no rows; write a SELECT")
        stream = QueryStream(iter(()))
        stream.batches = _batches(conn, stream, budget, max_rows)
        yield stream


def run_query(sql: str, db: Db = None, *, timeout_s: float = 10.0, max_rows: int = 10_000) -> QueryResult:
    """Run one vetted read-only query on the store; at most max_rows rows come back, in one DataFrame."""
    started = time.perf_counter()
    with stream_query(sql, db, timeout_s=timeout_s, max_rows=max_rows) as stream:
        frames = list(stream.batches)
    df = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    return QueryResult(df, stream.truncated, time.perf_counter() - started)
