"""The observer's state in one process: which loader is which stream, which streams nest, how the run ends.

Torch-free and store-free at import: under `python -m engine observe` it is loaded into the user's script only
once a DataLoader is iterated (engine/observe/_boot.py), and the streams' measuring side (_stream.py: the sampler,
the host fingerprint, CUDA events) only then, when the script has imported torch itself.

Two ways in: `watch(loader)` in the user's own process (the run is stored when the loop ends: Watched.close() or
the program's exit; NOTE: not at each epoch's end, where storing cost seconds of the user's loop on a busy machine,
and the RunLog is the live record meanwhile), and
the `observe` command's child (the env names the RunLogs' folder, store and run-id prefix; the parent stores the
runs once the script exits, so the script's process never opens the store).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import uuid
import weakref
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from engine.observe import _live
from engine.observe._live import finish_all, open_streams, streams
from engine.paths import Db, db_path, runs_dir

__all__ = ["ENV_NAME", "ENV_PREFIX", "ENV_RUNS", "ENV_STORE", "close", "finish_all", "open_streams", "stream_for"]

log = logging.getLogger(__name__)

ENV_RUNS, ENV_STORE = "LOADERLAB_OBSERVE_RUNS", "LOADERLAB_OBSERVE_STORE"  # set by the observe command
ENV_PREFIX, ENV_NAME = "LOADERLAB_OBSERVE_PREFIX", "LOADERLAB_OBSERVE_NAME"

_by_loader: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loader -> its Stream
_failure: list[str] = []  # watch(): the exception that ended the program, seen by sys.excepthook


def _child() -> bool:
    return ENV_RUNS in os.environ


StoreRun = Callable[[Path, Db], Any]  # stores a finished run's folder: engine.store's ingest_run, passed from above


def stream_for(
    obj: Any, site: str, *, name: str | None = None, db: Db = None, store_run: StoreRun | None = None
) -> Any:
    """The Stream of a loader, made at its first epoch. A loader that cannot be weakly referenced (a plain list)
    gets a new stream each time it is watched. `store_run` stores its run when it ends (watch(); the observe
    command's child stores nothing: its parent does)."""
    try:
        found = _by_loader.get(obj)
    except TypeError:
        found = None
    if found is not None and not found.ended:
        return found
    # NOTE: loaded here, not at the top: it brings the sampler and the host fingerprint, which import torch, and the
    # observe command's child must not import torch before the user's script does
    from engine.observe._stream import Stream

    if _child():
        root, store = Path(os.environ[ENV_RUNS]), Path(os.environ[ENV_STORE])
        run_id, name = f"{os.environ[ENV_PREFIX]}-{len(streams)}", name or os.environ.get(ENV_NAME) or None
    else:
        root, store = runs_dir(db), db_path(db)
        run_id = f"obs-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    stream = Stream(obj, site=site, run_dir=root / run_id, store=store, name=name)
    stream.db = None if _child() else db
    stream.store_run = None if _child() else store_run
    try:
        _by_loader[obj] = stream
    except TypeError:
        pass
    streams.append(stream)
    if len(streams) == 1 and not _child():
        _on_exit()
    return stream


def close(obj: Any) -> None:
    """End a loader's run now, as done (a notebook's loop that is over), and store it under watch()."""
    try:
        stream = _by_loader.get(obj)
    except TypeError:
        stream = None
    if stream is not None and not stream.ended:
        stream.finish("done", None)
        _live.store(stream)


def _on_exit() -> None:
    """watch(): end the runs when the program ends, as failed when an exception ended it."""
    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: Any) -> None:
        _failure.append(f"{kind.__name__}: {value}".splitlines()[0][:300])
        previous(kind, value, tb)

    sys.excepthook = hook
    atexit.register(lambda: finish_all("failed" if _failure else "done", _failure[0] if _failure else None))
