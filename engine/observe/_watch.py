"""`watch(loader)`: the user's own training loop, observed with one line.

    from engine import watch
    for epoch in range(epochs):
        for x, y in watch(train_loader):      # the same batches; each pass is one epoch of the run
            ...

Each loader is one run (`source = 'observed'`) whose RunLog is written as the loop goes and stored when the loop
ends: `close()` on what watch() returned, else when the program ends (engine/observe/_stream.py says what is
timed). `name` tags the run; `db` is the store (default: $LOADERLAB_DB, else data/loaderlab.duckdb).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterator

from engine.observe import _hub
from engine.observe._hub import StoreRun
from engine.paths import Db

__all__ = ["Watched", "watch"]


class Watched:
    """An iterable over the loader's batches; iterating it again is the loader's next epoch."""

    def __init__(self, loader: Any, site: str, name: str | None, db: Db, store_run: StoreRun | None = None):
        self.loader, self.site, self.name, self.db, self.store_run = loader, site, name, db, store_run

    def __iter__(self) -> Iterator:
        stream = _hub.stream_for(self.loader, self.site, name=self.name, db=self.db, store_run=self.store_run)
        t0, t_start = time.perf_counter(), time.time()
        return stream.epoch(iter(self.loader), t0, t_start)

    def __len__(self) -> int:
        return len(self.loader)

    def close(self) -> None:
        """End the run now and store it (else it ends when the program does): a notebook's finished loop."""
        _hub.close(self.loader)


def watch(loader: Any, *, name: str | None = None, db: Db = None, store_run: StoreRun | None = None) -> Watched:
    """The loader's batches, unchanged, with each pass timed as one epoch of a stored run.

    Wrap the loader where the loop iterates it, `for x, y in watch(train_loader): ...`; each loader wrapped this
    way is one run (`source = 'observed'`), named by where watch() was called (file:line), with the DataLoader's
    settings in the lab's fields. The run is stored when the loop's program ends, or at `close()` on what watch()
    returned (a notebook's finished loop).

    Args:
        loader: the DataLoader (or any iterable of batches) the script already builds.
        name: a tag for the run, e.g. "train" or "val".
        db: the store; default $LOADERLAB_DB, else data/loaderlab.duckdb.
        store_run: stores the finished run (`from engine import watch` passes the store's ingest_run; the observer
            sits below the store and never imports it); None keeps the RunLog only.
    """
    caller = sys._getframe(1)
    return Watched(loader, f"{caller.f_code.co_filename}:{caller.f_lineno}", name, db, store_run)
