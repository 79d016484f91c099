"""A dataset whose machine slows down: each item is a busy wait (CPU, holding the GIL) of `fast_ms` until
`switch_s` seconds after the first item this process loaded, then of twice that, as this VM's speed drifts for
seconds at a time. The probe's back-to-back windows come first and see it fast; its later windows see it slow.

Its own module so that the probe imports it as a plugin: tests.engine._drift_fixtures:build.
"""

from __future__ import annotations

import time

import torch

__all__ = ["DriftingDataset", "build"]


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
