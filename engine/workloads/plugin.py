"""The user's own dataset, wrapped so that every loader guarantee holds for it.

The wrapper takes the engine's `(epoch, index)` keys, sleeps `latency_ms` like every workload, and
before each item seeds `torch`, `numpy` and `random` from `sample_seed(seed, epoch, index)`: random
transforms that draw from the global generators then give the same item in any loader and process,
and a different augmentation each epoch. Labels come out as Python ints (or tensors, for soft labels).

NOTE: the global generators are shared by the threads of one process, so an item whose output depends on them is
loaded under a per-process lock (seed, then load): items of the `threads` loader do not overlap then. Whether it
depends on them is found out before the first item is read (a loader asks as it is built): a few items are loaded
twice, under two different global seeds (the item's own `item_rng()` seed kept), and compared. Items that come out
the same load in parallel, with no lock and no global seeding; `items_serialised` and `serial_note` say which it is,
for the run's record and verdict. A dataset that declares `thread_safe = True` (it draws only from
`engine.plugins.item_rng()`, a per-item numpy Generator, or from no generator) skips the check.
A model whose forward draws from torch's generator (dropout) while `prefetch` or `threads` load in
the background can still shift torch draws in the loader thread; `sync` and `processes` are exact.

    ds = PluginDataset(user_dataset, cfg); x, y = ds[(1, 42)]
"""

from __future__ import annotations

import logging
import os
import random
import threading
from typing import Any

import numpy as np
import torch

from engine.errors import ConfigError, printable
from engine.plugins import set_item_seed
from engine.workloads._base import SeededDataset, sample_seed
from engine.workloads._classes import dataset_classes

__all__ = ["CHECKED_ITEMS", "SERIAL_NOTE", "BadItem", "PluginDataset"]

log = logging.getLogger(__name__)

CHECKED_ITEMS = 3  # items loaded under two global seeds to find out whether the output depends on them
_OTHER_SEED = 0x9E3779B9  # mixed into the global generators' seed for the second load of a checked item
SERIAL_NOTE = (
    "items load one at a time: the dataset's output depends on the global generators (torch, numpy, "
    "random), which the threads of one process share; declare thread_safe = True if it does not, or draw "
    "from engine.plugins.item_rng() (a per-item generator)"
)


class BadItem(TypeError):
    """An item of the user's dataset is not (tensor, int | tensor); the message names the plugin and the item."""


