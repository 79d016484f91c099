"""`single`: one model, one loader, one device. The reference loop every other mode is judged by."""

from __future__ import annotations

import logging

import torch

from engine.loaders import open_loader
from engine.measure import trace
from engine.calibrate import Calibrator, Phase
from engine.models import build_model, make_optimizer
from engine.modes._base import ModeSpec, RunContext
from engine.modes._common import Recorder, epoch_payload, step_builder, train_epoch
from engine.workloads import build_dataset

__all__ = ["SPEC", "bound", "run"]

log = logging.getLogger(__name__)


def run(ctx: RunContext) -> None:
    cfg, device = ctx.cfg, ctx.device
    recorder = Recorder(ctx)
    # --- build: data, model, optimizer (seeded, so the same config gives the same weights) ---
    torch.manual_seed(cfg.seed)
    dataset = build_dataset(cfg)  # a built-in workload, or the user's own (engine/plugins/__init__.py)
    model = build_model(cfg, dataset.sample_shape, dataset.num_classes).to(device)
    opt = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)

    with open_loader(dataset, cfg, device) as loader:
        for epoch in range(cfg.epochs):
            # --- one epoch: every step split into data wait / copy / compute (engine/modes/_common.py) ---
            record = train_epoch(model, opt, loader.epoch(epoch), device)
            # --- record: flushed before the next epoch starts, so a kill loses at most this one ---
            recorder.write(epoch_payload(cfg, 0, 0, epoch, record))
            log.info(
                "epoch %d: %.3f s, %.0f samples/s, loss %.4f",
                epoch,
                record["wall_s"],
                record["samples_per_s"],
                record["loss"],
            )
        trace.extra_epoch(ctx, lambda e: train_epoch(model, opt, loader.epoch(e), device))  # --trace: unstored
    recorder.finish()


def bound(cal: Calibrator) -> list[Phase]:
    """One phase: the loader against the step."""
    compute, loader = cal.compute("single", step_builder(cal.cfg, 0, cal.device))[0], cal.loader()
    return [Phase(loader.seconds, compute.seconds, None, loader.cpu_s, compute.cpu_s, cal.overlaps)]


SPEC = ModeSpec(run=run, doc="one model trained by one loop; the reference for every other mode", bound=bound)
