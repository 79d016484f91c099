"""Start-up benchmark: what a run costs beyond its epochs, started cold vs forked from a warm parent, by phase.

    .venv/bin/python bench/startup.py [--runs 20] [--workers 0] [--device cpu|cuda]

A sweep of N tiny runs (tensor workload, 32 samples, 1 epoch, no warm-up epoch, no bound) through the real
engine.run.runner.launch, cold and warm interleaved (cold, warm, warm, cold, ...) in this one process so that drift
of the machine hits both alike, into a temporary store. Per run: overhead = launch()'s wall time minus the
wall time of the epochs it stored, split by the RunLog's timestamps into
    spawn   launch() called -> the child's start event (interpreter + imports, or fork + reading the config)
    setup   start event -> the first epoch begins (dataset, model, loader)
    finish  last epoch -> end event (sampler stop, summary)
    reap    end event -> launch() returns (the child exits, the parent tails, ingests into DuckDB)
and, from the run's own `startup` event (engine/measure/startup.py), launch to first batch by phase:
    imports      interpreter and imports (a warm fork: the fork); cuda: the CUDA context (--device cuda)
    build        config, host fingerprint, sampler, dataset, model (torch.optim imports torch._dynamo), loader
    first_batch  the first epoch's time to first batch
Prints p50/p95 of each for cold and warm and the ratio of median overheads. Target (issue 12): warm <= 0.5 s.
The warm parent's own start (once per sweep) is printed apart.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import RunConfig  # noqa: E402
from engine.run.runner import launch  # noqa: E402
from engine.run.warm import WarmParent  # noqa: E402

PHASES = ("overhead", "spawn", "setup", "finish", "reap")
STARTUP = {
    "startup": "startup_s",
    "imports": "startup_imports_s",
    "cuda": "startup_cuda_s",
    "build": "startup_build_s",
    "first_batch": "startup_first_batch_s",
}  # the startup event's phases, as this table names them


def one(cfg: RunConfig, db: Path, warm: WarmParent | None) -> dict[str, float]:
    t0 = time.time()
    result = launch(cfg, db=db, warm=warm)
    t_back = time.time()
    if result.status != "done" or result.warm != (warm is not None):
        raise SystemExit(f"run {result.run_id}: {result.status} warm={result.warm}: {result.error}")
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    epochs = [e for e in events if e["type"] == "epoch"]
    start = next(e["t"] for e in events if e["type"] == "start")
    end = next(e["t"] for e in events if e["type"] == "end")
    phases = next(e for e in events if e["type"] == "startup")
    return {
        "overhead": t_back - t0 - sum(e["wall_s"] for e in epochs),
        "spawn": start - t0,
        "setup": epochs[0]["t"] - epochs[0]["wall_s"] - start,
        "finish": end - epochs[-1]["t"],
        "reap": t_back - end,
        **{name: phases[key] for name, key in STARTUP.items()},
    }


def _cells(xs: list[float | None]) -> str:
    """p50 and p95 of a phase, or dashes where the runs did not time it (CUDA on a CPU run)."""
    xs = [x for x in xs if x is not None]
    return f"{pct(xs, 0.5):11.3f}{pct(xs, 0.95):11.3f}" if xs else f"{'-':>11}{'-':>11}"


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20, help="runs of each kind (default 20)")
    p.add_argument("--workers", type=int, default=0, help="loader workers (0: the sync loader)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda: the CUDA phase is timed only there")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    os.environ.pop("LOADERLAB_WARM", None)
    cfg = RunConfig.from_dict(
        dict(
            workload="tensor",
            n_samples=32,
            image_size=8,
            width=8,
            epochs=1,
            warmup_epochs=0,
            batch_size=8,
            bound=False,
            loader="processes" if args.workers else "sync",
            workers=args.workers,
            device=args.device,
        )
    )
    times: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "startup.duckdb"
        t0 = time.perf_counter()
        with WarmParent() as warm:
            ready = warm.status()  # waits for its imports: the once-per-sweep cost
            print(
                f"warm parent pid {ready['pid']} ready in {time.perf_counter() - t0:.2f} s "
                f"({ready['threads']} threads, cuda_initialized={ready['cuda_initialized']})"
            )
            for i in range(2 * args.runs):
                kind = "warm" if i % 4 in (1, 2) else "cold"  # cold, warm, warm, cold: neither always goes first
                times[kind].append(one(cfg, db, warm if kind == "warm" else None))
    print(
        f"{args.runs} runs each, tensor 32 samples, 1 epoch, {args.workers} workers, {args.device}, "
        f"{os.cpu_count()} cores"
    )
    print(f"{'seconds':12}" + "".join(f"{k + ' p50':>11}{k + ' p95':>11}" for k in ("cold", "warm")))
    for phase in (*PHASES, *STARTUP):
        if phase == "startup":
            print("launch to first batch, by phase (the run's startup event):")
        print(f"{phase:12}" + "".join(_cells([r[phase] for r in times[k]]) for k in ("cold", "warm")))
    med = {k: statistics.median(r["overhead"] for r in times[k]) for k in times}
    met = "met" if med["warm"] <= 0.5 else "NOT met"
    print(
        f"overhead p50: cold {med['cold']:.3f} s, warm {med['warm']:.3f} s, "
        f"cold/warm {med['cold'] / med['warm']:.1f}x; target warm <= 0.5 s: {met}"
    )


if __name__ == "__main__":
    main()
