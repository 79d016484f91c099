"""The observe command's bootstrap, run as a file in the script's interpreter (engine/run/observed.py):

    python .../engine/observe/_boot.py train.py ARGS     (or -m MODULE ARGS, or -c CODE ARGS)

It runs the script unchanged, as `python train.py ARGS` would (its sys.argv, sys.path[0], __main__, outputs and
exit status), and observes every torch.utils.data.DataLoader the script iterates: an import hook patches
DataLoader's __init__ (where it was made: the stream's name) and __iter__ (each pass: one epoch of its stream)
when the script itself imports torch.utils.data. Nothing else is imported first: not torch (the script may set
its environment before importing it), and nothing of LoaderLab until a DataLoader is iterated (then only the
observer, engine/observe/). When the script ends, raising or not, the runs of its streams end with it: the parent
stores them.

Standard library only at import: this file is what the script's process starts with.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import time
import weakref
from types import FrameType
from typing import Any

TARGET = "torch.utils.data.dataloader"
ENV_ROOT = "LOADERLAB_OBSERVE_ROOT"  # the checkout, so the observer imports once a DataLoader is iterated


def _site(skip: tuple[str, ...]) -> str:
    """file:line of the first frame outside torch and this file: where the script made the DataLoader."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


def _patch(module: Any) -> None:
    loader_cls = module.DataLoader
    init, orig_iter = loader_cls.__init__, loader_cls.__iter__
    skip = (os.path.dirname(os.path.dirname(os.path.dirname(module.__file__))), __file__)  # torch/, this file
    sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    trial = os.environ.get("LOADERLAB_TUNE_SITE")  # a trial of `engine tune -- python train.py` (observe/_trial.py)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        site = sites.setdefault(self, _site(skip))  # NOTE: setdefault: a subclass's __init__ calling ours keeps its own
        if trial:
            from engine.observe import _trial as trial_mod  # NOTE: here: no LoaderLab before (module doc)

            args, kwargs = trial_mod.override(init, site, args, kwargs)
            init(self, *args, **kwargs)
            trial_mod.mark(self, site)
            return
        init(self, *args, **kwargs)

    @functools.wraps(orig_iter)
    def __iter__(self: Any) -> Any:
        t0, t_start = time.perf_counter(), time.time()
        threads = getattr(self, "_loaderlab_threads", None)  # a trial's threads loader (engine/observe/_trial.py)
        # NOTE: timed from here: starting the workers is the epoch's time to first batch
        it = iter(threads) if threads is not None else orig_iter(self)
        from engine.observe import _hub as hub  # NOTE: here: no LoaderLab before (module doc)

        return hub.stream_for(self, sites.get(self, "?")).epoch(it, t0, t_start)

    loader_cls.__init__, loader_cls.__iter__ = __init__, __iter__


class _Hook(importlib.abc.MetaPathFinder):
    """Patches DataLoader right after torch.utils.data.dataloader is executed, then leaves the import system."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                run(module)
                _patch(module)

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _run(argv: list[str]) -> None:
    """Run the script as the interpreter would have: sys.argv, sys.path[0] and __main__ as without us."""
    if argv[0] == "-m":
        sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv, sys.path[0] = list(argv), os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def main() -> None:
    argv = sys.argv[1:]
    if os.environ.get(ENV_ROOT):
        sys.path.append(os.environ[ENV_ROOT])  # NOTE: last: the script's own modules win over the checkout's
    sys.meta_path.insert(0, _Hook())
    status, error = "done", None
    try:
        _run(argv)
    except SystemExit as e:
        if e.code not in (None, 0):
            status, error = "failed", f"the script exited with status {e.code}"
        raise
    except BaseException as e:
        status, error = "failed", (f"{type(e).__name__}: {e}".splitlines() or [""])[0][:300]
        raise
    finally:
        hub = sys.modules.get("engine.observe._hub")
        if hub is not None:
            hub.finish_all(status, error)


if __name__ == "__main__":
    main()
