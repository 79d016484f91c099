"""A user's loader, read from the object: what the lab's own fields can say, and what they cannot.

    config, settings = read_settings(loader)

`config` holds RunConfig fields only where the DataLoader's setting maps onto one (num_workers=0 -> loader=sync;
n > 0 -> loader=processes, workers=n; batch_size, pin_memory, persistent_workers, start_method, prefetch_depth,
threads, n_samples). Fields the object cannot tell (the model, the epochs, the image size) are left out: stored
NULL, never the lab's default. `settings` keeps every setting as the object had it, and `unmapped` lists those the
lab's fields cannot hold (a custom sampler, a timeout, a worker_init_fn), so the run says so.

Torch-free at import: torch is read from sys.modules, where the user's script put it.
"""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any

__all__ = ["read_settings"]


def _name(obj: Any) -> str | None:
    """'module:QualName' of an object's class (or of a function), None for None."""
    if obj is None:
        return None
    target = obj if callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', type(obj).__name__)}"


def _length(obj: Any) -> int | None:
    try:
        return int(len(obj))
    except (TypeError, ValueError, NotImplementedError):
        return None


def _start_method(ctx: Any) -> str:
    """The multiprocessing start method the workers use: the loader's context, else this process's default."""
    if isinstance(ctx, str):
        return ctx
    if ctx is not None and hasattr(ctx, "get_start_method"):
        return ctx.get_start_method()
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()


def read_settings(loader: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(RunConfig fields that map, every setting as read): see the module doc. Any iterable is accepted; one that
    is not a DataLoader maps to nothing and says so."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    dataset = getattr(loader, "dataset", None)
    settings: dict[str, Any] = {
        "loader_class": _name(loader),
        "intra_op_threads": threads,
        "dataset_class": _name(dataset),
        "dataset_len": _length(dataset),
    }
    config: dict[str, Any] = {"mode": "single"}
    if threads:
        config["threads"] = threads
    if settings["dataset_len"] is not None:
        config["n_samples"] = settings["dataset_len"]
    if not hasattr(loader, "num_workers") or not hasattr(loader, "batch_size"):
        settings["unmapped"] = ["loader: not a torch.utils.data.DataLoader; its settings cannot be read"]
        return config, settings
    workers = int(loader.num_workers)
    batch_sampler = getattr(loader, "batch_sampler", None)
    batch_size = loader.batch_size if loader.batch_size is not None else getattr(batch_sampler, "batch_size", None)
    settings.update(
        num_workers=workers,
        batch_size=batch_size,
        pin_memory=bool(loader.pin_memory),
        prefetch_factor=getattr(loader, "prefetch_factor", None),
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        multiprocessing_context=_start_method(getattr(loader, "multiprocessing_context", None)) if workers else None,
        drop_last=getattr(loader, "drop_last", None),
        timeout=getattr(loader, "timeout", 0),
        sampler_class=_name(getattr(loader, "sampler", None)),
        batch_sampler_class=_name(batch_sampler),
        collate_fn=_name(getattr(loader, "collate_fn", None)),
        worker_init_fn=_name(getattr(loader, "worker_init_fn", None)),
    )
    config.update(loader="processes" if workers else "sync", workers=workers, pin_memory=settings["pin_memory"])
    if batch_size is not None:
        config["batch_size"] = int(batch_size)
    if workers:
        config.update(
            persistent_workers=settings["persistent_workers"], start_method=settings["multiprocessing_context"]
        )
        if settings["prefetch_factor"] is not None:
            config["prefetch_depth"] = int(settings["prefetch_factor"])  # per worker in both: engine/loaders
    settings["unmapped"] = _unmapped(settings)
    return config, settings


def _unmapped(s: dict[str, Any]) -> list[str]:
    """The settings the lab's runs cannot reproduce: each kept as-is, named here so the run says so."""
    out = []
    if s["batch_size"] is None:
        out.append("batch_size: set by a batch sampler without a batch_size")
    if s["multiprocessing_context"] not in (None, "fork", "spawn", "forkserver"):
        out.append(f"multiprocessing_context: {s['multiprocessing_context']}")
    if s["timeout"]:
        out.append(f"timeout: {s['timeout']} s")
    if s["worker_init_fn"]:
        out.append(f"worker_init_fn: {s['worker_init_fn']}")
    default_collate = ("torch.utils.data._utils.collate:default_collate", None)
    if s["collate_fn"] not in default_collate:
        out.append(f"collate_fn: {s['collate_fn']}")
    if s["sampler_class"] not in (
        "torch.utils.data.sampler:SequentialSampler",
        "torch.utils.data.sampler:RandomSampler",
    ):
        out.append(f"sampler: {s['sampler_class']}")
    return out
