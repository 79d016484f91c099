"""The common base of every workload: key parsing, per-sample seeds, the latency sleep, the tensor bank, and
one rank's shard of a workload (ddp).

A workload is a map-style torch Dataset built from a RunConfig. A key is an index or an
`(epoch, index)` pair; the same (seed, epoch, index) always gives the same `(x, y)`, in any process,
because every random choice comes from `sample_seed(seed, epoch, index)`. Different epochs give
different augmentations of the same underlying sample.

    ds = TensorWorkload(cfg); x, y = ds[(1, 42)]   # x: float32 (3, S, S), y: int
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from engine.names import DEFAULT_CLASSES

__all__ = ["BankWorkload", "SeededDataset", "ShardDataset", "best_seconds", "sample_seed"]

log = logging.getLogger(__name__)

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A 64-bit seed for one sample in one epoch. Stable across processes, platforms and versions.

    NOTE: a pure-Python splitmix64 chain rather than numpy's SeedSequence, which costs several times more,
    because the tensor workload calls it per sample and is meant to cost almost nothing.
    """
    return _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ (epoch & _MASK64)) ^ (index & _MASK64))


def best_seconds(fn: Callable[[], Any], repeats: int = 5) -> float:
    """The fastest of `repeats` timed calls after one warm-up: the uncontended cost, used to calibrate work_us."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


class SeededDataset(Dataset):
    """Base class: `ds[index]` or `ds[(epoch, index)]` -> (x float32 tensor of `sample_shape`, y int).

    Subclasses set `num_classes` (and `_len` if it is not cfg.n_samples) and implement `_load`.
    `cfg.latency_ms` is slept here, before every sample, to emulate remote storage.
    """

    def __init__(self, cfg: Any):
        self.seed = int(cfg.seed)
        self.num_classes = int(cfg.num_classes) or DEFAULT_CLASSES  # 0: auto
        self.image_size = int(cfg.image_size)
        self.sample_shape: tuple[int, ...] = (3, self.image_size, self.image_size)  # a plugin's may be any shape
        self.latency_s = float(cfg.latency_ms) / 1000.0
        self._len = int(cfg.n_samples)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, key: Any) -> tuple[torch.Tensor, int]:
        epoch, index = self._parse_key(key)
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        return self._load(epoch, index)

    def _parse_key(self, key: Any) -> tuple[int, int]:
        if isinstance(key, tuple):
            if len(key) != 2:
                raise TypeError(f"a workload key is an index or an (epoch, index) pair, got {key!r:.80}")
            epoch, index = operator.index(key[0]), operator.index(key[1])
        else:
            epoch, index = 0, operator.index(key)
        # NOTE: negative indices are rejected rather than wrapped: a sampler that produces one has a bug.
        if not 0 <= index < self._len:
            raise IndexError(f"index {index} is out of range for a workload of {self._len} samples")
        if epoch < 0:
            raise IndexError(f"epoch {epoch} is negative; epochs count from 0")
        return epoch, index

    def _load(self, epoch: int, index: int) -> tuple[torch.Tensor, int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={len(self)}, shape={self.sample_shape}, classes={self.num_classes})"


class BankWorkload(SeededDataset):
    """In-memory random samples: a bank of at most `BANK_BYTES` of tensors, indexed `index % bank_size`.

    The bank is built lazily, once per process, from the seed, and is never pickled: a spawned worker
    rebuilds the identical bank instead of receiving up to 64 MiB through a pipe. Labels belong to bank
    slots, so a model can learn them. Per (epoch, index), the sample is circularly shifted and maybe
    flipped (cheap, and always a fresh tensor, so no sample aliases the bank).

    Subclasses with per-sample work set WORK_UNIT and `work_rate` (units per second, calibrated once per process)
    and spend `work_units` in `_work`. NOTE: work_us becomes a fixed amount of work, calibrated when the workload is
    built, not a perf_counter deadline: under contention a sample still does the same work and takes longer, which
    is what a concurrency benchmark has to see. With a deadline, threads waiting for the GIL would see it pass, do
    less work, and look like they scale.
    """

    BANK_BYTES = 64 * 2**20
    WORK_UNIT = ""  # what work_rate counts, e.g. "cumsum elements"; "" for no per-sample work
    work_rate: Callable[[], float] | None = None

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        per_sample = 4 * 3 * self.image_size**2
        self.bank_size = max(1, min(self._len, 4096, self.BANK_BYTES // per_sample))
        self._bank: np.ndarray | None = None  # (bank_size, 3, S, S) float32
        self._labels: list[int] | None = None
        self._lock = threading.Lock()
        self.work_units = 0
        if cfg.work_us > 0 and self.work_rate is not None:
            self.work_units = max(1, round(cfg.work_us * 1e-6 * self.work_rate()))
            log.debug(
                "%s work_us=%s -> %d %s per sample", type(self).__name__, cfg.work_us, self.work_units, self.WORK_UNIT
            )

    def _ensure_bank(self) -> tuple[np.ndarray, list[int]]:
        if self._bank is None:
            with self._lock:  # NOTE: threads of one loader share the dataset; build the bank once
                if self._bank is None:
                    g = torch.Generator().manual_seed(self.seed)
                    bank = torch.randn((self.bank_size, *self.sample_shape), generator=g).numpy()
                    self._labels = torch.randint(self.num_classes, (self.bank_size,), generator=g).tolist()
                    self._bank = bank  # published last: a reader that sees the bank also sees the labels
        bank, labels = self._bank, self._labels  # the bank first: a thread that sees it sees the labels too
        assert bank is not None and labels is not None  # built above, by this thread or another
        return bank, labels

    def _load(self, epoch: int, index: int) -> tuple[torch.Tensor, int]:
        bank, labels = self._ensure_bank()
        slot = index % self.bank_size
        h = sample_seed(self.seed, epoch, index)
        # NOTE: numpy, not torch.roll/flip: torch splits these over its thread pool for large images,
        # which costs far more on busy cores than numpy's single-threaded copies.
        x = np.roll(bank[slot], (h % self.image_size, (h >> 16) % self.image_size), axis=(1, 2))
        if (h >> 32) & 1:
            x = np.ascontiguousarray(x[:, :, ::-1])
        self._work()
        return torch.from_numpy(x), labels[slot]

    def _work(self) -> None:
        """Spend `work_units` of per-sample CPU work (cfg.work_us); the subclass decides whether it holds the GIL."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_bank=None, _labels=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class ShardDataset(Dataset):
    """Rank `rank`'s share of a workload: global samples rank, rank + world, ... Keys are (epoch, index)."""

    def __init__(self, base: Any, rank: int, world: int):
        self.base, self.rank, self.world = base, rank, world
        self.sample_shape, self.num_classes = base.sample_shape, base.num_classes

    def __len__(self) -> int:
        return len(range(self.rank, len(self.base), self.world))

    def __getitem__(self, key: Any) -> Any:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        return self.base[(epoch, self.rank + index * self.world)]
