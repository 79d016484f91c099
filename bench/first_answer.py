"""From a fresh clone to a verified answer for your own pipeline: how long it takes, step by step.

    .venv/bin/python bench/first_answer.py [--budget 5m] [--keep DIR]

What a new user does, timed with a wall clock around each real command:
    clone    git clone of this checkout into a temporary folder
    install  `make install` there: a fresh .venv and the pinned requirements (pip's cache, if any, is used,
             as it would be on the user's machine; the line says whether one was there)
    tune     `python -m engine tune` on the own-pipeline example (examples/own_pipeline: JPEGs decoded and
             augmented with PIL/numpy, a small ResNet), with the user's setup as the baseline:
             successive halving over the loaders, then the best confirmed against the baseline by
             interleaved runs, whose medians give the speedup's 95% interval
The answer is the tune's own report (printed whole). Run it on a quiet machine: on 2 cores anything else
running is in the figure. Issue 12's goal: the total within 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = {"n_samples": 512, "num_classes": 8, "image_size": 64, "width": 16, "depth": 2}  # examples/own_pipeline


def step(name: str, cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    print(f"[{name}] {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"[{name}] failed (exit {proc.returncode}) after {took:.0f} s:\n{proc.stdout[-3000:]}")
    print(f"[{name}] {took:.1f} s", flush=True)
    return took, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", default="5m", help="tune's budget (default 5m)")
    ap.add_argument(
        "--baseline",
        default="loader=processes,workers=2,batch_size=32",
        help="the user's setup (default: a DataLoader with 2 worker processes, batch 32)",
    )
    ap.add_argument("--keep", help="clone into DIR and keep it (default: a temporary folder, removed)")
    args = ap.parse_args()

    where = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="loaderlab-first-"))
    where.mkdir(parents=True, exist_ok=True)
    clone = where / "loaderlab"
    pip_cache = Path(os.environ.get("PIP_CACHE_DIR", Path.home() / ".cache" / "pip"))
    cached = pip_cache.is_dir() and any(pip_cache.iterdir())
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERLAB_")}  # the clone's own store
    times: dict[str, float] = {}
    try:
        times["clone"], _ = step("clone", ["git", "clone", "-q", str(ROOT), str(clone)], where)
        times["install"], _ = step("install", ["make", "install"], clone, env)
        sets = [a for k, v in EXAMPLE.items() for a in ("--set", f"{k}={v}")]
        times["tune"], out = step(
            "tune",
            [
                ".venv/bin/python",
                "-m",
                "engine",
                "tune",
                "--quiet",
                "--workload",
                "examples.own_pipeline.data:build",
                "--model",
                "examples.own_pipeline.nets:resnet",
                "--baseline",
                args.baseline,
                "--budget",
                args.budget,
                *sets,
            ],
            clone,
            env,
        )
    finally:
        if not args.keep:
            shutil.rmtree(where, ignore_errors=True)
    print("\n" + out.strip())
    total = sum(times.values())
    print(
        f"\nfresh clone -> verified answer: {total / 60:.1f} min "
        f"(clone {times['clone']:.0f} s, install {times['install']:.0f} s "
        f"{'with' if cached else 'without'} pip's cache, tune {times['tune']:.0f} s of a {args.budget} budget); "
        f"{os.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
