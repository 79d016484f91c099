"""How steady this machine's speed is: the same small work timed again and again, as the probe and a run would
see it minutes apart. A prediction from a few seconds of probe can be no closer to a run than the machine's own
drift between the two; this bench says how large that is here.

    .venv/bin/python bench/machine_drift.py [--seconds 120] [--every 0.25]

Each tick times two fixed units on one thread: pure Python (a loop that holds the GIL, as a tokenizer does) and a
torch matmul (C, one intra-op thread). Per unit it prints the median, the 10th and 90th percentiles, the slowest
over the fastest, and how long slow stretches last (ticks in a row at least 1.15x the median): a stretch longer
than a probe's few seconds is one a probe can sit inside. Nothing is stored; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

SLOW = 1.15  # a tick at least this much slower than the median is in a slow stretch


def _python(n: int = 60_000) -> float:
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += (i * 7) % 13
    return time.perf_counter() - t0


def _matmul(a: torch.Tensor) -> float:
    t0 = time.perf_counter()
    for _ in range(4):
        torch.mm(a, a)
    return time.perf_counter() - t0


def _stretches(times: list[float], every: float) -> list[float]:
    """Seconds each run of slow ticks (>= SLOW x the median) lasted."""
    mid, out, run = statistics.median(times), [], 0
    for t in times + [0.0]:
        if t >= SLOW * mid:
            run += 1
        elif run:
            out.append(run * every)
            run = 0
    return out


def _line(name: str, times: list[float], every: float) -> str:
    ms = sorted(t * 1e3 for t in times)
    q = statistics.quantiles(ms, n=10)
    slow, median = _stretches(times, every), statistics.median(times)
    stretch = (
        f"{len(slow)} slow stretches, longest {max(slow):.1f} s, median {statistics.median(slow):.2f} s"
        if slow
        else "no slow stretch"
    )
    return (
        f"{name:>8}: median {statistics.median(ms):.2f} ms, p10 {q[0]:.2f}, p90 {q[-1]:.2f} "
        f"(p90/p10 {q[-1] / q[0]:.2f}), slowest/fastest {ms[-1] / ms[0]:.2f}; "
        f"{100 * sum(t >= SLOW * median for t in times) / len(times):.0f} % of ticks slow; "
        f"{stretch}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--every", type=float, default=0.25, help="seconds between ticks")
    args = ap.parse_args()
    torch.set_num_threads(1)
    a = torch.randn(192, 192)
    _python(), _matmul(a)  # untimed: first use
    py, mm = [], []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        tick = time.monotonic()
        py.append(_python())
        mm.append(_matmul(a))
        time.sleep(max(0.0, args.every - (time.monotonic() - tick)))
    print(f"# {len(py)} ticks over {args.seconds:.0f} s, one every {args.every} s, one thread")
    print(_line("python", py, args.every))
    print(_line("matmul", mm, args.every))
    return 0


if __name__ == "__main__":
    sys.exit(main())
