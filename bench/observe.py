"""What watching a loop costs the loop (engine/observe/): a plain loop against the same loop under watch(), paired.

    .venv/bin/python bench/observe.py [--step-ms 5] [--steps 400] [--repeats 7]

One process, torch on one intra-op thread, a DataLoader over in-memory tensors (num_workers=0, so the loader's own
time is small and the observer's shows), and a fixed amount of torch work per step calibrated to about --step-ms.
Each repeat runs one epoch plain and one epoch watched, in a random order, after a warm-up of each (the watched
stream's start-up: its RunLog, sampler, host fingerprint). Timed from the loop's first request to its last step's
end, so the epoch-end work (the StopIteration; under watch(), the RunLog's epoch line and storing the run) is
printed apart. It prints the median per-step time of each and the watched/plain ratio per pair with its median:
the issue's target is at most 1.01 at a 5 ms step. Take it on a quiet machine; the store is a temporary file.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from engine import watch  # noqa: E402


def _work(n: int, a: torch.Tensor) -> None:
    for _ in range(n):
        a = torch.tanh(a @ a)


def _calibrate(step_ms: float, a: torch.Tensor) -> int:
    """Matmuls per step for about step_ms of work."""
    t = time.perf_counter()
    _work(200, a)
    per = (time.perf_counter() - t) / 200
    return max(1, round(step_ms / 1000 / per))


def _epoch(batches, n: int, a: torch.Tensor) -> tuple[float, float, int]:
    """(seconds from the first request to the last step's end, seconds of the epoch's end, steps)."""
    t0 = time.perf_counter()
    end, steps = t0, 0
    for x, _y in batches:
        _work(n, a + x[:1, :1].sum() * 0)
        end, steps = time.perf_counter(), steps + 1
    return end - t0, time.perf_counter() - end, steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    a = torch.randn(64, 64) / 8
    n = _calibrate(args.step_ms, a)
    data = TensorDataset(torch.randn(args.steps * 8, 16), torch.zeros(args.steps * 8, dtype=torch.long))
    loader = DataLoader(data, batch_size=8)
    with tempfile.TemporaryDirectory() as tmp:
        watched = watch(loader, name="bench-observe", db=Path(tmp) / "bench.duckdb")
        _epoch(loader, n, a), _epoch(watched, n, a)  # warm-up: the stream starts here
        rng, rows = random.Random(0), []
        for _ in range(args.repeats):
            order = ["plain", "watched"]
            rng.shuffle(order)
            got = {kind: _epoch(loader if kind == "plain" else watched, n, a) for kind in order}
            rows.append(got)
        watched.close()  # stored before the temporary store goes
    per_step = {k: [r[k][0] / r[k][2] * 1000 for r in rows] for k in ("plain", "watched")}
    ratios = [w / p_ for w, p_ in zip(per_step["watched"], per_step["plain"])]
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 intra-op thread; "
        f"{args.steps} steps of {n} matmuls, {args.repeats} pairs"
    )
    for kind in ("plain", "watched"):
        ends = [r[kind][1] * 1000 for r in rows]
        print(
            f"{kind:8s} median step {statistics.median(per_step[kind]):.3f} ms · epoch end "
            f"{statistics.median(ends):.1f} ms"
        )
    print("watched / plain per pair: " + " ".join(f"{r:.4f}" for r in ratios))
    print(f"median watched / plain: {statistics.median(ratios):.4f} (target: at most 1.01 at a 5 ms step)")


if __name__ == "__main__":
    main()
