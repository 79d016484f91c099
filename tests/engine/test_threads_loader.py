"""engine/observe/threads_loader.py, the lab's threads loader a script's answer pastes: DataLoader's batches in its
sampler's order, made on threads; DataLoader's arguments for worker processes that would change what a script gets
(timeout, worker_init_fn) are named in a warning, never dropped unsaid.

    .venv/bin/python -m pytest tests/engine/test_threads_loader.py -q
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from engine.observe.threads_loader import ThreadsLoader


class _Squares(Dataset):
    def __len__(self) -> int:
        return 37

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3,), float(i * i)), i


def _batches(loader) -> list[list[int]]:
    return [y.tolist() for _, y in loader]


@pytest.mark.parametrize("seeded", ["generator", "global seed"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_the_batches_are_dataloaders_in_the_order_the_same_seed_gives_it_epoch_after_epoch(shuffle, seeded) -> None:
    def made(cls, **kw) -> list[list[list[int]]]:
        torch.manual_seed(3)
        gen = torch.Generator().manual_seed(3) if seeded == "generator" else None
        loader = cls(_Squares(), batch_size=8, shuffle=shuffle, generator=gen, **kw)
        return [_batches(loader) for _ in range(2)]

    pasted, theirs = made(ThreadsLoader, num_workers=4), made(DataLoader)
    assert pasted == theirs
    assert (pasted[0] != pasted[1]) == shuffle  # a shuffle is a new order each epoch, as DataLoader's
    assert len(ThreadsLoader(_Squares(), batch_size=8, drop_last=True)) == 4


def test_a_timeout_or_a_worker_init_fn_is_named_in_a_warning_and_the_batches_still_come() -> None:
    called = []
    with pytest.warns(UserWarning, match="timeout and worker_init_fn") as caught:
        loader = ThreadsLoader(_Squares(), batch_size=8, num_workers=2, timeout=5, worker_init_fn=called.append)
    assert "per-worker state in the dataset" in str(caught[0].message)
    assert _batches(loader) == _batches(DataLoader(_Squares(), batch_size=8)) and called == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the defaults, and arguments that change nothing a script sees, say nothing
        ThreadsLoader(_Squares(), batch_size=8, num_workers=2, timeout=0, persistent_workers=True, in_order=False)
