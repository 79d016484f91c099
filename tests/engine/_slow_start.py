"""A dataset plugin whose first epoch is slow: each copy of it (the run's own, or a loader worker's) sleeps on its
first SLOW_ITEMS items, then answers at once. It stands for what a real loader pays once: a spawned worker still
importing torch while the others serve, a lazy index or file handle opened on first use, first pinned buffers.

    workload = "tests.engine._slow_start:data"     # the checkout is on the run's and its workers' PYTHONPATH
"""

from __future__ import annotations

import os
import time

import torch
from torch.utils.data import Dataset

__all__ = ["SLOW_ITEMS", "SLOW_S", "SlowStart", "data"]

SLOW_ITEMS = 32  # per copy: half of a 64-sample epoch, all of what each of 2 workers loads in one epoch
SLOW_S = 0.03


class SlowStart(Dataset):
    thread_safe = True  # no random draws: the threads loader may load items in parallel

    def __init__(self, n: int, size: int):
        self.n, self.size = n, size
        self.num_classes = 10
        self.pid: int | None = None
        self.calls: list[None] = []  # NOTE: list.append is atomic under the GIL, a counter's += is not

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.pid != os.getpid():  # a fresh copy in this process (a forked or spawned worker's): cold again
            self.pid, self.calls = os.getpid(), []
        self.calls.append(None)
        if len(self.calls) <= SLOW_ITEMS:
            time.sleep(SLOW_S)
        return torch.full((3, self.size, self.size), float(index % 7)), index % 10


def data(n_samples: int, image_size: int, **_: object) -> SlowStart:
    return SlowStart(n_samples, image_size)
