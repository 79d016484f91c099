"""On CUDA: the CPU-seconds a compute pass charges the cores, read before the final synchronize (as the bound's
compute pass reads them) and after it (as it read them before issue 25).

    python3 bench/sync_cpu.py [--widths 16,64,256] [--image-size 64] [--batch-size 64] [--n-samples 2048]

For each model width, one real training step of the lab's own CNN (engine/modes/_common.py's step_builder) is
replayed over an epoch of batches already on the GPU: wall seconds to the end of the GPU's work, the host's
CPU-seconds up to the last launch, and the CPU-seconds up to the end of the synchronize. The host spins in the
synchronize while the GPU finishes, so the second reading grows toward the wall time as the GPU's share grows;
the cores term of the bound must not count it. The compute pass itself (engine/calibrate/_passes.py) is run
too, to show what the lab stores. Needs a CUDA GPU; on a CPU it says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from engine.calibrate import compute_pass  # noqa: E402
from engine.config import RunConfig  # noqa: E402
from engine.loaders import epoch_batches, open_loader  # noqa: E402
from engine.measure import tree_cpu_s  # noqa: E402
from engine.modes import step_builder  # noqa: E402
from engine.workloads import build_dataset  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def readings(step, inputs, device) -> tuple[float, float, float]:
    """(wall s, CPU-s to the last launch, CPU-s to the end of the synchronize) over one replay of inputs."""
    _sync(device)
    t0, c0 = time.perf_counter(), tree_cpu_s()
    for x, y in inputs:
        step(x, y)
    c1 = tree_cpu_s()
    _sync(device)
    c2 = tree_cpu_s()
    return time.perf_counter() - t0, c1 - c0, c2 - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="16,64,256")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--n-samples", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cpu only to try the script: there the sync is a no-op")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA GPU here; this check needs one", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    print(
        f"# {torch.cuda.get_device_name(0) if device.type == 'cuda' else 'CPU'}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(
        f"{'width':>5} {'wall s':>8} {'cpu to launch':>14} {'cpu to sync end':>16} {'spin share':>10} "
        f"{'stored cpu_s':>12} {'stored s':>9}"
    )
    for width in (int(w) for w in args.widths.split(",")):
        cfg = RunConfig(
            workload="jpeg",
            model="cnn",
            width=width,
            image_size=args.image_size,
            batch_size=args.batch_size,
            n_samples=args.n_samples,
            device=args.device,
        )
        dataset = build_dataset(cfg)
        step = step_builder(cfg, 0, device)(dataset)[0]
        n = len(epoch_batches(len(dataset), cfg.batch_size, cfg.seed, 1))
        with open_loader(dataset, cfg, torch.device("cpu"), loader="sync") as loader:
            inputs = [(x.to(device), y.to(device)) for i, (x, y) in zip(range(n), loader.epoch(1))]
        step(*inputs[0])
        wall, to_launch, to_end = min(readings(step, inputs, device) for _ in range(args.repeats))
        stored = compute_pass(cfg, device, step_builder(cfg, 0, device))
        print(
            f"{width:>5} {wall:>8.3f} {to_launch:>14.3f} {to_end:>16.3f} {(to_end - to_launch) / wall:>10.2f} "
            f"{stored['cpu_s']:>12.3f} {stored['seconds']:>9.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
