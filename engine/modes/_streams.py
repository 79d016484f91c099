"""dual-streams: two models on one GPU, one CUDA stream each, both issued from one thread.

Each step: the batch is copied on the default stream; each model's stream waits for that copy, then runs
its forward, backward and optimizer step; the default stream then waits for both, so one step's two
models overlap on the GPU while the next step's copy is ordered after them (which also keeps the batch's
memory safe without record_stream). Per-model compute is timed with CUDA events on that model's stream.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from engine import devices
from engine.errors import ConfigError
from engine.loaders import open_loader
from engine.measure import cuda_events
from engine.models import make_optimizer
from engine.modes._base import RunContext
from engine.modes._common import (
    Recorder,
    build_model,
    check_model_b,
    epoch_payload,
    fail_point,
    timed_epoch,
    train_step,
)
from engine.workloads import build_dataset

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["check_streams", "run_streams"]

log = logging.getLogger(__name__)


def check_streams(cfg: RunConfig) -> None:
    check_model_b(cfg)
    if not torch.cuda.is_available():
        raise ConfigError(
            "mode",
            "dual-streams needs a CUDA GPU (one CUDA stream per model); this machine has "
            "none — use dual-threads or dual-sequential",
        )
    if devices.resolve(cfg.device).type != "cuda":
        raise ConfigError("device", f"dual-streams runs on a CUDA device, not '{cfg.device}'; use auto or cuda")


def _both(
    models: list,
    opts: list,
    streams: list,
    pool: cuda_events.EventPool,
    spans: list[list[cuda_events.Span]],
    x: torch.Tensor,
    y: torch.Tensor,
) -> torch.Tensor:
    """One step of both models, each on its own stream after the batch's copy; the default stream then waits for
    both. Returns their losses, [2], on the default stream."""
    main = torch.cuda.current_stream(x.device)
    losses = []
    for i, (model, opt, stream) in enumerate(zip(models, opts, streams)):
        stream.wait_stream(main)  # the batch is ready
        with torch.cuda.stream(stream):
            span = pool.span()
            span.start.record(stream)
            losses.append(train_step(model, opt, x, y))
            span.end.record(stream)
        spans[i].append(span)
    for stream in streams:
        main.wait_stream(stream)
    for loss in losses:
        loss.record_stream(main)  # NOTE: made on a model's stream, read on the default one: not reused before that
    return torch.stack(losses)


def run_streams(ctx: RunContext) -> None:
    cfg, device = ctx.cfg, ctx.device
    if device.type != "cuda":
        raise ConfigError("mode", "dual-streams needs a CUDA device; use dual-threads or dual-sequential on CPU")
    # --- build: two models, their optimizers, one stream each ---
    dataset = build_dataset(cfg)
    models = [build_model(cfg, dataset, i, device, dual=True) for i in range(2)]
    opts = [make_optimizer(m.parameters(), cfg.optimizer, cfg.lr) for m in models]
    streams = [torch.cuda.Stream(device) for _ in models]
    pool = cuda_events.pool(device)  # events reused epoch after epoch, not created per step
    recorder = Recorder(ctx)

    with open_loader(dataset, cfg, device) as loader:
        for epoch in range(cfg.epochs):
            for i in range(len(models)):
                fail_point(i, epoch)
            # --- one epoch: one shared data wait and copy per step, one compute span per model ---
            spans: list[list[cuda_events.Span]] = [[] for _ in models]
            record, losses = timed_epoch(
                loader.epoch(epoch), device, lambda x, y: _both(models, opts, streams, pool, spans, x, y)
            )
            # --- record: the shared step timings, with each model's own stream compute time ---
            for i in range(len(models)):  # the timer's end synchronized: every event below has completed
                compute = [span.seconds() for span in spans[i]]
                steps = [[*row[:3], compute[k], row[4]] for k, row in enumerate(record["steps"])]
                recorder.write(
                    epoch_payload(
                        cfg,
                        i,
                        0,
                        epoch,
                        {
                            **record,
                            "compute_s": sum(compute),
                            "steps": steps,
                            "loss": losses[i].item() if losses is not None else 0.0,
                        },
                    )
                )
    recorder.finish()
