"""Each mode's lower bound (its `ModeSpec.bound` hook): which passes bound it and how they combine.

A hook takes the run's Calibrator and returns the Phases its epoch runs one after another (or None:
no bound from this process). What can overlap in a mode decides its phases:

  single, fused       one phase: the loader against the step (fused: the vmapped step of all models)
  dual-sequential     two phases, model A's epoch then model B's, each loading the epoch once
  dual-threads, -processes, -streams
                      one phase: the loader against the slower model's compute, A + B kept as the
                      serial compute so `overlap` says how much of the concurrency was realised
  split               per stage, on the stage's device: naive (1 micro-batch) is the sum of the stages;
                      a pipeline is the busiest device's sum (the rest can overlap)
  ddp                 rank 0 only: its shard through the loader, its share of the batches through one
                      model, at the world size that ran (torchrun's); all-reduce is not in the bound
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from engine.measure.bound import Calibrator, Phase

__all__ = ["ddp_bound", "dual_concurrent_bound", "dual_sequential_bound", "fused_bound", "single_bound",
           "split_bound"]


def _model_step(cal: Calibrator, idx: int, dual: bool, device: torch.device) -> Callable[[Any], list[Callable]]:
    def build(dataset: Any) -> list[Callable]:
        from engine.models._base import make_optimizer  # noqa: PLC0415
        from engine.modes._common import build_model  # noqa: PLC0415
        from engine.modes.single import train_step  # noqa: PLC0415

        model = build_model(cal.cfg, dataset, idx, device, dual=dual)
        opt = make_optimizer(model.parameters(), cal.cfg.optimizer, cal.cfg.lr)
        return [lambda x, y: train_step(model, opt, x, y)]
    return build


def single_bound(cal: Calibrator) -> list[Phase]:
    compute = cal.compute("single", _model_step(cal, 0, False, cal.device))[0]
    return [Phase(cal.loader()["seconds"], compute)]


def fused_bound(cal: Calibrator) -> list[Phase]:
    def build(dataset: Any) -> list[Callable]:
        from engine.modes._common import build_model  # noqa: PLC0415
        from engine.modes.fused import FusedStep, model_lrs  # noqa: PLC0415

        models = [build_model(cal.cfg, dataset, i, cal.device) for i in range(cal.cfg.n_models)]
        return [FusedStep(models, cal.cfg.optimizer, model_lrs(cal.cfg))]
    return [Phase(cal.loader()["seconds"], cal.compute("fused", build)[0])]


def _dual_computes(cal: Calibrator) -> list[float]:
    from engine import devices  # noqa: PLC0415

    names = cal.cfg.devices if cal.cfg.mode == "dual-processes" and cal.cfg.devices else [None, None]
    out = []
    for i, name in enumerate(names):
        dev = devices.resolve(name) if name else cal.device
        out.append(cal.compute(f"dual-{i}", _model_step(cal, i, True, dev), device=dev)[0])
    return out


def dual_sequential_bound(cal: Calibrator) -> list[Phase]:
    loader = cal.loader()["seconds"]
    return [Phase(loader, c) for c in _dual_computes(cal)]


def dual_concurrent_bound(cal: Calibrator) -> list[Phase]:
    a, b = _dual_computes(cal)
    return [Phase(cal.loader()["seconds"], max(a, b), serial_compute_s=a + b)]


def ddp_bound(cal: Calibrator) -> list[Phase] | None:
    from engine.loaders._base import epoch_batches  # noqa: PLC0415
    from engine.modes._ddp import torchrun_env  # noqa: PLC0415

    joined = torchrun_env()
    if joined is not None and joined[0] != 0:
        return None
    world = int(cal.ctx.summary.get("world_size_run") or (joined[1] if joined else cal.cfg.world_size))
    n = cal.cfg.n_samples
    full = len(epoch_batches(n, cal.cfg.batch_size, cal.cfg.seed, 1))
    fraction = math.ceil(len(range(0, n, world)) / cal.cfg.batch_size) / full
    compute = cal.compute(f"ddp-{world}", _model_step(cal, 0, False, cal.device), fraction=fraction)[0]
    return [Phase(cal.loader(shard=(0, world))["seconds"], compute)]


def split_bound(cal: Calibrator) -> list[Phase]:
    from engine.measure._stage_step import stage_builder  # noqa: PLC0415
    from engine.modes.split import stage_devices  # noqa: PLC0415

    devs = stage_devices(cal.cfg, cal.device)
    stages = [cal.compute(f"stage-{s}", stage_builder(cal.cfg, devs, s), device=devs[s])[0] for s in range(len(devs))]
    if cal.cfg.micro_batches == 1:
        return [Phase(cal.loader()["seconds"], sum(stages))]
    per_device: dict[str, float] = {}
    for s, d in enumerate(devs):
        per_device[str(d)] = per_device.get(str(d), 0.0) + stages[s]
    return [Phase(cal.loader()["seconds"], max(per_device.values()), serial_compute_s=sum(stages))]
