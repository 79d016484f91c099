"""Concurrency benchmark: how many samples/s the modes get out of this machine, as ratios side by side.

    .venv/bin/python bench/concurrency.py --quick          # a fast CPU pass (about a minute on 2 cores)
    .venv/bin/python bench/concurrency.py [--device cuda] [--repeats 3]

For mlp and cnn at a small and a large width:
  N models   sequential = N x the single-model time (its aggregate samples/s is single's), against
             fused with n_models = N; at N = 2 also dual-sequential (measured), dual-threads, dual-processes
             and, on CUDA, dual-streams, each as a ratio to dual-sequential
  split      n_stages = 2 on one device, micro-batches M, as a ratio to single (the pipeline's overhead)
  ddp        world_size 1 and 2, as a ratio to single
Throughput is the run's aggregate: samples of all models / wall time from the first start to the last
end of the steady-state epochs (engine/modes/_common.py throughput), the median over --repeats.
Every run is one mode's loop run in this process (process modes spawn their children from here); the
runner's subprocess start-up is left out because it is paid once per run, not per epoch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import devices  # noqa: E402
from engine.config import ConfigError, RunConfig  # noqa: E402
from engine.measure import fingerprint
from engine.modes import RunContext  # noqa: E402
from engine.modes._common import throughput  # noqa: E402
from engine.registry import MODES  # noqa: E402
from engine.runlog import RunLog, read_events  # noqa: E402


def samples_per_s(base: dict[str, Any], repeats: int, **fields: Any) -> float | None:
    """Median aggregate samples/s of one config over `repeats` runs; None if the config is refused."""
    try:
        cfg = RunConfig.from_dict({**base, **fields})
    except ConfigError as e:
        print(f"  (skipped {fields}: {e})")
        return None
    out = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d, RunLog(d) as log:
            MODES[cfg.mode].run(RunContext(cfg=cfg, log=log, device=devices.resolve(cfg.device)))
            events = [e for e in read_events(d) if e["type"] == "epoch"]
        out.append(throughput(events)["aggregate_samples_per_s"])
    return statistics.median(out)


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}x" if a and b else "     -"


def bench_models(base: dict[str, Any], args: argparse.Namespace, cuda: bool) -> None:
    widths = {"mlp": (32, 512), "cnn": (8, 32)}
    for model in ("mlp", "cnn"):
        for width in widths[model]:
            cfg = {**base, "model": model, "width": width}
            single = samples_per_s(cfg, args.repeats, mode="single")
            print(f"\n{model} width {width}: single {single:,.0f} samples/s")
            print(f"  {'N':>3}  {'sequential':>12}  {'fused':>12}  {'fused/seq':>9}")
            for n in args.n_models:
                fused = samples_per_s(cfg, args.repeats, mode="fused", n_models=n) if n > 1 else single
                print(f"  {n:>3}  {single:>12,.0f}  {fused or 0:>12,.0f}  {ratio(fused, single):>9}")
            dual_seq = samples_per_s(cfg, args.repeats, mode="dual-sequential")
            print(
                f"  N=2: dual-sequential {dual_seq or 0:,.0f} samples/s ({ratio(dual_seq, single).strip()} of single, "
                f"ideally 1x); the concurrent dual modes as ratios to it:"
            )
            modes = ["dual-threads", "dual-processes"] + (["dual-streams"] if cuda else [])
            for mode in modes:
                extra = {"dual_data": "shared"} if mode == "dual-threads" else {}
                value = samples_per_s(cfg, args.repeats, mode=mode, **extra)
                print(f"    {mode:<15} {value or 0:>12,.0f}  {ratio(value, dual_seq)}")


def bench_split_ddp(base: dict[str, Any], args: argparse.Namespace) -> None:
    cfg = {**base, "model": "cnn", "width": 16, "depth": 3}
    single = samples_per_s(cfg, args.repeats, mode="single")
    print(f"\nsplit, cnn width 16, 2 stages on one device (single {single:,.0f} samples/s):")
    for m in args.micro_batches:
        value = samples_per_s(cfg, args.repeats, mode="split", n_stages=2, micro_batches=m)
        print(f"  M={m:<3} {value or 0:>12,.0f}  {ratio(value, single)}")
    print(f"\nddp, cnn width 16 (single {single:,.0f} samples/s):")
    for world in (1, 2):
        value = samples_per_s(cfg, args.repeats, mode="ddp", world_size=world)
        print(f"  world_size={world} {value or 0:>12,.0f}  {ratio(value, single)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="small data, N in {1,2,4}, M in {1,2,4}, one repeat, 1 intra-op thread unless --threads",
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n-samples", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None, help="epochs per run, the first one warm-up")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="intra-op threads for this process (process modes give each child its share); "
        "1 keeps a busy machine's OpenMP barriers from dominating the figures",
    )
    args = ap.parse_args()
    if args.threads or args.quick:
        torch.set_num_threads(args.threads or 1)
    quick = args.quick
    args.repeats = args.repeats or (1 if quick else 3)
    args.n_models = [1, 2, 4] if quick else [1, 2, 4, 8, 16]
    args.micro_batches = [1, 2, 4] if quick else [1, 2, 4, 8]
    base = {
        "workload": "tensor",
        "image_size": 16 if quick else 32,
        "n_samples": args.n_samples or (512 if quick else 4096),
        "epochs": args.epochs or 3,
        "batch_size": 64,
        "device": args.device,
        "bound": False,
        "sample_hz": 0.0,
    }
    host = fingerprint()
    cuda = devices.resolve(args.device).type == "cuda"
    print(
        f"machine: {host['cpu_model']} ({host['cores']} cores), GPU: {host['gpu_name'] or 'none'}, "
        f"torch {host['torch_version']}, device {args.device}, intra-op threads {torch.get_num_threads()}"
    )
    print(
        f"workload: tensor {base['image_size']}px, {base['n_samples']} samples, batch 64, {base['epochs']} epochs "
        f"(1 warm-up), median of {args.repeats}; figures are aggregate samples/s and ratios"
    )
    bench_models(base, args, cuda)
    bench_split_ddp(base, args)


if __name__ == "__main__":
    main()
