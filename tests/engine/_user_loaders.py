"""Users' own DataLoaders, as a training script builds them: what --baseline-from reads (tests/engine/test_memory.py).

Its own module so that the CLI and tune import it as a plugin: tests.engine._user_loaders:make_loader.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["make_loader", "make_plain_loader", "not_a_loader"]


def make_loader() -> DataLoader:
    data = TensorDataset(torch.zeros(96, 3, 8, 8), torch.zeros(96, dtype=torch.long))
    return DataLoader(
        data,
        batch_size=48,
        shuffle=True,
        num_workers=2,
        prefetch_factor=4,
        persistent_workers=False,
        pin_memory=False,
        multiprocessing_context="spawn",
    )


def make_plain_loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=16)


def not_a_loader() -> list:
    return [1, 2, 3]
