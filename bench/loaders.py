"""Loader benchmark: epoch time and samples/s of `jpeg` + `cnn` for each loader × workers {0, 1, 2, 4},
and the engine's overhead against a plain `for x, y in DataLoader(...)` loop at equal settings.

    .venv/bin/python bench/loaders.py [--n-samples 1000] [--epochs 3] [--repeats 3]

With --versus: DataLoader (`processes`), torchdata.nodes (`threads`) and SPDL (`spdl`) at equal workers on jpeg
decode, the GIL-bound pyloop and examples/own_pipeline, loader only, each run a fresh process, interleaved, with
epoch time, CPU-seconds and peak PSS and their 95% intervals (bench/_loaders_versus.py says how):

    .venv/bin/python bench/loaders.py --versus [--repeats 7] [--workers 2] [--n-samples 1000] [--epochs 3]

Engine and plain loops run interleaved in this one process run, so the ratio engine/plain is a
side-by-side measurement (the machine's noise hits both alike). Target: ratio <= 1.03.
The engine is timed in-process here (the single-mode loop, its EpochTimer included), because the
question is the loop's overhead, not the subprocess start-up that the runner adds once per run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _loaders_versus as versus  # noqa: E402 (bench/, beside this script)

from engine.config import RunConfig  # noqa: E402
from engine.loaders._base import epoch_batches  # noqa: E402
from engine.measure import fingerprint
from engine.models._base import make_optimizer  # noqa: E402
from engine.modes import RunContext  # noqa: E402
from engine.modes._common import train_step  # noqa: E402
from engine.modes.single import run as run_single  # noqa: E402
from engine.registry import MODELS, WORKLOADS  # noqa: E402
from engine.runlog import RunLog, read_events  # noqa: E402


def engine_epochs(cfg: RunConfig, tmp: Path) -> list[float]:
    run_dir = Path(tempfile.mkdtemp(dir=tmp))
    with RunLog(run_dir) as log:
        run_single(RunContext(cfg=cfg, log=log, device=torch.device("cpu")))
    return [e["wall_s"] for e in read_events(run_dir) if e["type"] == "epoch" and not e["warmup"]]


class _Batches(torch.utils.data.Sampler):
    """The same batches the engine's loaders deliver, so both loops do identical work."""

    def __init__(self, n: int, cfg: RunConfig):
        self.n, self.cfg, self.epoch = n, cfg, 0

    def __iter__(self):
        return iter(epoch_batches(self.n, self.cfg.batch_size, self.cfg.seed, self.epoch))

    def __len__(self) -> int:
        return len(epoch_batches(self.n, self.cfg.batch_size, self.cfg.seed, self.epoch))


def plain_epochs(cfg: RunConfig) -> list[float]:
    dataset = WORKLOADS[cfg.workload](cfg)
    torch.manual_seed(cfg.seed)
    model = MODELS[cfg.model](dataset.sample_shape, dataset.num_classes, cfg.width, cfg.depth)
    opt = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    sampler = _Batches(len(dataset), cfg)
    kw = {"num_workers": cfg.workers, "persistent_workers": cfg.workers > 0}
    if cfg.workers:
        kw["prefetch_factor"] = cfg.prefetch_depth
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, **kw)
    times = []
    for epoch in range(cfg.epochs):
        sampler.epoch = epoch
        t = time.perf_counter()
        for x, y in loader:
            train_step(model, opt, x, y)
        times.append(time.perf_counter() - t)
    return times[cfg.warmup_epochs :]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-samples", type=int, default=1000)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=None, help="3; with --versus 7 (the fewest for an interval)")
    ap.add_argument("--workers", default=None, help="0,1,2,4; with --versus one count for all three (2)")
    ap.add_argument("--versus", action="store_true", help="DataLoader vs torchdata.nodes vs SPDL (docstring)")
    ap.add_argument("--workloads", default="jpeg,pyloop,own_pipeline", help="with --versus")
    args = ap.parse_args()
    host = fingerprint()
    print(f"machine: {host['cpu_model']}, {host['cores']} cores, torch {host['torch_version']}")
    if args.versus:
        base = dict(n_samples=args.n_samples, image_size=args.image_size, batch_size=32, seed=0, device="cpu")
        versus.run(args.workloads.split(","), int(args.workers or 2), args.repeats or 7, args.epochs, base)
        return
    args.repeats, args.workers = args.repeats or 3, args.workers or "0,1,2,4"
    base = dict(
        workload="jpeg",
        n_samples=args.n_samples,
        image_size=args.image_size,
        model="cnn",
        width=16,
        depth=2,
        batch_size=64,
        epochs=args.epochs,
        warmup_epochs=1,
        bound=False,
    )
    WORKLOADS["jpeg"](RunConfig.from_dict(base))  # generate the files before anything is timed
    print(f"{'loader':<10}{'workers':>8}{'engine s':>10}{'plain s':>10}{'samples/s':>11}{'engine/plain':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for loader in ("sync", "prefetch", "threads", "processes"):
            for workers in map(int, args.workers.split(",")):
                if (loader in ("sync", "prefetch")) != (workers == 0):
                    continue
                cfg = RunConfig.from_dict({**base, "loader": loader, "workers": workers})
                plain_cfg = cfg.replace(loader="sync" if workers == 0 else "processes")
                eng, pln = [], []
                for _ in range(args.repeats):  # interleaved: engine, plain, engine, plain, ...
                    eng += engine_epochs(cfg, Path(tmp))
                    pln += plain_epochs(plain_cfg)
                e, p = statistics.median(eng), statistics.median(pln)
                print(
                    f"{loader:<10}{workers:>8}{e:>10.3f}{p:>10.3f}{cfg.n_samples / e:>11.0f}{e / p:>14.3f}", flush=True
                )
    print("plain = torch DataLoader with num_workers = workers (0 for sync/prefetch), same batches and model")


if __name__ == "__main__":
    main()
