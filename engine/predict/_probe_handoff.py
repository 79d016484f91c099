"""The hand-off of a batch from a DataLoader worker process to the training process, for the probe
(engine/predict/probe.py): what the model's `processes` loader pays beyond the load itself.

Batches the probe's load already made are served by a dataset whose item is a whole batch, so a worker's fetch
costs nothing and what is timed is the rest of the way: the worker moves the batch into shared memory and pickles
its handles, the training process unpickles them (and pins the batch where the run pins). With one worker, a batch
takes the slower of its two sides; with two, the training process's side alone, which is serial however many workers
there are. The first batch's wait is the workers' start (paid every epoch where workers are not persistent).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from engine.predict.records import Handoff
from torch.utils.data import DataLoader, Dataset

__all__ = ["handoff"]

log = logging.getLogger(__name__)


class _Made(Dataset):
    """n items, each a batch already made (the list's, in turn)."""

    def __init__(self, batches: list[Any], n: int):
        self.batches, self.n = batches, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Any:
        return self.batches[index % len(self.batches)]


def _unpinned(batch: Any) -> Any:
    """batch with every tensor in plain CPU memory, as a worker makes it.

    NOTE: the probe's load pins its batches on CUDA; a forked worker that moves a pinned tensor into shared memory
    calls into CUDA, which a fork after CUDA's start cannot use (the worker dies with "initialization error")."""
    if isinstance(batch, torch.Tensor):
        return batch.cpu().clone() if batch.is_cuda or batch.is_pinned() else batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(_unpinned(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _unpinned(v) for k, v in batch.items()}
    return batch


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)  # as the processes loader's workers run


def _pass(batches: list[Any], workers: int, n: int, pin: bool) -> tuple[float, float]:
    """(seconds to the first batch, seconds per batch after it) of a DataLoader of `workers` processes."""
    loader = DataLoader(
        _Made(batches, n + 1),
        batch_size=None,
        num_workers=workers,
        pin_memory=pin,
        worker_init_fn=_one_thread,
        prefetch_factor=2,
    )
    t0 = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter()
    for _ in it:
        pass
    end = time.perf_counter()
    del it
    return first - t0, (end - first) / n


def handoff(batches: list[Any], pin: bool, n: int = 16) -> Handoff:
    """{"handoff_s": a worker's batch past its load, "receive_s": the training process's serial side per batch,
    "worker_start_s": the workers' start}, from passes of n batches."""
    if not batches:
        return {}
    batches = [_unpinned(b) for b in batches]
    try:
        start, receive = _pass(batches, 2, n, pin)
        hand = max(receive, _pass(batches, 1, n, pin)[1])
    except RuntimeError as err:  # NOTE: a worker that cannot start here leaves the model without a hand-off term,
        log.warning("the probe's hand-off pass failed (%s): the prediction leaves the hand-off out", err)
        return {}  # as a quick probe does, not without a prediction
    return {"handoff_s": hand, "receive_s": receive, "worker_start_s": start}
