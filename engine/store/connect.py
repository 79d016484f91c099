"""The one way to open the DuckDB store, held for one operation only.

    with connect(read_only=True) as conn:
        n = conn.execute("SELECT count(*) FROM runs").fetchall()[0][0]

DuckDB allows one read-write process or many read-only ones, never both. So every open first takes
the sidecar lock `<db>.lock` (shared for readers, exclusive for writers), waiting with backoff while
another LoaderLab process holds it; then it opens DuckDB, retrying while a program outside the project
(a user's `duckdb` shell) holds the file. Past the timeout (30 s, or $LOADERLAB_LOCK_TIMEOUT) it
raises StoreBusy naming the holder. Writers bring the schema up to date; readers of a missing or
outdated file get it created or upgraded first, briefly as a writer, so they never fail on a fresh machine.

Inside `with reads_only():` (the CLI's reading commands: query, runs, show, export...) nothing is written:
a missing store is an error instead of a new file, an outdated one is read as it is, and an open for
writing is refused. prepare(db) is what commands that write call before they start anything: it refuses
a store that cannot be opened and creates a missing one.
"""

from __future__ import annotations

import logging
import os
import re
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator

import duckdb

from engine.paths import Db, db_path
from engine.store._lock import SidecarLock, backoff
from engine.errors import StoreBusy, StoreCorrupt, StoreError, StoreHeld, StoreVersionError
from engine.store.schema import ensure_schema, needs_upgrade

