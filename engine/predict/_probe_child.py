"""The probe of one pipeline on this host, from the calibrations cache or measured now, in a process of its own.

    python -m engine.predict._probe_child CALIBRATIONS_DIR [BUDGET_S] < config.json   # a JSON line: {probe, cached}

BUDGET_S: seconds the probe may take, counted from this process's start (its imports included): where the full probe
does not fit, a quick one (engine/predict/probe.py).

`tune` asks for its base pipeline's probe here before its first run, not in its own process: tune lives through
every run, and a probe run there would leave it a CUDA context (GPU memory the runs then lack) and warm OpenMP
pools; a child ends and takes them along. tune forks it from its warm parent (engine/run/warm.py WarmParent.call:
main(argv), stdin and stdout from and to files), once that parent has imported torch, else starts it cold; either
way it runs alone, before the first run, so nothing of tune's own competes for the cores it measures. The cache key
is the host's `machine` (engine/measure/host.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil

from engine.config import RunConfig
from engine.predict.forecast import cached_or_new

__all__ = ["main"]


def main(argv: list[str]) -> int:
    cfg = RunConfig.from_dict(json.loads(sys.stdin.read()))
    budget = None
    if len(argv) > 1:  # NOTE: what is left of it: importing torch and the engine took part
        budget = max(0.5, float(argv[1]) - (time.time() - psutil.Process().create_time()))
    found, cached = cached_or_new(cfg, Path(argv[0]), budget_s=budget)
    print(json.dumps({"probe": found, "cached": cached}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
