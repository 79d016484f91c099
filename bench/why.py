"""The "why" table of issue 20: each setting's epoch, lower bound, efficiency and verdict, through real runs.

    .venv/bin/python bench/why.py [--pipeline jpeg|tokenizer|spectrogram|storage[,...]] [--n-samples 512]
        [--image-size 48] [--epochs 4] [--db /tmp/bench/why.duckdb]

jpeg + cnn (width 16) by default; --pipeline also takes the unseen pipelines of bench/pipelines/ (issue 25's
check: none of their runs reads overhead-bound, none has an efficiency above 1, and threads with 4 workers
read storage-like objects at least 1.8x faster than sync). One run per row, run one after another through
`engine.run.runner.launch` (a subprocess each, calibrated as every run is). Beside the stored bound, the old one
(max(loader, compute) + TTFB, as if loader workers and the model each had the machine to itself) shows what the
cores change. Take it on a quiet machine: a figure taken while anything else runs says nothing about this machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import RunConfig  # noqa: E402
from engine.measure import ABOVE_ONE, fingerprint, usable_cpus
from engine.run.runner import launch  # noqa: E402
from engine.store import get_run  # noqa: E402

# (loader, workers, threads): threads 0 = torch's default (all cores)
SETTINGS = [
    ("sync", 0, 0),
    ("processes", 2, 0),
    ("sync", 0, 1),
    ("processes", 2, 1),
    ("processes", 1, 1),
    ("threads", 2, 1),
    ("prefetch", 0, 1),
]
UNSEEN_SETTINGS = [*SETTINGS, ("threads", 4, 1), ("prefetch", 0, 0)]
PIPELINES = ("jpeg", "tokenizer", "spectrogram", "storage")


def _fields(name: str, args: argparse.Namespace) -> dict:
    if name == "jpeg":
        return {"workload": "jpeg", "model": "cnn", "width": 16, "image_size": args.image_size}
    return {"workload": f"bench.pipelines.{name}:build", "model": f"bench.pipelines.{name}:model"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", default="jpeg", help=f"one or more of {', '.join(PIPELINES)}, joined by commas")
    ap.add_argument("--n-samples", type=int, default=512)
    ap.add_argument("--image-size", type=int, default=48, help="jpeg only")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args()
    names = [n.strip() for n in args.pipeline.split(",") if n.strip()]
    if not names or any(n not in PIPELINES for n in names):
        sys.exit(f"--pipeline: choose from {', '.join(PIPELINES)}, joined by commas; got {args.pipeline!r}")
    db = args.db or Path(tempfile.mkdtemp()) / "why.duckdb"
    host = fingerprint()
    print(
        f"machine: {host['cpu_model']}, {usable_cpus():g} usable cores, torch {host['torch_version']}; "
        f"{args.n_samples} samples, {args.epochs} epochs (1 warm-up)"
    )
    runs = []
    for name in names:
        print(f"\n{name}: {_fields(name, args)['workload']} + {_fields(name, args)['model']}")
        print(
            f"{'loader':>10} {'workers':>7} {'threads':>7} {'epoch s':>8} {'old bound':>9} {'old eff':>7} "
            f"{'bound':>7} {'eff':>5}  verdict: what would help"
        )
        for loader, workers, threads in SETTINGS if name == "jpeg" else UNSEEN_SETTINGS:
            cfg = RunConfig(
                **_fields(name, args),
                n_samples=args.n_samples,
                epochs=args.epochs,
                loader=loader,
                workers=workers,
                threads=threads,
                device="cpu",
                tag="bench-why",
            )
            result = launch(cfg, db=db)
            run = get_run(result.run_id, db=db)
            if result.status != "done" or run.get("efficiency") is None:
                print(f"{loader:>10} {workers:>7} {threads or 'auto':>7}  {result.status}: {result.error}")
                continue
            runs.append((name, loader, workers, threads, run))
            old = max(run["loader_only_s"], run["compute_only_s"]) + (run["bound_s"] - _terms(run))
            print(
                f"{loader:>10} {workers:>7} {threads or 'auto':>7} {run['epoch_s']:>8.3f} {old:>9.3f} "
                f"{old / run['epoch_s']:>7.2f} {run['bound_s']:>7.3f} {run['efficiency']:>5.2f}  "
                + (f"{run['verdict']}: {run['verdict_help']}" if run["verdict"] else f"efficiency {ABOVE_ONE}")
            )
    print()
    for line in _checks(runs):
        print(line)
    print(f"store: {db}")


def _checks(runs: list[tuple]) -> list[str]:
    """Issue 25's checks over the runs made: overhead-bound and efficiency above 1, and storage's threads/4."""
    overhead = [f"{n} {lo}/{w}/{t}" for n, lo, w, t, r in runs if r["verdict"] == "overhead-bound"]
    above = [f"{n} {lo}/{w}/{t} ({r['efficiency']:.2f})" for n, lo, w, t, r in runs if r["efficiency"] > 1.0]
    lines = [
        f"overhead-bound: {len(overhead)} of {len(runs)} runs" + (f" ({', '.join(overhead)})" if overhead else ""),
        f"efficiency above 1: {len(above)} of {len(runs)} runs" + (f" ({', '.join(above)})" if above else ""),
    ]
    epoch = {(lo, w, t): r["epoch_s"] for n, lo, w, t, r in runs if n == "storage"}
    if ("threads", 4, 1) in epoch and ("sync", 0, 1) in epoch:
        ratio = epoch[("sync", 0, 1)] / epoch[("threads", 4, 1)]
        lines.append(f"storage: threads 4 workers {ratio:.2f}x faster than sync (1 thread each; goal >= 1.8x)")
    return lines


def _terms(run: dict) -> float:
    """The bound less its TTFB: the phase's largest term (one phase in single mode)."""
    return max(
        run["loader_only_s"],
        run["compute_only_s"],
        run["cpu_bound_s"],
        run["loader_only_s"] + run["compute_only_s"] if run["loader"] == "sync" else 0.0,
    )


if __name__ == "__main__":
    main()
