"""SPDL as its users run it, beside DataLoader and torchdata.nodes: the jpeg workload under the spdl loader with
SPDL's own decoders (spdl.io, FFmpeg, GIL-free) and with PIL's (the dataset's __getitem__, LOADERLAB_SPDL_DECODERS=0),
DataLoader (`processes`) and torchdata.nodes (`threads`), all at the same workers: loader only, then with a model.

    .venv/bin/python bench/spdl_decoders.py [--workers 8] [--n-samples 4096] [--image-size 64] [--repeats 7]
                                            [--epochs 3] [--model cnn] [--device cpu|cuda] [--no-model]

Loader only: one fresh process per measurement (bench/_loaders_versus.py's children: one untimed epoch, then the
median of --epochs timed ones, the tree's CPU-seconds and peak PSS). With a model: one real run per measurement
(`engine run`, 1 warm-up + --epochs steady epochs, its median steady epoch). Each repeat runs every setting, in a
rotated order; per setting the median with its exact 95 % interval, and each one's ratio to DataLoader with its
interval (engine.analysis.stats.compare). Where spdl_io's FFmpeg libraries do not load, the "spdl + decoders" rows
are left out and the script says so (requirements.txt names the Debian packages).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _loaders_versus as versus  # noqa: E402 (bench/, beside this script)

from engine.analysis import stats  # noqa: E402
from engine.measure import fingerprint  # noqa: E402
from engine.workloads._spdl_decode import OFF_ENV, available  # noqa: E402

# label -> (loader, SPDL's decoders on)
SETTINGS = {
    "DataLoader": ("processes", False),
    "torchdata.nodes": ("threads", False),
    "spdl + decoders": ("spdl", True),
    "spdl (PIL)": ("spdl", False),
}


def _with(decoders: bool, measure: Any) -> Any:
    """measure() with SPDL's decoders on or off in the children it starts (they inherit this environment)."""
    before = os.environ.get(OFF_ENV)
    os.environ[OFF_ENV] = "1" if decoders else "0"
    try:
        return measure()
    finally:
        os.environ.pop(OFF_ENV, None) if before is None else os.environ.__setitem__(OFF_ENV, before)


def _run_epoch(fields: dict[str, Any], db: Path) -> float:
    """One real run (a subprocess, as a user's): its median steady epoch."""
    from engine.advice.tune import _steady_walls
    from engine.config import RunConfig
    from engine.run.runner import launch

    run = launch(RunConfig.from_dict(fields), db=db)
    walls = _steady_walls(run.run_dir)
    if not walls:
        raise RuntimeError(f"{fields['loader']} run {run.run_id} ended {run.status}")
    return statistics.median(walls)


def _report(title: str, got: dict[str, list[float]]) -> None:
    print(f"\n{title}: medians over repeats [95% CI of the median]; DataLoader / this (>1: this is faster)")
    base = got["DataLoader"]
    for label, values in got.items():
        med, lo, hi = stats.median_ci(values)
        cell = f"{med:.3f} s [{stats.ci_text(lo, hi, len(values), '{:.3f}')}]"
        if label == "DataLoader":
            print(f"  {label:<18}{cell}")
            continue
        c = stats.compare(base, values)
        ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], len(values), "{:.2f}", "x")
        print(f"  {label:<18}{cell:<36}{c['speedup']:.2f}x [{ci}] {c['difference']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--n-samples", type=int, default=4096)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--no-model", action="store_true", help="loader only")
    args = ap.parse_args()
    labels = [k for k in SETTINGS if SETTINGS[k][1] is False or available()]
    if len(labels) < len(SETTINGS):
        print("spdl_io's decoders do not load here (spdl_io or FFmpeg's libraries missing): 'spdl + decoders' left out")
    base = {
        "workload": "jpeg",
        "n_samples": args.n_samples,
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "workers": args.workers,
        "seed": 0,
    }
    print(
        f"machine {fingerprint()['machine']}; jpeg {args.n_samples} x {args.image_size} px, batch {args.batch_size}, "
        f"{args.workers} workers, {args.repeats} repeats, {args.epochs} timed epochs"
    )
    from engine.config import RunConfig
    from engine.workloads import build_dataset

    build_dataset(RunConfig.from_dict({**base, "loader": "sync", "workers": 0}))  # files before anything is timed
    loader_only: dict[str, list[float]] = {k: [] for k in labels}
    with_model: dict[str, list[float]] = {k: [] for k in labels}
    db = Path(tempfile.mkdtemp(prefix="spdl-decoders-")) / "bench.duckdb"
    for r in range(args.repeats):
        order = labels[r % len(labels) :] + labels[: r % len(labels)]  # rotated: no setting always runs first
        for label in order:
            loader, decoders = SETTINGS[label]
            setting = {**base, "loader": loader, "device": "cpu"}
            loader_only[label].append(_with(decoders, lambda s=setting: versus._measure(s, args.epochs))["epoch_s"])
            if not args.no_model:
                fields = {
                    **base,
                    "loader": loader,
                    "model": args.model,
                    "device": args.device,
                    "threads": 1,
                    "epochs": 1 + args.epochs,
                    "bound": False,
                    "tag": "bench-spdl",
                }
                with_model[label].append(_with(decoders, lambda f=fields: _run_epoch(f, db)))
        print(f"  repeat {r + 1}/{args.repeats} done", flush=True)
    _report("loader only (no model)", loader_only)
    if not args.no_model:
        _report(f"with {args.model} on {args.device} (1 intra-op thread)", with_model)


if __name__ == "__main__":
    main()
