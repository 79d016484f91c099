"""The store's data version: a sidecar file `<db>.version` that every write of results changes.

The dashboard keys its cached charts and tables on it, so 20 viewers share one query per version.
File stats (size, mtime of the store and its WAL) are no good as that key: the job queue writes the
store while a job runs (status, heartbeats), which would throw every chart away each second although
no result changed. So writers of results call bump() after they commit:

    version.bump(db)      # after ingest, an edit, an import
    version.current(db)   # "" while no writer has bumped yet
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from engine.paths import Db, db_path

__all__ = ["bump", "current", "version_file"]

log = logging.getLogger(__name__)


def version_file(db: Db = None) -> Path:
    path = db_path(db)
    return path.with_name(path.name + ".version")


def bump(db: Db = None) -> str:
    """Give the store a new version (unique per call: time and pid); returns it. Never raises."""
    value = f"{time.time_ns()}-{os.getpid()}"
    target = version_file(db)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(value)
        os.replace(tmp, target)  # NOTE: atomic, so a reader never sees a half-written version
    except OSError as e:  # the version only keys caches; a failed bump must not fail the write it follows
        log.warning("could not bump the store version %s: %s", target, e)
    return value


def current(db: Db = None) -> str:
    """The last bump's value, or "" when the store has never been bumped (or the file is unreadable)."""
    try:
        return version_file(db).read_text()
    except OSError:
        return ""
