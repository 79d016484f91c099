"""The pieces of ddp mode around the training loop: the timed all-reduce hook and the launch env.

(Each rank's shard of the data is engine.workloads.ShardDataset: rank r's samples r, r + world, ...)

    ddp.register_comm_hook(AllreduceTimer(device), timed_allreduce)
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from engine.errors import ConfigError
from engine.measure import cuda_events

__all__ = ["AllreduceTimer", "cuda_ranks", "free_port", "timed_allreduce", "torchrun_env"]


class AllreduceTimer:
    """State of the comm hook below: the launch-to-completion span of every bucket's all-reduce."""

    def __init__(self, device: torch.device):
        self.cuda, self.device = device.type == "cuda", device
        self.spans: list[Any] = []  # seconds (CPU) or pooled Spans (CUDA: events reused, not made per bucket)

    def take_seconds(self) -> float:
        """The epoch's summed spans (call after the epoch's synchronize), and start afresh."""
        spans, self.spans = self.spans, []
        return sum(s.seconds() for s in spans) if self.cuda else sum(spans)


# NOTE: no annotations on bucket and the result: DDP checks them against real types, and this module's
# `from __future__ import annotations` turns them into strings, which it rejects.
def timed_allreduce(timer: AllreduceTimer, bucket):  # noqa: ANN001, ANN202
    if timer.cuda:
        span = cuda_events.pool(timer.device).span()
        span.start.record(torch.cuda.current_stream(timer.device))
    else:
        start = time.perf_counter()

    def done(fut: torch.futures.Future) -> torch.Tensor:
        if timer.cuda:  # runs on streams that wait for the all-reduce, so this event marks its end
            span.end.record(torch.cuda.current_stream(timer.device))
            timer.spans.append(span)
        else:
            timer.spans.append(time.perf_counter() - start)
        return fut.value()

    # torch's annotation says ProcessGroup, but its code (_allreduce_fut) takes None as the default group
    return allreduce_hook(None, bucket).then(done)  # type: ignore[arg-type]


def torchrun_env() -> tuple[int, int, int, int] | None:
    """(rank, world_size, local_rank, local_world_size) when started by torchrun, else None.

    local_world_size is the ranks on this node (torchrun's LOCAL_WORLD_SIZE); without it, one node is assumed.
    """
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        world = int(os.environ["WORLD_SIZE"])
        return (
            int(os.environ["RANK"]),
            world,
            int(os.environ["LOCAL_RANK"]),
            int(os.environ.get("LOCAL_WORLD_SIZE", world)),
        )
    return None


def cuda_ranks(first: int, local_world: int, count: int, field: str = "world_size") -> list[str]:
    """The GPUs of this node's ranks: local rank r on cuda:first + r (first from a configured cuda:N, else 0).

    NCCL needs one GPU per rank, so the ranks must fit in the `count` GPUs this process sees; a ConfigError
    names the field otherwise (world_size for our own launch, WORLD_SIZE for torchrun's).
    """
    if first + local_world > count:
        raise ConfigError(
            field,
            f"ddp on CUDA puts one rank per GPU (NCCL cannot share one): {local_world} rank(s) "
            f"from cuda:{first} need {first + local_world} GPUs, this machine sees {count}; "
            f"lower it, pick a lower cuda:N or use device cpu",
        )
    return [f"cuda:{first + r}" for r in range(local_world)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
