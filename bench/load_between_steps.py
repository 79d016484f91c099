"""Where a pipeline's load time goes between the probe and the run: does the training step slow the load it
alternates with (caches), or does the load's speed move between processes and moments (the machine)?

    python3 bench/load_between_steps.py [--pipeline tokenizer] [--rounds 4] [--processes 4]

1. In one process on one thread, as a sync run alternates them: each round times the epoch's batches loaded back to
   back (as the probe does), then loaded between training steps, then the step alone, per batch.
2. The load alone in --processes fresh processes a few seconds apart, each its own interpreter (hash seed, memory
   layout) at its own moment: how far one probe's reading can sit from another's.

Nothing is stored; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from engine.config import RunConfig  # noqa: E402
from engine.loaders import epoch_batches, open_loader  # noqa: E402
from engine.modes import step_builder  # noqa: E402
from engine.workloads import build_dataset  # noqa: E402

CPU = torch.device("cpu")


def _config(pipeline: str) -> RunConfig:
    return RunConfig.from_dict(
        {
            "workload": f"bench.pipelines.{pipeline}:build",
            "model": f"bench.pipelines.{pipeline}:model",
            "n_samples": 512,
            "device": "cpu",
        }
    )


def rounds(pipeline: str, n: int, with_step: bool = True) -> list[tuple[float, float, float, float]]:
    """Per round, ms a batch: load back to back, load between steps, step alone, step between loads."""
    torch.set_num_threads(1)
    cfg = _config(pipeline)
    dataset = build_dataset(cfg)
    step = step_builder(cfg, 0, CPU)(dataset)[0] if with_step else None
    out = []
    with open_loader(dataset, cfg, CPU, loader="sync") as loader:
        keys = epoch_batches(len(dataset), cfg.batch_size, cfg.seed, 1)
        x, y = loader.fetch(keys[0])
        if step:
            step(x, y)
        for _ in range(n):
            t = time.perf_counter()
            for k in keys:
                loader.fetch(k)
            alone = (time.perf_counter() - t) / len(keys)
            if not step:
                out.append((alone * 1e3, 0.0, 0.0, 0.0))
                continue
            loads, steps = [], []
            for k in keys:
                t0 = time.perf_counter()
                x, y = loader.fetch(k)
                t1 = time.perf_counter()
                step(x, y)
                loads.append(t1 - t0)
                steps.append(time.perf_counter() - t1)
            t = time.perf_counter()
            for _ in keys:
                step(x, y)
            step_alone = (time.perf_counter() - t) / len(keys)
            out.append((alone * 1e3, statistics.mean(loads) * 1e3, step_alone * 1e3, statistics.mean(steps) * 1e3))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipeline", default="tokenizer", help="a module of bench/pipelines (tokenizer, features, ...)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--gap-s", type=float, default=3.0, help="seconds between the fresh processes")
    ap.add_argument("--alone", action="store_true", help=argparse.SUPPRESS)  # one fresh process's reading
    args = ap.parse_args()
    if args.alone:
        print(f"{rounds(args.pipeline, 1, with_step=False)[0][0]:.1f}")
        return 0
    print(f"# {args.pipeline}, ms a batch, one thread")
    for i, (alone, between, step, step_between) in enumerate(rounds(args.pipeline, args.rounds)):
        print(
            f"round {i}: load back to back {alone:.1f}, between steps {between:.1f}; "
            f"step alone {step:.1f}, between loads {step_between:.1f}",
            flush=True,
        )
    readings = []
    for i in range(args.processes):
        if i:
            time.sleep(args.gap_s)
        readings.append(
            float(
                subprocess.run(
                    [sys.executable, __file__, "--alone", "--pipeline", args.pipeline],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()[-1]
            )
        )
    print(
        f"load back to back in {args.processes} fresh processes: {', '.join(f'{r:.1f}' for r in readings)} "
        f"(max/min {max(readings) / min(readings):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
