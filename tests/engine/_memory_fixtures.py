"""A dataset that holds memory in every process that loads from it (a per-process cache, as users write them), with a
per-sample sleep so that more worker processes are faster: the fastest setting is the hungriest.

Its own module so that run children import it as a plugin: tests.engine._memory_fixtures:build.
"""

from __future__ import annotations

import os
import time

import torch

__all__ = ["HELD_BYTES", "HungryDataset", "build"]

HELD_BYTES = 200 * 2**20  # each process that loads a sample holds this much, touched (private, counted in PSS)
_HELD: dict[int, torch.Tensor] = {}


class HungryDataset:
    def __init__(self, n_samples: int, latency_ms: float):
        self.n, self.latency_s = n_samples, latency_ms / 1000
        self.num_classes, self.sample_shape = 10, (3, 8, 8)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key):
        i = key[1] if isinstance(key, tuple) else key
        if os.getpid() not in _HELD:
            _HELD[os.getpid()] = torch.ones(HELD_BYTES // 4)  # float32: written, so resident
        time.sleep(self.latency_s)
        return torch.full((3, 8, 8), float(i % 7)), i % 10


def build(n_samples: int = 64, latency_ms: float = 5.0, **_):
    return HungryDataset(n_samples, latency_ms)
