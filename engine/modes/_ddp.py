"""The pieces of ddp mode around the training loop: the rank's shard, the timed all-reduce hook, the launch env.

    ShardDataset(workload, rank, world)   rank r's samples: r, r + world, r + 2 * world, ...
    ddp.register_comm_hook(AllreduceTimer(device), timed_allreduce)
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch
from torch.utils.data import Dataset

__all__ = ["AllreduceTimer", "ShardDataset", "free_port", "timed_allreduce", "torchrun_env"]


class ShardDataset(Dataset):
    """Rank `rank`'s share of a workload: global samples rank, rank + world, ... Keys are (epoch, index)."""

    def __init__(self, base: Any, rank: int, world: int):
        self.base, self.rank, self.world = base, rank, world
        self.sample_shape, self.num_classes = base.sample_shape, base.num_classes

    def __len__(self) -> int:
        return len(range(self.rank, len(self.base), self.world))

    def __getitem__(self, key: Any) -> Any:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        return self.base[(epoch, self.rank + index * self.world)]


class AllreduceTimer:
    """State of the comm hook below: the launch-to-completion span of every bucket's all-reduce."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.spans: list[Any] = []  # seconds (CPU) or (start, end) CUDA event pairs

    def take_seconds(self) -> float:
        """The epoch's summed spans (call after the epoch's synchronize), and start afresh."""
        spans, self.spans = self.spans, []
        return sum(s.elapsed_time(e) / 1000.0 for s, e in spans) if self.cuda else sum(spans)


# NOTE: no annotations on bucket and the result: DDP checks them against real types, and this module's
# `from __future__ import annotations` turns them into strings, which it rejects.
def timed_allreduce(timer: AllreduceTimer, bucket):  # noqa: ANN001, ANN202
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook  # noqa: PLC0415

    start: Any = torch.cuda.Event(enable_timing=True) if timer.cuda else time.perf_counter()
    if timer.cuda:
        start.record()

    def done(fut: torch.futures.Future) -> torch.Tensor:
        if timer.cuda:  # runs on streams that wait for the all-reduce, so this event marks its end
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            timer.spans.append((start, end))
        else:
            timer.spans.append(time.perf_counter() - start)
        return fut.value()

    return allreduce_hook(None, bucket).then(done)


def torchrun_env() -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) when started by torchrun, else None."""
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
