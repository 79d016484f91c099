"""The model of the own-pipeline example: a small ResNet as an nn.Sequential of blocks.

An nn.Sequential lets LoaderLab's `split` mode cut it into stages; GroupNorm (no running statistics)
lets the `fused` mode train copies of it as one torch.func.vmap program.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ResBlock", "resnet"]


class ResBlock(nn.Module):
    """conv-norm-relu-conv-norm plus the input, then relu; stride 2 halves the side and doubles the channels."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False),
            nn.GroupNorm(min(8, c_out), c_out),
            nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
            nn.GroupNorm(min(8, c_out), c_out),
        )
        self.skip = nn.Identity() if stride == 1 and c_in == c_out else nn.Conv2d(c_in, c_out, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def resnet(
    *, in_shape: tuple[int, ...], num_classes: int, width: int = 32, depth: int = 2, **_: object
) -> nn.Sequential:
    """in_shape is one item's x shape, (3, S, S); width is the stem's channels; depth the residual blocks."""
    blocks: list[nn.Module] = [
        nn.Sequential(nn.Conv2d(in_shape[0], width, 3, 1, 1, bias=False), nn.GroupNorm(min(8, width), width), nn.ReLU())
    ]
    c = width
    for i in range(depth):
        stride = 2 if i > 0 else 1
        blocks.append(ResBlock(c, c * stride, stride))
        c *= stride
    blocks.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes)))
    return nn.Sequential(*blocks)