class PluginDataset(SeededDataset):
    """`ds[(epoch, index)]` -> the user's `inner[index]` as (x tensor, y int | tensor), seeded per item."""

    def __init__(self, inner: Any, cfg: Any, spec: str):
        super().__init__(cfg)
        self.inner, self.spec = inner, spec
        self._class_labels = not getattr(cfg, "loss", "")  # cross-entropy: an integer label indexes the logits
        try:
            self._len = len(inner)
        except TypeError:
            raise ConfigError(
                "workload",
                f"'{spec}' returned a {type(inner).__name__} without len(); return a "
                "map-style torch.utils.data.Dataset (with __len__ and __getitem__)",
            ) from None
        if self._len < 1:
            raise ConfigError("workload", f"'{spec}' returned an empty dataset; it needs at least one item")
        # NOTE: the user's num_classes, else the dataset's; when neither says, the model's head decides
        self.num_classes, self.classes_known = dataset_classes(inner, int(cfg.num_classes))
        self._lock: threading.Lock | None = threading.Lock()  # until the check finds it is not needed
        self._pid = os.getpid()
        # NOTE: whether items depend on the global generators is found at the first item read (or when asked), not
        # here: the check reads items 1 and 2, and an item that fails must fail where items are read, where preflight
        # names it, not as the dataset's build
        self._decided = bool(getattr(inner, "thread_safe", False))
        if self._decided:
            self._lock = None
        self._deciding = threading.Lock()
        self.sample_shape = self._probe()  # what the model is built for; items must all share it

    @property
    def items_serialised(self) -> bool:
        """Whether items load one at a time in one process (the `threads` loader's items do not overlap)."""
        self.decide_lock()
        return self._lock is not None

    def decide_lock(self) -> None:
        """Once: drop the lock if the items do not depend on the global generators (other threads wait). A loader
        calls it as it is built (engine/loaders/_base.py), in the building thread, before any item loads."""
        if self._decided:
            return
        with self._deciding:
            if not self._decided:
                if not self._uses_global_generators():
                    self._lock = None
                self._decided = True

    @property
    def serial_note(self) -> str | None:
        return SERIAL_NOTE if self.items_serialised else None

    def _probe(self) -> tuple[int, ...]:
        """Item 0's x shape. The global generators are restored after it, so the model built next is seeded
        by the run's seed, as with every built-in workload, not by item 0's seed."""
        states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
        try:
            x, _ = self._item(sample_seed(self.seed, 0, 0), 0)  # (seeded as a locked load is; no check yet)
        except ConfigError:
            raise
        except BadItem as e:
            raise ConfigError("workload", str(e)) from None
        except Exception as e:  # noqa: BLE001 - the user's item failing is bad input, reported on one line
            raise ConfigError(
                "workload", f"item 0 of '{self.spec}' failed: {type(e).__name__}: {printable(str(e)[:300])}"
            ) from None
        finally:
            torch.random.set_rng_state(states[0])
            np.random.set_state(states[1])
            random.setstate(states[2])
        return tuple(x.shape)

    def _uses_global_generators(self) -> bool:
        """Whether the first CHECKED_ITEMS items change when the global generators are seeded otherwise.

        NOTE: an item that reads the clock or a file that changes also differs: it keeps the lock, which costs
        speed, never exactness. A dataset that draws from them only on some items may pass unseen: it declares
        nothing wrong, and its items then differ between runs of the `threads` loader (the README says so)."""
        states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
        try:
            for index in range(min(CHECKED_ITEMS, self._len)):
                seed = sample_seed(self.seed, 0, index)
                if not _same(self._item(seed, index), self._item(seed, index, seed ^ _OTHER_SEED)):
                    log.info("'%s': items depend on the global generators; they load one at a time", self.spec)
                    return True
        except (Exception, SystemExit):  # noqa: BLE001 - item 0 loaded in _probe; a later item failing (or exiting)
            return True  # fails where it is read for real, with its index: the lock stays, which costs only speed
        finally:
            torch.random.set_rng_state(states[0])
            np.random.set_state(states[1])
            random.setstate(states[2])
        return False

    def _load(self, epoch: int, index: int) -> tuple[torch.Tensor, Any]:
        if self._pid != os.getpid():
            # NOTE: a forked worker inherits the locks as they were, maybe held by a thread that does not exist there
            self._lock = None if self._lock is None else threading.Lock()
            self._deciding, self._pid = threading.Lock(), os.getpid()
        self.decide_lock()
        seed = sample_seed(self.seed, epoch, index)
        if self._lock is None:
            return self._item(seed, index, None)  # NOTE: no global seeding: it changes nothing, and would race
        with self._lock:
            return self._item(seed, index)

    def _item(self, seed: int, index: int, global_seed: int | None = -1) -> tuple[torch.Tensor, Any]:
        """Item `index` with item_rng() seeded by `seed` and the global generators by `global_seed` (-1: the same
        seed; None: left alone)."""
        set_item_seed(seed)  # what engine.plugins.item_rng() seeds from, in this thread
        if global_seed is not None:
            g = seed if global_seed == -1 else global_seed
            torch.default_generator.manual_seed(g)  # NOTE: the CPU generator only: CUDA's stay the training's
            np.random.seed(g & 0xFFFFFFFF)  # NOTE: numpy's legacy seed takes 32 bits
            random.seed(g)
        try:
            item = self.inner[index]
        finally:
            set_item_seed(0)
        return self._check(item, index)

    def _check(self, item: Any, index: int) -> tuple[torch.Tensor, Any]:
        """An item is (tensor, int | tensor); anything else fails the item with a message naming the plugin."""
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise BadItem(
                f"item {index} of '{self.spec}' is of type {type(item).__name__}, not an (x, y) pair; "
                "return (tensor, int label) or (tensor, tensor)"
            )
        x, y = item
        if not isinstance(x, torch.Tensor):
            raise BadItem(
                f"item {index} of '{self.spec}': x is of type {type(x).__name__}, not a tensor; "
                "convert it (e.g. torch.from_numpy or torchvision's ToTensor)"
            )
        if isinstance(y, torch.Tensor) and not (y.dim() == 0 and not y.is_floating_point()):
            return x, y  # soft or multi-dimensional labels: the loss decides what they mean
        if isinstance(y, (int, np.integer, torch.Tensor)) and not isinstance(y, bool):
            label = int(y)
            if self._class_labels and self.classes_known and not 0 <= label < self.num_classes:
                raise BadItem(
                    f"item {index} of '{self.spec}': label {label} is out of range for the model's "
                    f"{self.num_classes} logits; labels must be in [0, {self.num_classes}): set "
                    "num_classes (or the dataset's num_classes attribute) or fix the labels"
                )
            return x, (torch.tensor(label) if isinstance(y, torch.Tensor) else label)
        raise BadItem(
            f"item {index} of '{self.spec}': the label is of type {type(y).__name__}; return an int "
            "class index or a tensor"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = self._lock is not None  # a lock cannot be pickled (spawn workers): rebuilt below
        state["_deciding"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock() if state["_lock"] else None
        self._deciding = threading.Lock()

    def __repr__(self) -> str:
        return f"PluginDataset({self.spec}, n={len(self)}, shape={self.sample_shape}, classes={self.num_classes})"


def _same(a: tuple[torch.Tensor, Any], b: tuple[torch.Tensor, Any]) -> bool:
    """Two loads of a checked item agree: the same x (NaN where NaN) and the same label."""
    (xa, ya), (xb, yb) = a, b
    if isinstance(ya, torch.Tensor) or isinstance(yb, torch.Tensor):
        same_y = isinstance(ya, torch.Tensor) and isinstance(yb, torch.Tensor) and torch.equal(ya, yb)
    else:
        same_y = ya == yb
    return (
        bool(same_y)
        and xa.shape == xb.shape
        and xa.dtype == xb.dtype
        and bool(torch.isclose(xa, xb, rtol=0, atol=0, equal_nan=True).all())
    )
