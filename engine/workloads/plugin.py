"""The user's own dataset, wrapped so that every loader guarantee holds for it.

The wrapper takes the engine's `(epoch, index)` keys, sleeps `latency_ms` like every workload, and
before each item seeds `torch`, `numpy` and `random` from `sample_seed(seed, epoch, index)`: random
transforms that draw from the global generators then give the same item in any loader and process,
and a different augmentation each epoch. Labels come out as Python ints (or tensors, for soft labels).

NOTE: the global generators are shared by the threads of one process, so the item is loaded under a
per-process lock (seed, then load): items of the `threads` loader do not overlap. A dataset whose
items draw only from `engine.plugins.item_rng()` (a per-item numpy Generator, thread-safe) or from
no generator at all sets the class attribute `thread_safe = True`, and its items run in parallel.
A model whose forward draws from torch's generator (dropout) while `prefetch` or `threads` load in
the background can still shift torch draws in the loader thread; `sync` and `processes` are exact.

    ds = PluginDataset(user_dataset, cfg); x, y = ds[(1, 42)]
"""

from __future__ import annotations

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

__all__ = ["BadItem", "PluginDataset"]


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
            raise ConfigError("workload", f"'{spec}' returned a {type(inner).__name__} without len(); return a "
                                          "map-style torch.utils.data.Dataset (with __len__ and __getitem__)") from None
        if self._len < 1:
            raise ConfigError("workload", f"'{spec}' returned an empty dataset; it needs at least one item")
        # NOTE: the user's num_classes, else the dataset's; when neither says, the model's head decides
        self.num_classes, self.classes_known = dataset_classes(inner, int(cfg.num_classes))
        self._lock: threading.Lock | None = None if getattr(inner, "thread_safe", False) else threading.Lock()
        self._pid = os.getpid()
        self.sample_shape = self._probe()  # what the model is built for; items must all share it

    def _probe(self) -> tuple[int, ...]:
        """Item 0's x shape. The global generators are restored after it, so the model built next is seeded
        by the run's seed, as with every built-in workload, not by item 0's seed."""
        states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
        try:
            x, _ = self._load(0, 0)
        except ConfigError:
            raise
        except BadItem as e:
            raise ConfigError("workload", str(e)) from None
        except Exception as e:  # noqa: BLE001 - the user's item failing is bad input, reported on one line
            raise ConfigError("workload", f"item 0 of '{self.spec}' failed: {type(e).__name__}: "
                                          f"{printable(str(e)[:300])}") from None
        finally:
            torch.random.set_rng_state(states[0])
            np.random.set_state(states[1])
            random.setstate(states[2])
        return tuple(x.shape)

    def _load(self, epoch: int, index: int) -> tuple[torch.Tensor, Any]:
        seed = sample_seed(self.seed, epoch, index)
        if self._lock is None:
            return self._item(seed, index)
        if self._pid != os.getpid():
            # NOTE: a forked worker inherits the lock as it was, maybe held by a thread that does not exist there
            self._lock, self._pid = threading.Lock(), os.getpid()
        with self._lock:
            return self._item(seed, index)

    def _item(self, seed: int, index: int) -> tuple[torch.Tensor, Any]:
        set_item_seed(seed)  # what engine.plugins.item_rng() seeds from, in this thread
        torch.default_generator.manual_seed(seed)  # NOTE: the CPU generator only: CUDA's stay the training's
        np.random.seed(seed & 0xFFFFFFFF)  # NOTE: numpy's legacy seed takes 32 bits
        random.seed(seed)
        try:
            item = self.inner[index]
        finally:
            set_item_seed(0)
        return self._check(item, index)

    def _check(self, item: Any, index: int) -> tuple[torch.Tensor, Any]:
        """An item is (tensor, int | tensor); anything else fails the item with a message naming the plugin."""
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise BadItem(f"item {index} of '{self.spec}' is of type {type(item).__name__}, not an (x, y) pair; "
                          "return (tensor, int label) or (tensor, tensor)")
        x, y = item
        if not isinstance(x, torch.Tensor):
            raise BadItem(f"item {index} of '{self.spec}': x is of type {type(x).__name__}, not a tensor; "
                          "convert it (e.g. torch.from_numpy or torchvision's ToTensor)")
        if isinstance(y, torch.Tensor) and not (y.dim() == 0 and not y.is_floating_point()):
            return x, y  # soft or multi-dimensional labels: the loss decides what they mean
        if isinstance(y, (int, np.integer, torch.Tensor)) and not isinstance(y, bool):
            label = int(y)
            if self._class_labels and self.classes_known and not 0 <= label < self.num_classes:
                raise BadItem(f"item {index} of '{self.spec}': label {label} is out of range for the model's "
                              f"{self.num_classes} logits; labels must be in [0, {self.num_classes}): set "
                              "num_classes (or the dataset's num_classes attribute) or fix the labels")
            return x, (torch.tensor(label) if isinstance(y, torch.Tensor) else label)
        raise BadItem(f"item {index} of '{self.spec}': the label is of type {type(y).__name__}; return an int "
                      "class index or a tensor")

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = self._lock is not None  # a lock cannot be pickled (spawn workers): rebuilt below
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock() if state["_lock"] else None

    def __repr__(self) -> str:
        return f"PluginDataset({self.spec}, n={len(self)}, shape={self.sample_shape}, classes={self.num_classes})"
