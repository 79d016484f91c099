"""What every mode gets (RunContext) and what it registers (ModeSpec), plus the shared step.

A mode is one function `run(ctx)` that builds its model(s), loops over epochs and writes one
`epoch` event per (model, rank, epoch) to ctx.log. The step is factored out here; loops are not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from engine.config import RunConfig
from engine.runlog import RunLog

__all__ = ["ModeSpec", "RunContext", "no_check", "to_device"]


def no_check(cfg: RunConfig) -> None:
    """Modes with no extra rules."""


@dataclass(frozen=True)
class ModeSpec:
    """run: the loop. check: extra config rules. bound: the mode's lower bound, given the run's
    Calibrator it returns the Phases its epoch runs (engine/measure/bound.py); None = single's."""

    run: Callable[["RunContext"], None]
    check: Callable[[RunConfig], None] = no_check
    doc: str = ""
    bound: Callable[[Any], Any] | None = None


@dataclass
class RunContext:
    cfg: RunConfig
    log: RunLog
    device: torch.device
    # summary figures a mode wants on the run row (merged into the `summary` event by the runner)
    summary: dict[str, Any] = field(default_factory=dict)


def to_device(batch: tuple[torch.Tensor, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy a batch to the device; a no-op for batches a prefetching loader already placed there."""
    x, y = batch
    if x.device == device:
        return x, y
    non_blocking = device.type == "cuda"
    return x.to(device, non_blocking=non_blocking), y.to(device, non_blocking=non_blocking)
