"""`fused`: n_models copies of one architecture, distinct initial weights, trained as one vmapped program.

The models' parameters are stacked ([N, ...] leaf tensors, torch.func.stack_module_state); one step is
vmap(grad_and_value(loss)) over the stack with the batch shared, then one optimizer step over the
stacked tensors. Model i starts from the weights seeded with seed + i and trains with lr * (1 + lr_spread * i).

Per-model learning rates. Param groups cannot split a stacked tensor, and scaling gradients is wrong for
AdamW (it is invariant to gradient scale). But for both optimizers here the update is proportional to lr
with optimizer state that does not depend on lr (SGD: p -= lr * buf, buf = m * buf + g; AdamW:
p -= lr * (wd * p + m_hat / (sqrt(v_hat) + eps))). So the step runs at the base lr and each model's
slice of the update is then scaled by lr_i / lr: p = p_old + s_i * (p_new - p_old) (torch.lerp).
This is exact up to rounding for SGD (any momentum) and AdamW, and costs one copy of the parameters
per step, paid only when lr_spread > 0.

    python -m engine run --mode fused --n-models 8 --lr-spread 0.5
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from engine.errors import ConfigError
from engine.loaders import open_loader
from engine.names import DEFAULT_CLASSES
from engine.measure import trace
from engine.calibrate import Calibrator, Phase
from engine.models import MODELS, check_vmappable, loss_fn, make_optimizer
from engine.modes._base import ModeSpec, RunContext
from engine.modes._common import Recorder, build_model, epoch_payload, fail_point, timed_epoch
from engine.plugins import is_spec
from engine.workloads import build_dataset

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["FusedStep", "SPEC", "bound", "model_lrs", "run"]

log = logging.getLogger(__name__)


def model_lrs(cfg: RunConfig) -> list[float]:
    return [cfg.lr * (1.0 + cfg.lr_spread * i) for i in range(cfg.n_models)]


class FusedStep:
    """models (same architecture) -> stacked parameters; calling it with (x, y) trains all of them one step."""

    def __init__(self, models: list[torch.nn.Module], optimizer: str, lrs: list[float]):
        check_vmappable(models[0])
        # a stateless skeleton: functional_call swaps each model's slice of the stack into it
        self.skeleton = copy.deepcopy(models[0]).to("meta")
        self.params, self.buffers = stack_module_state(models)  # name -> [N, ...]
        self.opt = make_optimizer(list(self.params.values()), optimizer, lrs[0])
        self.scale = None
        if any(lr != lrs[0] for lr in lrs):
            device = next(iter(self.params.values())).device
            self.scale = torch.tensor([lr / lrs[0] for lr in lrs], device=device)

        def loss_of(params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return loss_fn(functional_call(self.skeleton, (params, buffers), (x,)), y)

        # params/buffers sliced per model (dim 0); the batch is shared (None)
        self._grad = vmap(grad_and_value(loss_of), in_dims=(0, 0, None, None))

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One step for every model; returns the N losses [N], detached."""
        grads, losses = self.grads(x, y)
        self.step(grads)
        return losses.detach()

    def grads(self, x: torch.Tensor, y: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Every model's gradient (name -> [N, ...]) and loss [N] on the shared batch."""
        return self._grad(self.params, self.buffers, x, y)

    def step(self, grads: dict[str, torch.Tensor]) -> None:
        """The optimizer step over the stack, then each model's update scaled to its own lr."""
        for name, p in self.params.items():
            p.grad = grads[name]
        scale = self.scale
        old = [p.detach().clone() for p in self.params.values()] if scale is not None else None
        self.opt.step()
        if scale is not None and old is not None:
            with torch.no_grad():
                for p, p_old in zip(self.params.values(), old):
                    weight = scale.view(-1, *([1] * (p.dim() - 1)))  # [N, 1, ...]
                    p.copy_(p_old.lerp_(p, weight))

    def state_dict(self, i: int) -> dict[str, torch.Tensor]:
        """Model i's parameters and buffers, as a state dict of the original architecture."""
        return {name: t[i] for name, t in {**self.params, **self.buffers}.items()}


def run(ctx: RunContext) -> None:
    cfg, device = ctx.cfg, ctx.device
    # --- build: N seeded models stacked into one program ---
    dataset = build_dataset(cfg)
    step = FusedStep([build_model(cfg, dataset, i, device) for i in range(cfg.n_models)], cfg.optimizer, model_lrs(cfg))
    recorder = Recorder(ctx)

    with open_loader(dataset, cfg, device) as loader:
        for epoch in range(cfg.epochs):
            fail_point(0, epoch)
            record, losses = _epoch(step, loader.epoch(epoch), cfg.n_models, device)
            # --- record: one event per model; they share the program's timings ---
            for i in range(cfg.n_models):
                recorder.write(epoch_payload(cfg, i, 0, epoch, {**record, "loss": losses[i]}))
            log.info(
                "epoch %d: %.3f s for %d models, %.0f samples/s each",
                epoch,
                record["wall_s"],
                cfg.n_models,
                record["samples_per_s"],
            )
        trace.extra_epoch(ctx, lambda e: _epoch(step, loader.epoch(e), cfg.n_models, device))  # --trace: unstored
    recorder.finish()


def _epoch(step: Any, batches: Any, n_models: int, device: torch.device) -> tuple[dict[str, Any], list[float]]:
    """One epoch: every step trains all N models at once. Returns the timer's record and each model's mean loss."""
    record, losses = timed_epoch(batches, device, step)
    return record, losses.tolist() if losses is not None else [0.0] * n_models


def bound(cal: Calibrator) -> list[Phase]:
    """One phase: the loader against the vmapped step of all models."""

    def build(dataset: Any) -> list[Callable[..., Any]]:
        models = [build_model(cal.cfg, dataset, i, cal.device) for i in range(cal.cfg.n_models)]
        return [FusedStep(models, cal.cfg.optimizer, model_lrs(cal.cfg))]

    compute, loader = cal.compute("fused", build)[0], cal.loader()
    return [Phase(loader.seconds, compute.seconds, None, loader.cpu_s, compute.cpu_s, cal.overlaps)]


def _check(cfg: RunConfig) -> None:
    if cfg.n_models < 2:
        raise ConfigError(
            "n_models",
            f"fused trains n_models >= 2 models as one program, got {cfg.n_models}; use mode single for one model",
        )
    if is_spec(cfg.model):
        return  # a user's model is built for its data: engine.run.preflight trains two copies under vmap
    # the vmap check is structural, so a tiny instance of the architecture is enough
    check_vmappable(MODELS[cfg.model]((3, 8, 8), cfg.num_classes or DEFAULT_CLASSES, 8, cfg.depth))


SPEC = ModeSpec(
    run=run, check=_check, doc="n_models copies of one model trained as one torch.func.vmap program", bound=bound
)
