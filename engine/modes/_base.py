"""What every mode gets (RunContext) and what it registers (ModeSpec).

A mode is one function `run(ctx)` that builds its model(s), loops over epochs and writes one
`epoch` event per (model, rank, epoch) to ctx.log. The step is factored out (engine/modes/_common.py);
loops are not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from engine.runlog import RunLog

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["ModeSpec", "RunContext", "no_check"]


def no_check(cfg: RunConfig) -> None:
    """Modes with no extra rules."""


@dataclass(frozen=True)
class ModeSpec:
    """run: the loop. check: extra config rules. bound: the mode's lower bound: given the run's
    Calibrator it returns the Phases its epoch runs, or None for no bound from this process
    (engine/calibrate/bound.py)."""

    run: Callable[["RunContext"], None]
    bound: Callable[[Any], Any]
    check: Callable[[RunConfig], None] = no_check
    doc: str = ""
    own_processes: bool = False  # trains in processes it starts, which initialise CUDA themselves


@dataclass
class RunContext:
    cfg: RunConfig
    log: RunLog
    device: torch.device
    # summary figures a mode wants on the run row (merged into the `summary` event by the runner)
    summary: dict[str, Any] = field(default_factory=dict)
    # the run's system sampler (engine/measure/sampler.py): stopped before an unstored --trace epoch
    sampler: Any = None
    # the runner's start-up marks (launched_at, imported_at, cuda_s): the first epoch recorded writes the
    # `startup` event from them (engine/measure/startup.py); empty where no runner started the run (tests)
    startup: dict[str, Any] = field(default_factory=dict)
