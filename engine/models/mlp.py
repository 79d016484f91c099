"""MLP: the cheapest model, for runs where the loader should be the bottleneck.

flatten -> Linear(C*H*W, width) -> ReLU -> (depth-1) x [Linear(width, width) -> ReLU] -> Linear(width, classes).
Its children are depth + 1 blocks (stem, depth-1 hidden blocks, head), so split mode can cut it.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from torch import nn

__all__ = ["MLP"]


class MLP(nn.Sequential):
    def __init__(self, in_shape: tuple[int, ...], num_classes: int, width: int, depth: int):
        layers: list[tuple[str, nn.Module]] = [
            # [B, C, H, W] -> [B, width]
            ("stem", nn.Sequential(nn.Flatten(), nn.Linear(math.prod(in_shape), width), nn.ReLU())),
        ]
        layers += [(f"block{i}", nn.Sequential(nn.Linear(width, width), nn.ReLU())) for i in range(1, depth)]
        layers.append(("head", nn.Linear(width, num_classes)))
        super().__init__(OrderedDict(layers))
