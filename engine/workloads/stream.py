"""The user's stream: an IterableDataset, or any iterable of (x, y) or (x, y, key) without __getitem__.

A stream is split into parts, one per (rank, worker): part p of P = world x workers reads
  - split "self":  the whole iterator, in a worker whose dataset splits itself (`shards_itself = True`: it reads
                   torch.utils.data.get_worker_info() and the rank);
  - split "shard": shards p, p + P, ... of `inner.shards()` (a list), each read with `inner.iter_shard(shard)`;
  - split "item":  every P-th item of the whole iteration (every part reads all of it and keeps its own: expose
                   shards to split the reading too).
Before each item is pulled, torch, numpy and random are seeded from (seed, epoch, the item's place in the stream):
a random transform inside the stream gives the same item in any loader; which batch it lands in depends on the
number of parts (`order_note`). The split "self" can only seed per (seed, epoch, rank, worker, count).

Each epoch calls iter() on the dataset again (and `set_epoch(e)` where it has one, as Hugging Face's streams do), so
an iterable starts over every epoch; an iterator (a generator object) would be exhausted after one: refused.
EpochTally counts what every part delivered and fails the epoch of a sized stream that repeats or drops samples.

    ds = StreamDataset(user_iterable, cfg, "mod:build"); for x, y, key in ds.part(epoch, worker, workers): ...
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import random
import threading
import time
from typing import Any, Iterator

import numpy as np
import torch

from engine.errors import ConfigError, printable
from engine.plugins import set_item_seed
from engine.workloads._base import sample_seed
from engine.workloads._classes import dataset_classes

__all__ = ["SPLITS", "BadStreamItem", "StreamDataset", "is_stream"]

# One lock per process around (seed the global generators, pull an item): a module global, so nothing is pickled for
# spawned workers, and renewed in a forked child, which may inherit it held by a thread that does not exist there.
_GENERATORS = [threading.Lock()]
os.register_at_fork(after_in_child=lambda: _GENERATORS.__setitem__(0, threading.Lock()))
SPLITS = ("self", "shard", "item")  # how a stream was split; "" for a map-style dataset (the store's stream_split)


class BadStreamItem(TypeError):
    """An item of the user's stream is not (tensor, label) or (tensor, label, key): one line naming the plugin."""


def is_stream(dataset: Any) -> bool:
    return getattr(dataset, "is_stream", False) is True