__all__ = ["DEFAULT_TIMEOUT_S", "connect", "prepare", "reads_only"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
_LOCKED = re.compile(r"Could not set lock|Conflicting lock", re.I)
_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")
_OTHER_CONFIG = re.compile(r"different configuration", re.I)
# NOTE: off for every connection: else a missing table name is looked up among Python variables
# (schema_version would find the function of that name). Inserts use conn.register() instead.
_BASE_CONFIG = {"python_enable_replacements": False}
_CORRUPT = re.compile(r"not a valid DuckDB database|corrupt|checksum|deseriali", re.I)
_NEWER = re.compile(r"created with a newer version of DuckDB|storage version", re.I)
_READS_ONLY: ContextVar[bool] = ContextVar("loaderlab_reads_only", default=False)
_PREPARE_WAIT_S = 2.0  # how long prepare() waits for a holder before letting the command go ahead anyway


@contextmanager
def reads_only() -> Iterator[None]:
    """Within the block, no open writes: none creates a store, upgrades one or opens one for writing."""
    token = _READS_ONLY.set(True)
    try:
        yield
    finally:
        _READS_ONLY.reset(token)


def prepare(db: Db = None) -> bool:
    """Open the store once before a command that writes starts anything; returns whether it was created.

    Refuses (StoreError) a store that cannot be used: a corrupt file, a folder, a newer schema, a path that
    cannot be created. A store that a LoaderLab writer or another program holds now passes: it is a store,
    and a run goes ahead whatever holds it (its RunLog waits to be stored).
    """
    path = db_path(db)
    created = not path.exists()
    try:
        with connect(db, read_only=not created, timeout_s=_PREPARE_WAIT_S, outside_wait_s=_PREPARE_WAIT_S / 4):
            pass
    except StoreBusy as e:
        log.info("store %s held now; going ahead: %s", path, e)
    except OSError as e:
        raise StoreError(
            f"cannot {'create' if created else 'open'} the store {path}: {e.strerror or e}; "
            "name a file in a folder you can write to"
        ) from None
    return created


@contextmanager
def connect(
    db: Db = None,
    *,
    read_only: bool,
    timeout_s: float | None = None,
    config: dict[str, object] | None = None,
    outside_wait_s: float | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Yield a DuckDB connection to the store; it and the lock are released when the block ends.

    `config`: DuckDB settings fixed for this connection's database instance (the SQL sandbox locks
    external access this way). NOTE: DuckDB shares one instance per file within a process, so an open
    with other settings waits while this process has the file open with different ones.
    `outside_wait_s`: how long to wait for a program outside LoaderLab that holds the DuckDB file (a
    user's notebook may hold it for hours) before raising StoreHeld; by default as long as `timeout_s`.
    Work that can be deferred (ingesting a RunLog) passes a short wait and tries again later.
    """
    path = db_path(db)
    if path.is_dir():  # before the sidecar locks: nothing is created beside a folder
        raise StoreError(f"the store {path} is a folder, not a file; name a file, e.g. {path / 'loaderlab.duckdb'}")
    reading_only = _READS_ONLY.get()
    if reading_only and not read_only:
        raise StoreError(
            f"a command that only reads tried to write the store {path}; nothing was written. "
            "This is a LoaderLab bug: please report it"
        )
    if timeout_s is None:
        timeout_s = float(os.environ.get("LOADERLAB_LOCK_TIMEOUT") or DEFAULT_TIMEOUT_S)
    deadline = (time.monotonic() + timeout_s, outside_wait_s)
    if read_only and not path.exists():
        if reading_only:
            raise StoreError(f"there is no store at {path}, and a command that reads creates none; check the path")
        _close(*_open(path, False, deadline))  # create it with the schema
    lock, conn = _open(path, read_only, deadline, config)
    if read_only and _guarded(path, needs_upgrade, conn, lock) and not reading_only:
        _close(lock, conn)  # an older file or a new RunConfig field: upgrade as writer, then read
        _close(*_open(path, False, deadline))
        lock, conn = _open(path, read_only, deadline, config)
    try:
        yield conn
    except duckdb.Error as e:
        if _CORRUPT.search(str(e)):  # a damaged block is found only when a query reads it
            raise _classify(path, e) from e
        raise
    finally:
        _close(lock, conn)


def _open(
    path: Path, read_only: bool, deadline: tuple[float, float | None], config: dict[str, object] | None = None
) -> tuple[SidecarLock, duckdb.DuckDBPyConnection]:
    """deadline: (the monotonic deadline, the seconds a program outside LoaderLab may keep the file or None)."""
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    lock = SidecarLock(path, exclusive=not read_only, deadline=deadline[0]).__enter__()
    try:
        conn = _duckdb_open(path, read_only, deadline, {**_BASE_CONFIG, **(config or {})})
    except BaseException:
        lock.close()
        raise
    if not read_only:
        _guarded(path, ensure_schema, conn, lock)
    return lock, conn


def _guarded(path: Path, fn, conn: duckdb.DuckDBPyConnection, lock: SidecarLock):
    """Run a schema step; on failure close everything and raise the store's error."""
    try:
        return fn(conn, path)
    except duckdb.Error as e:
        _close(lock, conn)
        raise _classify(path, e) from e
    except BaseException:
        _close(lock, conn)
        raise


def _close(lock: SidecarLock, conn: duckdb.DuckDBPyConnection) -> None:
    try:
        conn.close()
    finally:
        lock.close()


def _duckdb_open(
    path: Path, read_only: bool, deadline: tuple[float, float | None], config: dict
) -> duckdb.DuckDBPyConnection:
    last: duckdb.Error | None = None
    # NOTE: timed from here, not from connect(): the sidecar wait was for LoaderLab's own short operations
    outside = deadline[0] if deadline[1] is None else time.monotonic() + deadline[1]
    for _ in backoff(deadline[0]):
        try:
            conn = duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.Error as e:
            if not (_LOCKED.search(str(e)) or _OTHER_CONFIG.search(str(e))):
                raise _classify(path, e) from e
            last = e  # another program has the file, or this process has it with other settings: wait
            if _LOCKED.search(str(e)) and time.monotonic() >= outside:
                raise _held(path, e, read_only) from e
            continue
        try:
            conn.execute("SET enable_progress_bar = false")  # the bar would write to the terminal
        except duckdb.Error:
            pass  # a configuration locked by the SQL sandbox; the bar is cosmetic
        return conn
    if _OTHER_CONFIG.search(str(last)):
        who = f"this process (pid {os.getpid()}) with other settings"
    else:
        found = _HOLDER.search(str(last))
        who = f"{found.group(1)} (pid {found.group(2)})" if found else "another program"
    raise StoreBusy(
        f"the store {path} is open in {who}, which blocks {'reading' if read_only else 'writing'}; "
        "close the other DuckDB session or retry"
    )


def _held(path: Path, e: duckdb.Error, read_only: bool) -> StoreHeld:
    found = _HOLDER.search(str(e))
    holder = f"pid {found.group(2)} ({Path(found.group(1)).name})" if found else None
    return StoreHeld(
        f"the store {path} is open in {holder or 'another program'}, which blocks "
        f"{'reading' if read_only else 'writing'}; close the other DuckDB session or retry",
        holder=holder,
    )


def _classify(path: Path, e: duckdb.Error) -> StoreError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if _NEWER.search(str(e)):
        return StoreVersionError(
            f"the store {path} was written by a newer DuckDB than this one ({duckdb.__version__}): {first} "
            f"It was left untouched. Install that newer duckdb (or a LoaderLab that pins it), or export the data "
            f"with it (EXPORT DATABASE) and import it here, or start fresh with --db PATH to a new file"
        )
    if _CORRUPT.search(str(e)):
        return StoreCorrupt(
            f"the store {path} cannot be read ({first}); it was left untouched. Move it aside "
            f"(mv {path} {path}.broken) or restore a backup ({path.name}.bak-v*), then retry, "
            "or start fresh with --db PATH to a new file"
        )
    return StoreError(f"could not open the store {path}: {e}")
