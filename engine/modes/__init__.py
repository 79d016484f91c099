"""Training-loop families, one file each. MODE_SPECS lists (name, ModeSpec) in registry order.

    single.py   one model, the reference loop
    dual.py     two models: sequential (the baseline), threads, processes, streams (_streams.py)
    fused.py    n_models copies trained as one torch.func.vmap program
    split.py    one model cut into pipeline stages over devices (GPipe micro-batches)
    ddp.py      data parallel over world_size processes (torch.distributed)
"""

from engine.modes import ddp, dual, fused, split
from engine.modes._base import ModeSpec, RunContext
from engine.modes.single import SPEC as SINGLE

MODE_SPECS = [
    ("single", SINGLE),
    ("dual-sequential", dual.SEQUENTIAL),
    ("dual-threads", dual.THREADS),
    ("dual-processes", dual.PROCESSES),
    ("dual-streams", dual.STREAMS),
    ("fused", fused.SPEC),
    ("split", split.SPEC),
    ("ddp", ddp.SPEC),
]

__all__ = ["MODE_SPECS", "ModeSpec", "RunContext"]
