"""An audio pipeline in numpy: a synthetic 1 s clip, framed, windowed, FFT'd, and a mel filterbank applied as a
matrix product (numpy's BLAS, with its own thread pool), then log; a small conv2d net classifies it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = ["Clips", "build", "model"]

_RATE, _FFT, _HOP, _MELS = 16_000, 512, 128, 64


def _mel_bank(n_fft: int, n_mels: int, rate: int) -> np.ndarray:
    """Triangular mel filters, [n_fft // 2 + 1, n_mels]."""
    mel = np.linspace(0, 2595 * np.log10(1 + rate / 2 / 700), n_mels + 2)
    hz = 700 * (10 ** (mel / 2595) - 1)
    bins = np.floor((n_fft + 1) * hz / rate).astype(int)
    bank = np.zeros((n_fft // 2 + 1, n_mels), dtype=np.float32)
    for m in range(1, n_mels + 1):
        lo, mid, hi = bins[m - 1], bins[m], bins[m + 1]
        bank[lo:mid, m - 1] = (np.arange(lo, mid) - lo) / max(1, mid - lo)
        bank[mid:hi, m - 1] = (hi - np.arange(mid, hi)) / max(1, hi - mid)
    return bank


class Clips(Dataset):
    """(float32 [1, mels, frames] log-mel spectrogram, label): the label picks the clip's base tone."""

    def __init__(self, n: int, num_classes: int, seed: int = 0):
        self.n, self.num_classes, self.seed = n, num_classes, seed
        self.bank = _mel_bank(_FFT, _MELS, _RATE)
        self.window = np.hanning(_FFT).astype(np.float32)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(self.seed * 1_000_003 + index)
        label = int(rng.integers(self.num_classes))
        t = np.arange(_RATE, dtype=np.float32) / _RATE
        clip = np.sin(2 * np.pi * (200 + 150 * label) * t) + 0.3 * rng.standard_normal(_RATE).astype(np.float32)
        frames = np.lib.stride_tricks.sliding_window_view(clip, _FFT)[::_HOP] * self.window  # [frames, fft]
        power = np.abs(np.fft.rfft(frames, axis=1)).astype(np.float32) ** 2  # [frames, fft/2+1]
        mel = np.log(power @ self.bank + 1e-6)  # [frames, mels]
        return torch.from_numpy(np.ascontiguousarray(mel.T))[None], label


def build(*, n_samples: int = 512, num_classes: int = 10, seed: int = 0, **_: object) -> Clips:
    return Clips(n_samples, num_classes, seed=seed)


def model(*, in_shape: tuple[int, ...], num_classes: int, width: int = 16, **_: object) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_shape[0], width, 5, 2, 2),
        nn.ReLU(),
        nn.Conv2d(width, width * 2, 3, 2, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(width * 2 * 16, num_classes),
    )
