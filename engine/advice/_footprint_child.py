"""The memory footprint of one pipeline, measured in a process of its own (engine/advice/memory.py says what for).

    python -m engine.advice._footprint_child < config.json    # one JSON line: {"base_bytes", "worker_bytes"}

base_bytes: this process's PSS after building the dataset and the model and training a few batches on the sync
loader (a loader without worker processes). worker_bytes: the USS of one DataLoader worker (the lab's processes
loader, the run's start method) after it has made a few batches: what each further worker process adds.
NOTE: on the CPU always: host memory is what the cap is about, and a CUDA context here would only hold the GPU.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Generator

import psutil
import torch

from engine.config import RunConfig
from engine.loaders import open_loader
from engine.loaders.processes import ProcessLoader
from engine.models import build_model, loss_fn, make_optimizer
from engine.workloads import build_dataset

__all__ = ["main"]

BATCHES = 3  # enough for a dataset's lazy caches and a step's buffers to exist


def _pss(pid: int) -> int:
    info = psutil.Process(pid).memory_full_info()
    return int(getattr(info, "pss", None) or info.rss)


def main() -> int:
    cfg = RunConfig.from_dict({**json.loads(sys.stdin.read()), "device": "cpu"})
    torch.manual_seed(cfg.seed)
    dataset = build_dataset(cfg)
    model = build_model(cfg, dataset.sample_shape, dataset.num_classes)
    opt = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    with open_loader(dataset, cfg, "cpu", loader="sync") as loader:
        for x, y in itertools.islice(loader.epoch(0), BATCHES):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
    base = _pss(psutil.Process().pid)
    one = cfg.replace(loader="processes", workers=1, persistent_workers=True)
    with open_loader(dataset, one, "cpu") as loader:
        assert isinstance(loader, ProcessLoader)  # the loader named above: its worker processes are measured
        batches = loader.epoch(0)
        for _ in itertools.islice(batches, BATCHES):
            pass
        worker = max((psutil.Process(p).memory_full_info().uss for p in loader.worker_pids()), default=0)
        if isinstance(batches, Generator):  # Loader.epoch says Iterator; its epochs are generators, ended here
            batches.close()
    print(json.dumps({"base_bytes": base, "worker_bytes": int(worker)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
