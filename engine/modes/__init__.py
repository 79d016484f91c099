"""Training-loop families, one file each. MODES maps a mode's name to its ModeSpec (run, check, bound).

    single.py   one model, the reference loop
    dual.py     two models: sequential (the baseline), threads, processes, streams (_streams.py)
    fused.py    n_models copies trained as one torch.func.vmap program
    split.py    one model cut into pipeline stages over devices (GPipe micro-batches)
    ddp.py      data parallel over world_size processes (torch.distributed)

Each file holds its loop and its lower bound (the passes engine/calibrate/bound.py measures for it).
"""

from __future__ import annotations

from engine.modes import ddp, dual, fused, single, split
from engine.modes._base import ModeSpec, RunContext
from engine.modes._common import step_builder
from engine.names import unique

__all__ = ["MODES", "ModeSpec", "RunContext", "step_builder"]

MODES = unique(
    "mode",
    [
        ("single", single.SPEC),
        ("dual-sequential", dual.SEQUENTIAL),
        ("dual-threads", dual.THREADS),
        ("dual-processes", dual.PROCESSES),
        ("dual-streams", dual.STREAMS),
        ("fused", fused.SPEC),
        ("split", split.SPEC),
        ("ddp", ddp.SPEC),
    ],
)
