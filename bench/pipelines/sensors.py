"""Multichannel sensor windows in numpy/LAPACK: each item is a window of 256 time steps x 96 channels, z-normalised,
its channel covariance taken (a matrix product on numpy's BLAS, with its own thread pool) and its eigenvalues found
(LAPACK), then logged beside the channels' spread; an MLP classifies the activity.

Added after the spectrogram's misses shaped the model's pool rule (bench/RESULTS.md), so that a BLAS-heavy pipeline
the rule never saw judges it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = ["Windows", "build", "model"]

_STEPS, _CHANNELS = 256, 96


class Windows(Dataset):
    """(float32 [2 x channels] log-eigenvalues of the channel covariance and log channel spread, label)."""

    def __init__(self, n: int, num_classes: int, seed: int = 0):
        self.n, self.num_classes, self.seed = n, num_classes, seed
        mix = np.random.default_rng(12345).standard_normal((num_classes, _CHANNELS, _CHANNELS)).astype(np.float32)
        self.mix = mix / np.sqrt(_CHANNELS)  # each activity couples the channels its own way

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(self.seed * 1_000_003 + index)
        label = int(rng.integers(self.num_classes))
        raw = rng.standard_normal((_STEPS, _CHANNELS)).astype(np.float32) @ self.mix[label]
        z = (raw - raw.mean(axis=0)) / (raw.std(axis=0) + 1e-6)
        cov = (z.T @ z) / _STEPS  # [channels, channels]
        eig = np.linalg.eigvalsh(cov.astype(np.float64))  # LAPACK
        spread = np.log(raw.std(axis=0) + 1e-6)
        return torch.from_numpy(np.concatenate([np.log(np.abs(eig) + 1e-6), spread]).astype(np.float32)), label


def build(*, n_samples: int = 512, num_classes: int = 6, seed: int = 0, **_: object) -> Windows:
    return Windows(n_samples, num_classes, seed=seed)


def model(*, in_shape: tuple[int, ...], num_classes: int, width: int = 256, **_: object) -> nn.Module:
    return nn.Sequential(
        nn.Linear(in_shape[-1], width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, num_classes)
    )
