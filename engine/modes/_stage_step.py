"""split's compute pass, one stage at a time on the stage's own device (the whole model may fit on none).

A stage's step is its forward and backward on the activations the earlier stages hand it (made once,
untimed, by `prepare`), plus the optimizer step of its own parameters. Inner stages back-propagate a
gradient of ones: the same kernels as the real gradient from the next stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from engine.models import build_model, loss_fn, make_optimizer, split_stages

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["StageStep", "stage_builder"]


class StageStep:
    def __init__(self, stages: Sequence[torch.nn.Module], devices: list[torch.device], s: int, cfg: RunConfig):
        self.before = [(stage.to(d), d) for stage, d in zip(stages[:s], devices[:s])]
        self.stage, self.device, self.last = stages[s].to(devices[s]), devices[s], s == len(stages) - 1
        self.opt = make_optimizer(self.stage.parameters(), cfg.optimizer, cfg.lr)

    def prepare(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The stage's inputs: each batch through the earlier stages (no grad), on the stage's device."""
        out = []
        with torch.no_grad():
            for x, y in batches:
                for stage, d in self.before:
                    x = stage(x.to(d))
                out.append((x.to(self.device), y.to(self.device)))
        return out

    def __call__(self, a: torch.Tensor, y: torch.Tensor) -> None:
        self.opt.zero_grad(set_to_none=True)
        out = self.stage(a.requires_grad_() if a.is_floating_point() and self.before else a)
        if self.last:
            loss_fn(out, y).backward()
        else:
            out.backward(torch.ones_like(out))
        self.opt.step()


def stage_builder(cfg: RunConfig, devices: list[torch.device], s: int) -> Callable[[Any], list[Callable]]:
    def build(dataset: Any) -> list[Callable]:
        torch.manual_seed(cfg.seed)  # seeded like the run's model
        model = build_model(cfg, dataset.sample_shape, dataset.num_classes)
        return [StageStep(split_stages(model, cfg.n_stages), devices, s, cfg)]

    return build
