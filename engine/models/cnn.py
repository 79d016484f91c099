"""CNN: a small ResNet-style network, the middle of the compute range.

stem (conv3x3 C->width, GroupNorm, ReLU) -> depth residual blocks -> head (global average pool, Linear).
Channels stay at `width` throughout so size grows smoothly with the knobs (~18 * width^2 parameters per block).

NOTE: GroupNorm, not BatchNorm: it keeps no running statistics, so copies of the model can be trained as one
torch.func.vmap program (fused mode) and a batch's result does not depend on other batches.
Downsampling: the stem has stride 2 for images larger than 32 pixels (keeps large images affordable), and every
second block has stride 2 while the feature map is at least 8 pixels on a side (so 8x8 images still work).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

__all__ = ["CNN"]


def _norm(channels: int) -> nn.GroupNorm:
    # gcd(8, channels) always divides channels: 8 groups when possible, fewer for odd widths
    return nn.GroupNorm(math.gcd(8, channels), channels)


def _conv3x3(c_in: int, c_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)


class ResBlock(nn.Module):
    """x + (conv3x3 -> GN -> ReLU -> conv3x3 -> GN), then ReLU; with stride 2 the skip is a 1x1 conv."""

    def __init__(self, channels: int, stride: int):
        super().__init__()
        self.conv1, self.norm1 = _conv3x3(channels, channels, stride), _norm(channels)
        self.conv2, self.norm2 = _conv3x3(channels, channels), _norm(channels)
        self.skip: nn.Module = nn.Identity()
        if stride != 1:
            self.skip = nn.Sequential(nn.Conv2d(channels, channels, 1, stride=stride, bias=False), _norm(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + self.skip(x))


class CNN(nn.Sequential):
    def __init__(self, in_shape: tuple[int, ...], num_classes: int, width: int, depth: int):
        channels, height, width_px = in_shape  # (C, H, W): an image's shape
        side = min(height, width_px)
        stride = 2 if side > 32 else 1
        layers: list[tuple[str, nn.Module]] = [
            ("stem", nn.Sequential(_conv3x3(channels, width, stride), _norm(width), nn.ReLU())),
        ]
        side = (side + stride - 1) // stride
        for i in range(depth):
            stride = 2 if i % 2 == 1 and side >= 8 else 1
            layers.append((f"block{i}", ResBlock(width, stride)))
            side = (side + stride - 1) // stride
        # [B, width, h, w] -> [B, num_classes]
        layers.append(("head", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))))
        super().__init__(OrderedDict(layers))
