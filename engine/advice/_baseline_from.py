"""--baseline-from module:callable: the user's own DataLoader, read instead of transcribed.

    python -m engine tune --workload mypkg.data:build --model mypkg.nets:net --baseline-from mypkg.train:make_loader

The callable takes no arguments and returns a torch.utils.data.DataLoader. Its settings become the baseline that
`--baseline loader=...` gives (engine/advice/baseline.py): num_workers > 0 is the processes loader with that many
workers, 0 the sync loader; prefetch_factor, persistent_workers, pin_memory, batch_size and the start method are
read from the object. What a baseline cannot say (a custom sampler, collate_fn, worker_init_fn) is logged, not
read: the lab's runs use the lab's sampler and the run's collate.
"""

from __future__ import annotations

import logging
import multiprocessing
from typing import Any

from engine.advice.baseline import parse
from engine.errors import ConfigError, printable
from engine.plugins import call_factory, resolve

__all__ = ["read_loader", "settings_of"]

log = logging.getLogger(__name__)
FIELD = "baseline_from"


def read_loader(spec: str) -> dict[str, Any]:
    """The baseline of the DataLoader that `spec`'s callable returns, checked as --baseline's is."""
    made = call_factory(resolve(spec, FIELD), spec, FIELD, {})
    # NOTE: known by its class, not isinstance: importing torch here would load it into the CLI for every command
    if not any(c.__name__ == "DataLoader" and c.__module__.startswith("torch.utils.data") for c in type(made).__mro__):
        raise ConfigError(
            FIELD,
            f"'{printable(spec[:200])}' returned type {type(made).__name__}, not a "
            "torch.utils.data.DataLoader; return the loader your training builds",
        )
    return settings_of(made)


def _start_method(ctx: Any) -> str:
    """The workers' start method: the DataLoader's context, a name, or this platform's default."""
    if ctx is None:
        return multiprocessing.get_start_method(allow_none=False)
    return ctx if isinstance(ctx, str) else ctx.get_start_method()


def settings_of(dl: Any) -> dict[str, Any]:
    """A DataLoader's loader settings as a baseline dict (KNOB_KEYS of engine/advice/baseline.py)."""
    batch = dl.batch_size if dl.batch_size is not None else getattr(dl.batch_sampler, "batch_size", None)
    if batch is None:
        raise ConfigError(
            FIELD,
            "the DataLoader has no batch_size (nor a batch_sampler with one); give it "
            "batch_size=..., or say your setup with --baseline loader=...,batch_size=...",
        )
    out: dict[str, Any] = {
        "loader": "processes" if dl.num_workers > 0 else "sync",
        "batch_size": int(batch),
        "pin_memory": bool(dl.pin_memory),
    }
    if dl.num_workers > 0:
        out.update(
            workers=int(dl.num_workers),
            prefetch_depth=int(dl.prefetch_factor or 2),
            persistent_workers=bool(dl.persistent_workers),
            start_method=_start_method(dl.multiprocessing_context),
        )
    unread = [
        name
        for name, custom in (
            ("collate_fn", _custom_collate(dl)),
            ("worker_init_fn", dl.worker_init_fn),
            ("sampler", type(dl.sampler).__name__ not in ("RandomSampler", "SequentialSampler")),
        )
        if custom
    ]
    if unread:
        log.warning(
            "--baseline-from: the DataLoader's %s is not part of the baseline: the lab's runs use its own "
            "sampler and the run's collate",
            ", ".join(unread),
        )
    return parse(out)


def _custom_collate(dl: Any) -> bool:
    """Not torch's default_collate (batches) nor default_convert (no batching): the user's own."""
    fn = dl.collate_fn
    return not (
        getattr(fn, "__module__", "").startswith("torch.utils.data")
        and getattr(fn, "__name__", "") in ("default_collate", "default_convert")
    )
