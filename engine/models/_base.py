"""What every model shares: the optimizer, the loss, cutting a model into pipeline stages, and the vmap check.

Each model (mlp.py, cnn.py, transformer.py) is an `nn.Sequential` of top-level blocks (stem, body..., head),
so the split mode can cut it with `split_stages(model, n)` and the fused mode can stack copies with
`torch.func.stack_module_state` once `check_vmappable(model)` has passed.

    opt = make_optimizer(model.parameters(), "sgd", lr=0.05)
    stages = split_stages(model, 2)          # stages[1](stages[0](x)) == model(x)

A user's model (engine/plugins/__init__.py) that is not an nn.Sequential can still be split: its `stages()`
method returns its blocks in forward order (`as_sequential`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from engine.errors import ConfigError
from engine.plugins import resolve

__all__ = ["as_sequential", "check_vmappable", "loss_fn", "make_optimizer", "set_loss", "split_stages"]

log = logging.getLogger(__name__)

OPTIMIZERS = ("sgd", "adamw")


def make_optimizer(params: Iterable[torch.Tensor], name: str, lr: float) -> torch.optim.Optimizer:
    """SGD with momentum 0.9, or AdamW with torch's default weight decay."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise ConfigError("optimizer", f"'{name}' is unknown; choose one of: {', '.join(OPTIMIZERS)}")


_LOSS: list = [F.cross_entropy]  # NOTE: one run per process, so the run's loss is process state (set_loss)


def set_loss(spec: str) -> None:
    """Make the run's `loss` field the loss of every step in this process: cross-entropy when empty."""
    _LOSS[0] = resolve(spec, "loss") if spec else F.cross_entropy


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The run's loss (set_loss); by default mean cross-entropy of logits [B, num_classes] against labels [B]."""
    return _LOSS[0](logits, y)


def as_sequential(model: nn.Module) -> nn.Sequential:
    """The blocks split can cut: the model itself if it is an nn.Sequential, else what its stages() returns."""
    if isinstance(model, nn.Sequential):
        return model
    stages = getattr(model, "stages", None)
    name = type(model).__name__
    if not callable(stages):
        raise ConfigError(
            "model",
            f"split cuts a model into stages, and {name} is not an nn.Sequential and has no "
            "stages() method; return an nn.Sequential of blocks, give the model a stages() "
            "method that returns its blocks in forward order, or pick another mode",
        )
    blocks = list(stages())
    if not blocks or not all(isinstance(b, nn.Module) for b in blocks):
        raise ConfigError(
            "model", f"{name}.stages() must return a non-empty list of nn.Modules (its blocks in forward order)"
        )
    return nn.Sequential(*blocks)


def split_stages(model: nn.Module, n_stages: int) -> list[nn.Sequential]:
    """Cut the model's children into n_stages contiguous, non-empty groups balanced by parameter count.

    The stages hold the model's own module objects (not copies), so training the stages trains the model.
    """
    blocks = list(as_sequential(model).named_children())
    if not 1 <= n_stages <= len(blocks):
        raise ConfigError(
            "n_stages",
            f"must be from 1 to {len(blocks)} for this model ({len(blocks)} blocks: "
            f"stem, body, head); lower n_stages or raise depth",
        )
    sizes = [sum(p.numel() for p in m.parameters()) for _, m in blocks]
    bounds = _balanced_bounds(sizes, n_stages)
    stages = [nn.Sequential(OrderedDict(blocks[a:b])) for a, b in zip(bounds, bounds[1:])]
    log.debug(
        "split %d blocks into stages of %s parameters",
        len(blocks),
        [sum(sizes[a:b]) for a, b in zip(bounds, bounds[1:])],
    )
    return stages


def _balanced_bounds(sizes: list[int], k: int) -> list[int]:
    """Cut points [0, ..., len(sizes)] of k contiguous non-empty groups.

    NOTE: two passes. The first finds the smallest possible largest group (what bounds a pipeline's speed);
    the second, among cuts that achieve it, minimises the sum of squared group sizes so the other stages are
    balanced too (a huge MLP stem would otherwise leave the rest split arbitrarily).
    """
    n = len(sizes)
    pre = [0]
    for s in sizes:
        pre.append(pre[-1] + s)
    inf = float("inf")

    def solve(cost, combine, limit: float) -> tuple[list[list[float]], list[list[int]]]:
        # best[j][i]: best value for the first i blocks in j groups; arg[j][i]: where the last group starts
        best = [[inf] * (n + 1) for _ in range(k + 1)]
        arg = [[0] * (n + 1) for _ in range(k + 1)]
        best[0][0] = 0.0
        for j in range(1, k + 1):
            for i in range(j, n - (k - j) + 1):
                for m in range(j - 1, i):
                    group = pre[i] - pre[m]
                    if best[j - 1][m] == inf or group > limit:
                        continue
                    value = combine(best[j - 1][m], cost(group))
                    if value < best[j][i]:
                        best[j][i], arg[j][i] = value, m
        return best, arg

    best, _ = solve(float, max, inf)
    _, arg = solve(lambda g: float(g) ** 2, lambda a, b: a + b, best[k][n])
    bounds = [n]
    for j in range(k, 0, -1):
        bounds.append(arg[j][bounds[-1]])
    return bounds[::-1]


def check_vmappable(model: nn.Module) -> None:
    """Raise ConfigError("model", ...) if copies of the model cannot be trained as one torch.func.vmap program.

    Under vmap, buffers are read-only: a module that updates a buffer in forward (BatchNorm's running stats)
    fails there, so we refuse it up front with the module's name.
    """
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
            raise ConfigError(
                "model",
                f"'{name or type(model).__name__}' ({type(module).__name__}) updates its "
                f"running statistics in forward, which torch.func.vmap cannot do; use a "
                f"model with GroupNorm/LayerNorm or track_running_stats=False, or another mode",
            )
