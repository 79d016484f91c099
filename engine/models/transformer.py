"""Transformer: a tiny ViT-style encoder over image patches, the attention end of the compute range.

patch embed (conv with kernel = stride = patch, + learned positional embedding) -> depth pre-norm encoder
blocks -> head (LayerNorm, mean over tokens, Linear). d_model = width, heads = the largest divisor of width
up to 4, MLP hidden = 4 * width, no dropout (runs are deterministic).

Patch size is max(4, S // 8) for S = min(H, W), so there are about 8x8 = 64 tokens (exactly 64
when S is a multiple of 8 and at least 32; at most 9x9 = 81; 2x2 for 8x8 images).
NOTE: when a side is not a multiple of the patch size, the patch conv drops the last rows/columns (a crop
at the bottom/right); nothing is padded.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Transformer"]


class PatchEmbed(nn.Module):
    """[B, C, H, W] -> [B, N, width] tokens with the positional embedding added (it lives here, not free)."""

    def __init__(self, in_shape: tuple[int, ...], width: int):
        super().__init__()
        channels, height, width_px = in_shape  # (C, H, W): an image's shape
        patch = min(max(4, min(height, width_px) // 8), height, width_px)
        self.proj = nn.Conv2d(channels, width, patch, stride=patch)
        n_tokens = (height // patch) * (width_px // patch)
        self.pos = nn.Parameter(torch.randn(1, n_tokens, width) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2) + self.pos


class EncoderBlock(nn.Module):
    """Pre-norm block: x + attn(LN(x)), then x + MLP(LN(x)).

    NOTE: written with plain ops instead of nn.TransformerEncoderLayer: under torch.func.vmap (fused mode) that
    layer's fast path and CPU flash attention have no batching rule, so functorch falls back to a slow
    per-model loop. Matmul + softmax vmap natively, and with at most 64 tokens they cost little.
    """

    def __init__(self, width: int):
        super().__init__()
        self.heads = max(h for h in (1, 2, 3, 4) if width % h == 0)
        self.norm1, self.qkv, self.out = nn.LayerNorm(width), nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        # [B, N, 3D] -> 3 x [B, heads, N, D/heads]
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5  # [B, heads, N, N]
        attn = F.softmax(scores, dim=-1) @ v  # [B, heads, N, D/heads]
        x = x + self.out(attn.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class MeanTokens(nn.Module):
    """[B, N, D] -> [B, D]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


class Transformer(nn.Sequential):
    def __init__(self, in_shape: tuple[int, ...], num_classes: int, width: int, depth: int):
        layers: list[tuple[str, nn.Module]] = [("embed", PatchEmbed(in_shape, width))]
        layers += [(f"block{i}", EncoderBlock(width)) for i in range(depth)]
        layers.append(("head", nn.Sequential(nn.LayerNorm(width), MeanTokens(), nn.Linear(width, num_classes))))
        super().__init__(OrderedDict(layers))
