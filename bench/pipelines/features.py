"""Tabular features built in Python, row by row (parsing a CSV-like record, dict look-ups, bucketing), feeding a
logistic regression: the training step is tiny beside its Python producer, so the loader and the GIL decide the
epoch, not the model.
"""

from __future__ import annotations

import math
import random

import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = ["Rows", "build", "model"]

_FIELDS = 48
_CITIES = {f"city{i}": i for i in range(200)}


class Rows(Dataset):
    """(float32 [_FIELDS * 2] features, label) from a synthetic record of mixed fields, parsed and bucketed."""

    def __init__(self, n: int, num_classes: int, records: int = 3, seed: int = 0):
        self.n, self.num_classes, self.records, self.seed = n, num_classes, records, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = random.Random(self.seed * 1_000_003 + index)  # an item's own generator: no global state
        features = [0.0] * (_FIELDS * 2)
        for _ in range(self.records):  # a user's join: several raw records folded into one row
            line = ",".join(
                f"{rng.random() * 1000:.3f}" if k % 3 else f"city{rng.randrange(200)}" for k in range(_FIELDS)
            )
            for k, field in enumerate(line.split(",")):
                value = _CITIES[field] / 200 if field.startswith("city") else math.log1p(float(field))
                features[k] += value / self.records
                features[_FIELDS + k] = max(features[_FIELDS + k], float(int(value * 4)) / 4)
        return torch.tensor(features), int(features[0] * self.num_classes) % self.num_classes


def build(*, n_samples: int = 2048, num_classes: int = 10, seed: int = 0, **_: object) -> Rows:
    return Rows(n_samples, num_classes, seed=seed)


def model(*, in_shape: tuple[int, ...], num_classes: int, **_: object) -> nn.Module:
    return nn.Linear(in_shape[-1], num_classes)
