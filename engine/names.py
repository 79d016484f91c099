"""The rule every registry keeps: a name means one thing. LOADERS, MODELS, MODES and WORKLOADS are built here.

    LOADERS = unique("loader", [("sync", SyncLoader), ("threads", ThreadLoader)])   # a plain dict
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["unique"]

T = TypeVar("T")


def unique(kind: str, entries: list[tuple[str, T]]) -> dict[str, T]:
    """A plain dict from name to factory, in the given order; a name given twice raises."""
    out: dict[str, T] = {}
    for name, factory in entries:
        if name in out:
            raise RuntimeError(f"duplicate {kind} name '{name}' in the registry")
        out[name] = factory
    return out
