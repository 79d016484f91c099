"""The SQL page's sandbox: one read-only query, bounded in time and rows.

    result = run_query("SELECT loader, median(epoch_s) FROM runs GROUP BY loader")
    result.df, result.truncated, result.elapsed_s

Defense in depth, each layer enough alone for most attacks:
  1. the statement is parsed: exactly one, of type SELECT (DESCRIBE, SHOW, VALUES, WITH, FROM ...), or
     EXPLAIN of one; functions that read files or run other SQL are refused by name;
  2. the store is opened read-only, through connect();
  3. that database instance is opened with external access, extension loading and Python-variable
     scans off (LOCKDOWN), and its configuration is locked, so the query cannot SET them back;
  4. a timer interrupts a query that runs past timeout_s;
  5. at most max_rows + 1 rows are fetched; `truncated` says whether there were more.
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
from engine.paths import Db, db_path
from engine.store.connect import _CORRUPT, _classify, connect

__all__ = ["LOCKDOWN", "QueryRejected", "QueryResult", "check_query", "run_query", "sandbox_connection"]

log = logging.getLogger(__name__)

LOCKDOWN: dict[str, object] = {
    "enable_external_access": False,  # no files, no network, no ATTACH, no COPY TO
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "python_enable_replacements": False,  # (connect() sets it too) a table name must not read a Python variable
}  # then run_query sets lock_configuration, so that the query cannot SET any of them back
# Table/scalar functions refused by name: they read files or the network, or run SQL given as text.
_REFUSED = re.compile(r"^(read_\w+|\w+_scan|glob|sniff_csv|parquet_\w+|query|query_table|json_execute_serialized_sql|"
                      r"checkpoint|force_checkpoint|getenv|duckdb_secrets|which_secret|\w+_attach|iceberg_\w+|"
                      r"postgres_\w+|mysql_\w+|sqlite_\w+)$", re.I)
_EXPLAIN = re.compile(r"^\s*EXPLAIN(\s+ANALY[SZ]E)?\s+", re.I)
_NAME = re.compile(rb'"[^"]*"|[^\s/(-]+')  # a function's name at a token's start, in the UTF-8 text
_MAX_SQL = 100_000


@dataclass(frozen=True)
class QueryResult:
    df: pd.DataFrame
    truncated: bool
    elapsed_s: float


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
        raise QueryRejected(f"write exactly one statement; found {len(statements)} "
                            "(remove the extra ';' and what follows it)")
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
        raise QueryRejected(f"the query holds a character that is not text (position {e.start}); "
                            "retype that part of it") from None
    statement = _one_statement(sql)
    kind = statement.type
    if kind == duckdb.StatementType.EXPLAIN:
        explained = _EXPLAIN.sub("", statement.query, count=1)
        if explained == statement.query or _one_statement(explained).type != duckdb.StatementType.SELECT:
            raise QueryRejected("EXPLAIN is allowed only in front of a SELECT query")
    elif kind != duckdb.StatementType.SELECT:
        raise QueryRejected(f"only read-only queries can run here (SELECT, WITH, VALUES, DESCRIBE, SHOW, "
                            f"SUMMARIZE, EXPLAIN); this statement is of type {kind.name}")
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
        if raw[nxt:nxt + 1] == b"(" and _REFUSED.match(name):
            raise QueryRejected(f"{name}() reads files or runs other SQL, which the SQL page does not allow; "
                                "query the store's tables (runs, epochs, steps, samples, ...) instead")


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


def run_query(sql: str, db: Db = None, *, timeout_s: float = 10.0,
              max_rows: int = 10_000) -> QueryResult:
    """Run one vetted read-only query on the store; at most max_rows rows come back."""
    statement = check_query(sql)
    started = time.perf_counter()
    with sandbox_connection(db) as conn:
        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            conn.interrupt()

        timer = threading.Timer(timeout_s, stop)
        timer.daemon = True
        timer.start()
        try:
            relation = conn.sql(statement)  # the parsed statement: nothing else in the text can run
            if relation is None:
                raise QueryRejected("the statement returned no rows; write a SELECT")
            df = relation.limit(max_rows + 1).df()
        except duckdb.Error as e:
            if timed_out.is_set():
                raise QueryRejected(f"query took longer than {timeout_s:g} s and was stopped; "
                                    "add a LIMIT or a WHERE") from None
            if _CORRUPT.search(str(e)):
                raise _classify(db_path(db), e) from None  # a damaged store: say how to recover, not "bad SQL"
            if isinstance(e, duckdb.PermissionException):
                raise QueryRejected("the query tried to reach files, extensions or the network, which the SQL "
                                    f"page does not allow ({_first_line(e)})") from None
            raise QueryRejected(str(e).strip()[:1000] or type(e).__name__) from None
        finally:
            timer.cancel()
    truncated = len(df) > max_rows
    return QueryResult(df.iloc[:max_rows].reset_index(drop=True) if truncated else df, truncated,
                       time.perf_counter() - started)