class StreamDataset:
    """The user's iterable, split into parts per (rank, worker), seeded per item, checked per item."""

    is_stream = True  # for code that must not import the workloads (the runner's module level)

    def __init__(self, inner: Any, cfg: Any, spec: str):
        self.inner, self.spec = inner, spec
        self.seed, self.check_samples = int(cfg.seed), bool(getattr(cfg, "check_samples", False))
        self.latency_s = float(cfg.latency_ms) / 1000.0
        self.rank, self.world = 0, 1
        if iter(inner) is inner:
            raise ConfigError(
                "workload",
                f"'{spec}' returned a {type(inner).__name__}, an iterator that is exhausted "
                "after one epoch; return an iterable that starts over on each iter() (an "
                "IterableDataset, or a class with __iter__), not a generator object",
            )
        self.split = (
            "self"
            if getattr(inner, "shards_itself", False)
            else "shard"
            if callable(getattr(inner, "iter_shard", None)) and hasattr(inner, "shards")
            else "item"
        )
        try:
            self.total: int | None = int(len(inner))
        except (TypeError, NotImplementedError):
            self.total = None  # an epoch ends at StopIteration
        self._class_labels = not getattr(cfg, "loss", "")
        self.num_classes, self.classes_known = dataset_classes(inner, int(cfg.num_classes))
        self.thread_safe = bool(getattr(inner, "thread_safe", False))
        self.sample_shape = self._probe()

    # ---------------------------------------------------------------- what loaders ask
    def for_rank(self, rank: int, world: int) -> "StreamDataset":
        """This stream as rank `rank` of `world` reads it (ddp): parts rank x workers + w of world x workers."""
        out = copy.copy(self)
        out.rank, out.world = rank, world
        return out

    def order_note(self, workers: int) -> str:
        """What the run's notes say about its batches: where they cannot be the same for every loader."""
        if self.split == "self":
            return (
                "the stream splits itself (shards_itself): its items and their random transforms depend on the "
                "number of workers and ranks, so loaders with other counts see other batches"
            )
        if self.world * max(1, workers) == 1:
            return ""
        return (
            f"the stream is split by {self.split} over {self.world * max(1, workers)} parts: every item and its "
            "transform are the same for a given seed, but which batch it lands in depends on the worker count"
        )

    def part(self, epoch: int, worker: int, workers: int) -> Iterator[tuple[torch.Tensor, Any, Any]]:
        """Part (rank, worker) of epoch `epoch`: (x, y, key) items, each seeded before it is pulled."""
        parts, p = self.world * workers, self.rank * workers + worker
        if callable(getattr(self.inner, "set_epoch", None)):
            self.inner.set_epoch(epoch)
        if self.split == "shard":
            shards = list(self.inner.shards() if callable(self.inner.shards) else self.inner.shards)
            for s in range(p, len(shards), parts):
                yield from self._pulled(iter(self.inner.iter_shard(shards[s])), epoch, (s << 32), 1, 0)
        elif self.split == "item":
            yield from self._pulled(iter(self.inner), epoch, 0, parts, p)
        else:
            yield from self._pulled(iter(self.inner), epoch, (self.rank << 48) | (worker << 32), 1, 0)

    # ---------------------------------------------------------------- per item
    def _pulled(self, it: Iterator[Any], epoch: int, base: int, every: int, mine: int) -> Iterator[Any]:
        """Items base + i of `it` whose i % every == mine, each pulled right after its seed is set."""
        i = 0
        while True:
            try:
                item = self._next(it, sample_seed(self.seed, epoch, base + i))
            except StopIteration:
                return
            if i % every == mine:
                yield self._check(item, base + i)
            i += 1

    def _next(self, it: Iterator[Any], seed: int) -> Any:
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        if self.thread_safe:
            return self._seeded_next(it, seed)
        with _GENERATORS[0]:  # NOTE: the global generators are shared by the threads of a process (plugin.py says why)
            return self._seeded_next(it, seed)

    @staticmethod
    def _seeded_next(it: Iterator[Any], seed: int) -> Any:
        set_item_seed(seed)
        torch.default_generator.manual_seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)
        random.seed(seed)
        try:
            return next(it)
        finally:
            set_item_seed(0)

    def _check(self, item: Any, place: int) -> tuple[torch.Tensor, Any, Any]:
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise BadStreamItem(
                f"item {place} of the stream '{self.spec}' is of type {type(item).__name__}, not an "
                "(x, y) or (x, y, key) tuple; yield (tensor, int label[, key])"
            )
        x, y = item[0], item[1]
        if not isinstance(x, torch.Tensor):
            raise BadStreamItem(
                f"item {place} of the stream '{self.spec}': x is of type {type(x).__name__}, not a "
                "tensor; convert it (e.g. torch.from_numpy or torchvision's ToTensor)"
            )
        if isinstance(y, (int, np.integer)) and not isinstance(y, bool):
            y = int(y)
            if self._class_labels and self.classes_known and not 0 <= y < self.num_classes:
                raise BadStreamItem(
                    f"item {place} of the stream '{self.spec}': label {y} is out of range for "
                    f"{self.num_classes} classes; set num_classes or fix the labels"
                )
        elif not isinstance(y, torch.Tensor):
            raise BadStreamItem(
                f"item {place} of the stream '{self.spec}': the label is of type "
                f"{type(y).__name__}; yield an int class index or a tensor"
            )
        key = item[2] if len(item) == 3 else (_item_hash(x, y) if self.check_samples else None)
        return x, y, key

    def _probe(self) -> tuple[int, ...]:
        """The first item's x shape, from a fresh iter() (the run's epochs call iter() again), generators restored."""
        with _generators_kept():  # the model built next is seeded by the run's seed, not by item 0's
            try:
                first = next(iter(self.part(0, 0, 1)), None)
            except BadStreamItem as e:
                raise ConfigError("workload", str(e)) from None
            except Exception as e:  # noqa: BLE001 - the user's stream failing is bad input, reported on one line
                raise ConfigError(
                    "workload",
                    f"the first item of the stream '{self.spec}' failed: {type(e).__name__}: {printable(str(e)[:300])}",
                ) from None
        if first is None:
            raise ConfigError("workload", f"'{self.spec}' returned an empty stream; it needs at least one item")
        return tuple(first[0].shape)

    def __repr__(self) -> str:
        return f"StreamDataset({self.spec}, n={self.total}, split={self.split}, shape={self.sample_shape})"


@contextlib.contextmanager
def _generators_kept() -> Iterator[None]:
    """torch's CPU, numpy's and random's global generators as they were before the block."""
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def _item_hash(x: torch.Tensor, y: Any) -> str:
    """An item's identity where the stream yields no key: its content (identical items read as one sample)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(x.detach().cpu().contiguous().numpy().tobytes())
    h.update(repr(y.tolist() if isinstance(y, torch.Tensor) else y).encode())
    return h.hexdigest()
