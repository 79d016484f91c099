"""A tiny map-style dataset with the workloads' contract, for the loader tests.

It lives in its own module (not in the test file) so that spawn-started DataLoader workers can
import it: pytest puts tests/engine on sys.path and spawn children inherit the parent's sys.path.
"""

from __future__ import annotations

import os
import threading
import time

import torch

__all__ = ["TinyDataset"]


class TinyDataset:
    """dataset[(epoch, index)] -> (x = torch.full((3, 4, 4), index), y = index % 10).

    fail_at: raise ValueError on that index. sleep_at: sleep `sleep_s` on that index.
    jitter_s: sleep jitter_s * (index % 4), so parallel workers finish batches out of order.
    record: when True, x[1] holds the producing pid and x[2] its thread id modulo 2**20.
    """

    def __init__(
        self,
        n: int,
        fail_at: int | None = None,
        sleep_at: int | None = None,
        sleep_s: float = 5.0,
        jitter_s: float = 0.0,
        record: bool = False,
    ):
        self.n, self.fail_at, self.sleep_at, self.sleep_s, self.record = n, fail_at, sleep_at, sleep_s, record
        self.jitter_s = jitter_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int]:
        epoch, index = key
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} out of range for {self.n} samples")
        if index == self.fail_at:
            raise ValueError(f"tiny dataset refuses index {index} in epoch {epoch}")
        if index == self.sleep_at:
            time.sleep(self.sleep_s)
        if self.jitter_s:
            time.sleep(self.jitter_s * (index % 4))
        x = torch.full((3, 4, 4), float(index))
        if self.record:
            x[1] = float(os.getpid())
            x[2] = float(threading.get_ident() % 2**20)
        return x, index % 10
