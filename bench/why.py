"""The "why" table of issue 20: each setting's epoch, lower bound, efficiency and verdict, through real runs.

    .venv/bin/python bench/why.py [--n-samples 512] [--image-size 48] [--epochs 4] [--db /tmp/bench/why.duckdb]

jpeg + cnn (width 16), one run per row, run one after another through `engine.run.runner.launch` (a subprocess
each, calibrated as every run is). Beside the stored bound, the old one (max(loader, compute) + TTFB, as if
loader workers and the model each had the machine to itself) shows what the cores change. Take it on a quiet
machine: a figure taken while anything else runs says nothing about this machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import RunConfig  # noqa: E402
from engine.measure.host import fingerprint  # noqa: E402
from engine.measure.capacity import usable_cpus  # noqa: E402
from engine.run.runner import launch  # noqa: E402
from engine.store import get_run  # noqa: E402

# (loader, workers, threads): threads 0 = torch's default (all cores)
SETTINGS = [("sync", 0, 0), ("processes", 2, 0), ("sync", 0, 1), ("processes", 2, 1), ("processes", 1, 1),
            ("threads", 2, 1), ("prefetch", 0, 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-samples", type=int, default=512)
    ap.add_argument("--image-size", type=int, default=48)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args()
    db = args.db or Path(tempfile.mkdtemp()) / "why.duckdb"
    host = fingerprint()
    print(f"machine: {host['cpu_model']}, {usable_cpus():g} usable cores, torch {host['torch_version']}; "
          f"jpeg {args.n_samples} x {args.image_size} px + cnn width 16, {args.epochs} epochs (1 warm-up)")
    print(f"{'loader':>10} {'workers':>7} {'threads':>7} {'epoch s':>8} {'old bound':>9} {'old eff':>7} "
          f"{'bound':>7} {'eff':>5}  verdict: what would help")
    for loader, workers, threads in SETTINGS:
        cfg = RunConfig(workload="jpeg", model="cnn", width=16, n_samples=args.n_samples, image_size=args.image_size,
                        epochs=args.epochs, loader=loader, workers=workers, threads=threads, device="cpu",
                        tag="bench-why")
        result = launch(cfg, db=db)
        run = get_run(result.run_id, db=db)
        if result.status != "done" or run.get("efficiency") is None:
            print(f"{loader:>10} {workers:>7} {threads or 'auto':>7}  {result.status}: {result.error}")
            continue
        old = max(run["loader_only_s"], run["compute_only_s"]) + (run["bound_s"] - _terms(run))
        print(f"{loader:>10} {workers:>7} {threads or 'auto':>7} {run['epoch_s']:>8.3f} {old:>9.3f} "
              f"{old / run['epoch_s']:>7.2f} {run['bound_s']:>7.3f} {run['efficiency']:>5.2f}  "
              f"{run['verdict']}: {run['verdict_help']}")
    print(f"store: {db}")


def _terms(run: dict) -> float:
    """The bound less its TTFB: the phase's largest term (one phase in single mode)."""
    return max(run["loader_only_s"], run["compute_only_s"], run["cpu_bound_s"],
               run["loader_only_s"] + run["compute_only_s"] if run["loader"] == "sync" else 0.0)


if __name__ == "__main__":
    main()
