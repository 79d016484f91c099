"""How many label classes a user's dataset has, and whether anyone said so.

The user's num_classes wins when set (not 0, auto); else the dataset's own `num_classes` attribute; else the labels
it lists (`targets` or `labels`, as ImageFolder does). When none of them says, the model decides: it is built with
DEFAULT_CLASSES, and a fixed head of its own width is taken as it is (the preflight checks the labels against it).

    classes, known = dataset_classes(inner, cfg.num_classes)
"""

from __future__ import annotations

from typing import Any

import torch

from engine.names import DEFAULT_CLASSES

__all__ = ["dataset_classes"]


def dataset_classes(inner: Any, asked: int) -> tuple[int, bool]:
    """(classes, known): known is False when only the model can say (it is then built for DEFAULT_CLASSES)."""
    if asked:
        return int(asked), True
    declared = getattr(inner, "num_classes", None)
    if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
        return declared, True
    listed = _listed_classes(inner)
    return (listed, True) if listed else (DEFAULT_CLASSES, False)


def _listed_classes(inner: Any) -> int | None:
    """max label + 1 of a flat list of integer labels the dataset keeps (`targets`, `labels`), at least 2."""
    targets = next((getattr(inner, a) for a in ("targets", "labels") if hasattr(inner, a)), None)
    if targets is None:
        return None
    try:
        labels = torch.as_tensor(targets)
    except (TypeError, ValueError, RuntimeError):
        return None
    if labels.dim() != 1 or not len(labels) or labels.is_floating_point() or int(labels.min()) < 0:
        return None
    return max(2, int(labels.max()) + 1)
