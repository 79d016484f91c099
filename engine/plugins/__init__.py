"""The user's own pipeline: dataset, model, collate and loss named as `"module.path:callable"` specs.

A spec's module must be importable where the run starts (the CWD or PYTHONPATH; the run child puts
the launching CWD on sys.path, as `python -m` does). Resolution is lazy: nothing here imports torch
or the user's module until a run or a check asks for it.

    fn = resolve("mypkg.data:build", "workload")      # ConfigError("workload", ...) if it cannot be imported
    code_hash(["mypkg.data:build", "mypkg.nets:net"])  # sha256 of the modules' source files
    registered()                                       # {"my_images": {"workload": "mypkg.data:build"}, ...}
    item_rng()                                         # in a dataset's __getitem__: a per-item Generator

Preflight (one batch tried before launch) is engine/run/preflight.py. What the server's owner registers for the
dashboard lives in a TOML file (engine/plugins/registered.py);
the browser only ever picks a name. code_hash is in engine/plugins/hashing.py. Runs build a plugin's dataset
and model with engine.workloads.build_dataset and engine.models.build_model.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import threading
from typing import Any, Callable, Collection

import numpy as np

from engine.errors import ConfigError, printable
from engine.plugins.hashing import code_hash
from engine.plugins.registered import KINDS, plugins_file, registered
from engine.names import SPEC_RE, is_spec

__all__ = [
    "KINDS",
    "SPEC_RE",
    "call_factory",
    "code_hash",
    "current_seed",
    "is_spec",
    "item_rng",
    "plugins_file",
    "registered",
    "resolve",
    "set_item_seed",
    "specs_of",
]

_ITEM = threading.local()  # the (seed, epoch, index) seed of the item this thread is loading (0: none)


def resolve(spec: str, field: str) -> Callable[..., Any]:
    """Import the spec's module and return its callable; any failure is a one-line ConfigError on `field`."""
    if not is_spec(spec):
        raise ConfigError(
            field,
            f"'{printable(spec[:200])}' is not a plugin spec; write it as "
            "'module.path:callable', e.g. 'mypkg.data:build'",
        )
    module_name, attr = spec.split(":")
    _cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ConfigError(
                field,
                f"module '{module_name}' cannot be imported ({e}); run from the folder that "
                "holds it, or add that folder to PYTHONPATH",
            ) from None
        raise ConfigError(field, f"module '{module_name}' failed to import: {e}; install what it needs") from None
    except Exception as e:  # noqa: BLE001 - the user's module failing at import is bad input, not our crash
        raise ConfigError(
            field, f"module '{module_name}' failed to import: {type(e).__name__}: {printable(str(e)[:300])}"
        ) from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise ConfigError(field, f"module '{module_name}' has no '{attr}'; check the name after the colon")
    if not callable(fn):
        raise ConfigError(field, f"'{spec}' is not callable (type {type(fn).__name__}); name a function or class")
    return fn


def _cwd_on_path() -> None:
    """`python -m engine` puts the CWD on sys.path; a console script or a notebook may not: do it here too."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def call_factory(fn: Callable[..., Any], spec: str, field: str, kwargs: dict[str, Any]) -> Any:
    """Call a user's factory with the keyword arguments it accepts: all of them if it takes **kwargs.

    So `def build(**cfg)` and `def build(seed, n_samples, **_)` both work, and so does `def build(seed)`.
    Whatever the factory raises, SystemExit included, is a ConfigError on `field`: bad input, reported on one line.
    """
    params: Collection[inspect.Parameter]
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable without a signature: give it everything
        params = [inspect.Parameter("kw", inspect.Parameter.VAR_KEYWORD)]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        missing = [p.name for p in params if p.default is p.empty and p.kind in named and p.name not in kwargs]
        if missing:
            passed = ", ".join(sorted(kwargs)) if len(kwargs) < 8 else "every config field (seed, n_samples, ...)"
            raise ConfigError(
                field,
                f"'{spec}' needs argument(s) {', '.join(missing)}, which LoaderLab does not pass; "
                f"it passes {passed} as keywords: give the rest defaults",
            )
        names = {p.name for p in params}
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    try:
        return fn(**kwargs)
    except ConfigError:
        raise
    except SystemExit as e:  # NOTE: sys.exit in a factory is its failure, not the launcher's or the run's exit
        built = {"workload": "dataset", "model_b": "model"}.get(field, field)
        raise ConfigError(
            field,
            f"plugin '{spec}' called sys.exit({printable(repr(e.code))[:60]}) while building the "
            f"{built}; a factory must return the {built} or raise an exception",
        ) from None
    except Exception as e:  # noqa: BLE001 - the user's factory failing is bad input to report, not our crash
        raise ConfigError(field, f"'{spec}' raised {type(e).__name__}: {printable(str(e)[:300])}") from None


def item_rng() -> Any:
    """A numpy Generator seeded for the item being loaded in this thread (per seed, epoch, index).

    For datasets that set `thread_safe = True`: unlike the global generators, it is the thread's own.
    """
    return np.random.default_rng(current_seed())


def current_seed() -> int:
    """The 64-bit seed of the item being loaded in this thread (0 outside an item)."""
    return getattr(_ITEM, "seed", 0)


def set_item_seed(seed: int) -> None:
    """Set by engine.workloads.plugin around each item it loads (0 after it)."""
    _ITEM.seed = seed


def specs_of(cfg: Any) -> list[str]:
    """The plugin specs a config names (workload, model, model_b, collate, loss)."""
    return [v for v in (cfg.workload, cfg.model, cfg.model_b, cfg.collate, cfg.loss) if v and is_spec(v)]
