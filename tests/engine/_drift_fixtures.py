"""Datasets whose machine changes speed, as this VM's drifts for seconds at a time.

build     each item a busy wait (CPU, holding the GIL) of `fast_ms` until `switch_s` seconds after the first item
          this process loaded, then of twice that: the probe's back-to-back windows come first and see it fast,
          its later windows see it slow.
slow_run  the first SLOW_RUN_ITEMS items of the process slow, the rest fast: a run slower than its passes.
fast_run  the reverse, with fast_model: the run's items and steps fast, the passes' after it slow.

Their own module so that the probe and the run import them as plugins: tests.engine._drift_fixtures:build.
"""

from __future__ import annotations

import math
import time

import torch

__all__ = [
    "FAST_RUN_STEPS",
    "SLOW_RUN_ITEMS",
    "DriftingDataset",
    "FastModel",
    "SlowRun",
    "build",
    "fast_model",
    "fast_run",
    "slow_run",
]


class DriftingDataset:
    def __init__(self, n_samples: int, fast_ms: float, switch_s: float):
        self.n, self.fast_s, self.switch_s = n_samples, fast_ms / 1000, switch_s
        self.num_classes, self.sample_shape = 10, (3, 8, 8)
        self.started: float | None = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key):
        i = key[1] if isinstance(key, tuple) else key
        now = time.perf_counter()
        self.started = now if self.started is None else self.started
        end = now + self.fast_s * (2 if now - self.started > self.switch_s else 1)
        while time.perf_counter() < end:
            pass
        return torch.full((3, 8, 8), float(i % 7)), i % 10


def build(n_samples: int = 2048, fast_ms: float = 0.5, switch_s: float = 1.3, **_):
    return DriftingDataset(n_samples, fast_ms, switch_s)


SLOW_RUN_ITEMS = 384  # a run of 3 epochs of 128 samples; every item after them (the passes') is the other speed
_LOADED: list[None] = []  # items this process loaded, across dataset copies (the passes build their own)


class SlowRun:
    """Each of this process's first SLOW_RUN_ITEMS items (the run's) waits `run_ms`, every later one (the calibration
    passes') `later_ms`: slow_run's run slower than its passes, fast_run's faster, as when this VM's speed drifts
    between the two."""

    thread_safe = True  # no random draws

    def __init__(self, n_samples: int, run_ms: float, later_ms: float):
        self.n, self.run_s, self.later_s = n_samples, run_ms / 1000, later_ms / 1000
        self.num_classes, self.sample_shape = 10, (3, 8, 8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        _LOADED.append(None)  # NOTE: list.append is atomic under the GIL
        time.sleep(self.run_s if len(_LOADED) <= SLOW_RUN_ITEMS else self.later_s)
        return torch.full((3, 8, 8), float(index % 7)), index % 10


def slow_run(n_samples: int = 128, slow_ms: float = 2.0, fast_ms: float = 0.25, **_):
    return SlowRun(n_samples, slow_ms, fast_ms)


def fast_run(n_samples: int = 128, slow_ms: float = 2.0, fast_ms: float = 0.25, **_):
    return SlowRun(n_samples, fast_ms, slow_ms)


FAST_RUN_STEPS = 24  # a run of 3 epochs of 128 samples in batches of 16; every later step (the passes') is slow
_STEPS: list[None] = []


class FastModel(torch.nn.Module):
    """A linear layer whose forward waits `fast_ms` for this process's first FAST_RUN_STEPS calls, `slow_ms` after."""

    def __init__(self, in_features: int, num_classes: int, fast_ms: float, slow_ms: float):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, num_classes)
        self.fast_s, self.slow_s = fast_ms / 1000, slow_ms / 1000

    def forward(self, x):
        _STEPS.append(None)
        time.sleep(self.fast_s if len(_STEPS) <= FAST_RUN_STEPS else self.slow_s)
        return self.linear(x.flatten(1))


def fast_model(*, in_shape: tuple[int, ...], num_classes: int, fast_ms: float = 1.0, slow_ms: float = 8.0, **_):
    return FastModel(math.prod(in_shape), num_classes, fast_ms, slow_ms)
