"""One trial of `python -m engine tune -- python train.py ARGS` (engine/advice/tune_script.py), in the script's process:
the tuned DataLoader built under the trial's setting, and the script stopped at the trial's limit.

The parent says it all in the environment:

    LOADERLAB_TRIAL=1              for the script too: a trial may skip its checkpoints and logging
    LOADERLAB_TUNE_SITE            file:line of the DataLoader tuned (empty: the first trial, which finds it)
    LOADERLAB_TUNE_SETTING         JSON of that DataLoader's arguments to set, "threads" (torch's intra-op threads),
                                   and "loader": "threads" where its batches are made by threads of the script's
                                   process instead (engine/observe/threads_loader.py, over the same dataset,
                                   batch sampler and collate_fn; the run's config says loader=threads)
    LOADERLAB_TUNE_STEPS           stop once the tuned loader has delivered this many batches
    LOADERLAB_TUNE_SECONDS         (the first trial) stop this long after any observed loader's first batch

At its limit the trial ends every stream's run (the epoch in flight counts up to there, and its RunLog names that
epoch as cut short: `trial_cut_epoch`) and leaves with status 0;
the parent then kills the trial's process group, so no worker outlives it. Standard library only at import.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
from typing import Any

from engine.observe import _live

__all__ = [
    "ACTIVE",
    "ENV_SECONDS",
    "ENV_SETTING",
    "ENV_SITE",
    "ENV_STEPS",
    "ENV_TRIAL",
    "LOADER_ARGS",
    "arrived",
    "check",
    "mark",
    "override",
    "relabel",
]

ENV_TRIAL, ENV_SITE, ENV_SETTING = "LOADERLAB_TRIAL", "LOADERLAB_TUNE_SITE", "LOADERLAB_TUNE_SETTING"
ENV_STEPS, ENV_SECONDS = "LOADERLAB_TUNE_STEPS", "LOADERLAB_TUNE_SECONDS"
LOADER_ARGS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "multiprocessing_context")
_ONLY_WITH_WORKERS = {"persistent_workers": False, "prefetch_factor": None, "multiprocessing_context": None}

ACTIVE = bool(os.environ.get(ENV_STEPS) or os.environ.get(ENV_SECONDS))
_SITE = os.environ.get(ENV_SITE, "")
_STEPS = int(os.environ.get(ENV_STEPS) or 0)
_SECONDS = float(os.environ.get(ENV_SECONDS) or 0.0)
_first: list[float] = []  # host time of the first batch any observed loader delivered
_delivered: dict[str, int] = {}  # site -> batches: a loader made anew each epoch at one line counts as one


def override(init: Any, site: str, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """The DataLoader's arguments under the trial's setting where `site` is the loader tuned, else as they were.
    Arguments given by position stay in place; a loader without workers drops the settings only workers take."""
    if not _SITE or site != _SITE or not os.environ.get(ENV_SETTING):
        return args, kwargs
    setting = json.loads(os.environ[ENV_SETTING])
    threads = setting.pop("threads", None)
    if threads:
        sys.modules["torch"].set_num_threads(int(threads))
    bound = inspect.signature(init).bind(None, *args, **kwargs)
    bound.arguments.update({k: v for k, v in setting.items() if k in LOADER_ARGS})
    if setting.get("loader") == "threads":  # no worker processes: mark() makes its threads loader
        bound.arguments["num_workers"] = 0
    if not bound.arguments.get("num_workers"):
        bound.arguments.update(_ONLY_WITH_WORKERS)
    return bound.args[1:], bound.kwargs


def mark(loader: Any, site: str) -> None:
    """Where the trial's setting is a threads loader at `site`: the DataLoader's threads loader, which the observer
    iterates in its place (engine/observe/_boot.py)."""
    if not _SITE or site != _SITE or not os.environ.get(ENV_SETTING):
        return
    setting = json.loads(os.environ[ENV_SETTING])
    if setting.get("loader") != "threads":
        return
    # NOTE: here, not at the top: observe's boot is standard library only, and the threads loader imports torch
    from engine.observe.threads_loader import ThreadsLoader

    loader._loaderlab_threads = ThreadsLoader(
        loader.dataset,
        batch_sampler=loader.batch_sampler,
        collate_fn=loader.collate_fn,
        pin_memory=bool(setting.get("pin_memory")),
        num_workers=int(setting["num_workers"]),
        prefetch_factor=setting.get("prefetch_factor") or 2,
    )


def relabel(loader: Any, config: dict[str, Any]) -> None:
    """A threads loader's run config: loader=threads, its workers and prefetch depth (not the DataLoader's)."""
    threads = getattr(loader, "_loaderlab_threads", None)
    if threads is not None:
        config.update(loader="threads", workers=threads.num_workers, prefetch_depth=threads.prefetch_factor)
        for key in ("persistent_workers", "start_method"):
            config.pop(key, None)


def arrived(stream: Any) -> None:
    """A batch reached the loop: count it for its loader's line."""
    _delivered[stream.site] = _delivered.get(stream.site, 0) + 1
    if not _first:
        _first.append(time.perf_counter())


def check(stream: Any) -> None:
    """At each request for a batch: past the trial's limit, end the runs and leave (module doc)."""
    if _SECONDS:
        if not _first or time.perf_counter() - _first[0] < _SECONDS:
            return
    elif stream.site != _SITE or _delivered.get(stream.site, 0) < _STEPS:
        return
    stream.log.write("summary", trial_stopped_by=stream.site)
    for s in _live.open_streams():  # NOTE: their epoch in flight is recorded, cut short: no whole epoch's time
        s.log.write("summary", trial_cut_epoch=len(s.epochs))
    _live.finish_all("done", None)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)  # NOTE: no atexit, no worker shutdown: the parent kills the process group
