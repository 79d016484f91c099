"""`single`: one model, one loader, one device. The reference loop every other mode is judged by."""

from __future__ import annotations

import logging

import torch

from engine.measure import _mode_bounds, trace
from engine.modes._base import ModeSpec, RunContext
from engine.modes._common import Recorder, epoch_payload, train_epoch

__all__ = ["SPEC", "run", "train_step"]

log = logging.getLogger(__name__)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Forward, backward, step. Returns the detached loss (no .item(): that would sync CUDA per step)."""
    from engine.models._base import loss_fn  # noqa: PLC0415

    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


def run(ctx: RunContext) -> None:
    from engine.models._base import make_optimizer  # noqa: PLC0415
    from engine.plugins import build_dataset, build_model  # noqa: PLC0415
    from engine.registry import LOADERS  # noqa: PLC0415

    cfg, device = ctx.cfg, ctx.device
    recorder = Recorder(ctx)
    # --- build: data, model, optimizer (seeded, so the same config gives the same weights) ---
    torch.manual_seed(cfg.seed)
    dataset = build_dataset(cfg)  # a built-in workload, or the user's own (engine/plugins.py)
    model = build_model(cfg, dataset.sample_shape, dataset.num_classes).to(device)
    opt = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)

    with LOADERS[cfg.loader](dataset, cfg, device) as loader:
        for epoch in range(cfg.epochs):
            # --- one epoch: every step split into data wait / copy / compute (engine/modes/_common.py) ---
            record = train_epoch(model, opt, loader.epoch(epoch), device)
            # --- record: flushed before the next epoch starts, so a kill loses at most this one ---
            recorder.write(epoch_payload(cfg, 0, 0, epoch, record))
            log.info("epoch %d: %.3f s, %.0f samples/s, loss %.4f", epoch, record["wall_s"],
                     record["samples_per_s"], record["loss"])
        trace.extra_epoch(ctx, lambda e: train_epoch(model, opt, loader.epoch(e), device))  # --trace: unstored
    recorder.finish()


SPEC = ModeSpec(run=run, doc="one model trained by one loop; the reference for every other mode",
                bound=_mode_bounds.single_bound)
