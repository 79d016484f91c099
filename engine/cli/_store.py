"""The store around a command: a writing command prepares it first (prepare_store), a reading one runs inside
store.reads_only() (read), and the RunLogs that waited while another session held it are stored or named
(store_pending). Each refusal is one line naming the setting that chose the store."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from engine.cli._options import Command
from engine.errors import StoreBusy, StoreCorrupt, StoreError, StoreVersionError, UsageError
from engine.paths import Db, db_path
from engine.store import ingest_pending, pending_summary, prepare, reads_only

__all__ = ["announce_new_stores", "prepare_store", "read", "store_pending"]


def _db_field(db: Db) -> str:
    """The setting that chose the store, for error messages: --db, else $LOADERLAB_DB, else --db's default."""
    return "LOADERLAB_DB" if db is None and os.environ.get("LOADERLAB_DB") else "--db"


_NEW_STORES: set[Path] = set()  # stores a writing command may create: announced once they exist (main)


def prepare_store(db: Db, *, defer: bool = False) -> None:
    """Before a command that writes starts anything: refuse a store that cannot be used, create a missing one.
    defer (run, sweep, tune): a missing one is only checked to be creatable and is made by the first write, so a
    config refused later (by preflight or the run child) leaves no empty store behind; main() says so then."""
    path = db_path(db)
    try:
        if defer and not path.exists():
            _check_creatable(path)
            _NEW_STORES.add(path)
        elif prepare(db):
            print(f"creating a new store at {path}", file=sys.stderr)
    except StoreError as e:
        raise UsageError(f"{_db_field(db)}: {e}") from None


def _check_creatable(path: Path) -> None:
    """A store can be made at `path`: its nearest existing folder takes a file (tried with a temporary one, since
    permission bits do not tell for root, /proc or a read-only mount)."""
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder")
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise StoreError(
            f"cannot create the store {path}: {e.strerror or e}; name a file in a folder you can write to"
        ) from None


def announce_new_stores() -> None:
    for path in sorted(_NEW_STORES):
        if path.exists():
            print(f"created a new store at {path}", file=sys.stderr)
    _NEW_STORES.clear()


def _pending(db: Db) -> tuple[int, str | None]:
    """(finished runs waiting to be stored, who holds the store or None), from store.pending_summary."""
    found = pending_summary(db)
    count, holder = found["count"], found["holder"]
    return (count if isinstance(count, int) else 0), (holder if isinstance(holder, str) else None)


def _waiting(count: int, holder: str | None) -> None:
    """The one line saying that finished runs wait to be stored, and what will store them."""
    when = (
        f"once the other session ({holder}) closes the store"
        if holder
        else "by the next command that writes (run, sweep, tune, import, worker) or by the dashboard"
    )
    print(
        f"{count} run(s) waiting to be stored: the results are safe in their RunLogs and will be stored {when}",
        file=sys.stderr,
    )


def store_pending(db: Db) -> None:
    """Store the RunLogs that waited while another session held the store; if one still holds it, say so."""
    if not db_path(db).exists():
        return  # a store is created by the command itself, in its own words (prepare_store)
    try:
        ingest_pending(db=db)
        return
    except StoreBusy as e:
        busy_holder = getattr(e, "holder", None)
    count, holder = _pending(db)
    if count:
        _waiting(count, holder or busy_holder or "another program")


def read(cmd: Command, args: argparse.Namespace) -> int:
    """A command that reads: nothing is written, and a store that does not exist is an error, never a new file."""
    path = db_path(args.db)
    with reads_only():  # NOTE: the store is checked when the command first opens it, so bad input is named first
        count, holder = _pending(args.db) if path.is_file() else (0, None)
        if count:
            _waiting(count, holder)
        try:
            return cmd.handler(args)
        except StoreError as e:
            if not path.is_file():
                what = "a folder, not a store file" if path.is_dir() else "not there"
                raise UsageError(
                    f"{_db_field(args.db)}: the store {path} is {what}; check the path (a command that "
                    "reads creates no store; `run`, `sweep` or `import` create one)"
                ) from None
            if isinstance(e, (StoreCorrupt, StoreVersionError)):
                raise UsageError(f"{_db_field(args.db)}: {e}") from None
            raise
