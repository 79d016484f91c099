"""Models: each is an nn.Sequential of blocks (stem, body..., head) built as Cls(in_shape, num_classes, width, depth).

    mlp.py          flatten + Linear layers: cheapest, makes the loader the bottleneck
    cnn.py          small ResNet with GroupNorm
    transformer.py  tiny ViT over at most 64 patches
    _base.py        make_optimizer, loss_fn, split_stages (split mode), check_vmappable (fused mode)

The registry (engine/registry.py) maps the names "mlp", "cnn" and "transformer" to these classes.
"""

from engine.models._base import check_vmappable, loss_fn, make_optimizer, split_stages
from engine.models.cnn import CNN
from engine.models.mlp import MLP
from engine.models.transformer import Transformer

__all__ = ["CNN", "MLP", "Transformer", "check_vmappable", "loss_fn", "make_optimizer", "split_stages"]
