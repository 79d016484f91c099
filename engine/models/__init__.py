"""Models: each is an nn.Sequential of blocks (stem, body..., head) built as Cls(in_shape, num_classes, width, depth).

    mlp.py          flatten + Linear layers: cheapest, makes the loader the bottleneck
    cnn.py          small ResNet with GroupNorm
    transformer.py  tiny ViT over at most 64 patches
    _base.py        make_optimizer, loss_fn, split_stages (split mode), check_vmappable (fused mode)

MODELS maps the names "mlp", "cnn" and "transformer" to these classes. A config's model may instead be
the user's own, "module.path:callable" (engine/plugins/__init__.py): runs build either through build_model.

    model = build_model(cfg, dataset.sample_shape, dataset.num_classes)
"""

from __future__ import annotations

from typing import Any

from torch import nn

from engine.errors import ConfigError
from engine.models._base import check_vmappable, loss_fn, make_optimizer, set_loss, split_stages
from engine.models.cnn import CNN
from engine.models.mlp import MLP
from engine.models.transformer import Transformer
from engine.names import unique
from engine.plugins import call_factory, is_spec, resolve

__all__ = [
    "CNN",
    "MLP",
    "MODELS",
    "Transformer",
    "build_model",
    "check_vmappable",
    "loss_fn",
    "make_optimizer",
    "split_stages",
]

MODELS = unique("model", [("mlp", MLP), ("cnn", CNN), ("transformer", Transformer)])


def build_model(
    cfg: Any,
    in_shape: tuple[int, ...],
    num_classes: int,
    *,
    arch: str | None = None,
    width: int | None = None,
    field: str = "model",
) -> nn.Module:
    """A built-in model, or the user's factory called with every config field plus in_shape (the dataset's
    item shape), num_classes (the dataset's) and width (this model's), or those its signature names.

    Also makes cfg.loss this process's loss (engine.models._base.set_loss): every process that trains
    builds its model here, so the loss follows the model into threads, spawned processes and ranks.
    """
    arch, width = arch or cfg.model, width or cfg.width
    set_loss(cfg.loss)
    if not is_spec(arch):
        return MODELS[arch](in_shape, num_classes, width, cfg.depth)
    # every config field, as the dataset's factory gets them, and what the model is built for on top: the
    # dataset's shape and classes, and this model's width (model_b's may differ)
    kwargs = {**cfg.to_dict(), "in_shape": tuple(in_shape), "num_classes": int(num_classes), "width": width}
    model = call_factory(resolve(arch, field), arch, field, kwargs)
    if not isinstance(model, nn.Module):
        raise ConfigError(
            field,
            f"'{arch}' returned type {type(model).__name__}, not a torch.nn.Module; return the model (batch -> logits)",
        )
    return model
