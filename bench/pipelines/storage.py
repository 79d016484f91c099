"""Object-storage-like reads: each item waits a heavy-tailed latency (lognormal, median 3 ms, as a GET from a
bucket does), then decodes its bytes with numpy; an MLP trains on the result.

The latency is drawn from a generator seeded by the item's index, so every loader sees the same waits.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = ["Objects", "build", "model"]


class Objects(Dataset):
    """(float32 [features] decoded from 4 KiB of bytes, label)."""

    def __init__(self, n: int, num_classes: int, median_ms: float = 3.0, sigma: float = 1.0, seed: int = 0):
        self.n, self.num_classes, self.median_ms, self.sigma, self.seed = n, num_classes, median_ms, sigma, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(self.seed * 1_000_003 + index)
        time.sleep(self.median_ms / 1000 * float(rng.lognormal(0.0, self.sigma)))  # the GET
        raw = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()  # the object's bytes
        x = np.frombuffer(raw, dtype=np.uint8).astype(np.float32).reshape(16, 256).mean(axis=0) / 255.0
        return torch.from_numpy(x), int(raw[0]) % self.num_classes


def build(*, n_samples: int = 1024, num_classes: int = 10, seed: int = 0, **_: object) -> Objects:
    return Objects(n_samples, num_classes, seed=seed)


def model(*, in_shape: tuple[int, ...], num_classes: int, width: int = 64, **_: object) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(in_shape[-1], width), nn.ReLU(), nn.Linear(width, num_classes))
