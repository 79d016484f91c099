"""What the system sampler costs the run it measures (engine/measure/sampler.py).

    .venv/bin/python bench/sampler.py [--hz 10] [--seconds 3] [--repeats 5] [--workers 2]

A process that imported torch, with `--workers` forked children (as a processes loader's), runs a fixed CPU
workload (a small CNN's training steps on one intra-op thread, as a loader-bound run would) for --seconds, three
ways interleaved --repeats times: no sampler, the sampler reading memory at every tick (before), and the sampler
as it is (memory at most every SLOW_EVERY_S). For each it prints the sampler thread's CPU per tick and the
median step time, and the steps' slowdown against no sampler. Take it on a quiet machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402
import torch  # noqa: E402

from engine.measure import sampler as sampler_module  # noqa: E402
from engine.measure import fingerprint
from engine.runlog import RunLog  # noqa: E402


def _busy(conn) -> None:
    """A loader worker's stand-in: CPU work until told to stop."""
    while not conn.poll():
        sum(i * i for i in range(10_000))


def _steps(seconds: float) -> list[float]:
    """Per-step wall seconds of a small CNN trained on one thread for `seconds`."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 10),
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(64, 3, 48, 48), torch.randint(0, 10, (64,))
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        out.append(time.perf_counter() - t0)
    return out


def _thread_cpu(native_id: int) -> float:
    for t in psutil.Process().threads():
        if t.id == native_id:
            return t.user_time + t.system_time
    return 0.0


def _one(kind: str, hz: float, seconds: float, folder: Path) -> tuple[float, float | None]:
    """(median step s, sampler CPU s per tick or None)."""
    if kind == "off":
        return statistics.median(_steps(seconds)), None
    sampler_module.SLOW_EVERY_S = 0.0 if kind == "before" else DEFAULT_SLOW_EVERY_S
    with RunLog(folder / f"{kind}-{time.monotonic_ns()}") as log, sampler_module.Sampler(log, hz=hz) as s:
        steps = _steps(seconds)
        cpu = _thread_cpu(s._thread.native_id)
        ticks = max(1, s.n)
    return statistics.median(steps), cpu / ticks


DEFAULT_SLOW_EVERY_S = sampler_module.SLOW_EVERY_S


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ctx = multiprocessing.get_context("fork")
    pipes = [ctx.Pipe() for _ in range(args.workers)]
    children = [ctx.Process(target=_busy, args=(c,)) for _, c in pipes]
    for c in children:
        c.start()
    folder = Path(tempfile.mkdtemp())
    kinds = ("off", "before", "now")
    steps: dict[str, list[float]] = {k: [] for k in kinds}
    ticks: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        _steps(1.0)  # warm-up
        for _ in range(args.repeats):
            for kind in kinds:
                step, tick = _one(kind, args.hz, args.seconds, folder)
                steps[kind].append(step)
                if tick is not None:
                    ticks[kind].append(tick)
    finally:
        for parent, _ in pipes:
            parent.send("stop")
        for c in children:
            c.join()
    host = fingerprint()
    print(
        f"machine: {host['cpu_model']}, torch {host['torch_version']}; a process that imported torch + "
        f"{args.workers} busy forked children; {args.hz:g} Hz, {args.seconds:g} s x {args.repeats} interleaved\n"
    )
    print("| sampler | CPU per tick ms | median step ms | step vs no sampler |")
    print("| --- | ---: | ---: | ---: |")
    off = statistics.median(steps["off"])
    names = {
        "off": "off (sample_hz 0)",
        "before": "tree and memory every tick (before)",
        "now": f"tree and memory every {DEFAULT_SLOW_EVERY_S:g} s (now)",
    }
    for kind in kinds:
        step = statistics.median(steps[kind])
        tick = f"{statistics.median(ticks[kind]) * 1e3:.2f}" if ticks[kind] else "-"
        print(f"| {names[kind]} | {tick} | {step * 1e3:.2f} | {step / off:.3f}x |")


if __name__ == "__main__":
    main()
