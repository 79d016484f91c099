"""Image augmentation in torch ops: each item is a uint8 image (3 x 96 x 96) from a seeded generator, randomly
cropped to 64 x 64, flipped, colour-jittered (brightness, contrast and saturation as tensor arithmetic) and
normalised; a small CNN classifies it. The transform is torch's own C++: each op releases the GIL while it runs and
holds it to dispatch, and a loader worker runs it on one intra-op thread.

Added at 9e2d642 as a pipeline the prediction model had never seen (bench/predict.py, kind `unseen`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = ["Augmented", "build", "model"]

_RAW, _CROP = 96, 64
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Augmented(Dataset):
    """(float32 [3, 64, 64] augmented image, label)."""

    def __init__(self, n: int, num_classes: int, seed: int = 0):
        self.n, self.num_classes, self.seed = n, num_classes, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(self.num_classes, (1,), generator=g))
        # a decoded photo stands in: smooth colour fields plus noise, as uint8
        base = torch.rand(3, 6, 6, generator=g) * 200
        img = nn.functional.interpolate(base[None], size=(_RAW, _RAW), mode="bilinear", align_corners=False)[0]
        img = (img + torch.randn(3, _RAW, _RAW, generator=g) * 12 + label * 4).clamp(0, 255).to(torch.uint8)
        top, left = (int(x) for x in torch.randint(_RAW - _CROP + 1, (2,), generator=g))
        x = img[:, top : top + _CROP, left : left + _CROP].float() / 255
        if torch.rand(1, generator=g) < 0.5:
            x = x.flip(-1)
        brightness, contrast, saturation = (0.8 + 0.4 * torch.rand(3, generator=g)).tolist()
        x = x * brightness
        gray = (0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2]).unsqueeze(0)
        x = (x - gray.mean()) * contrast + gray.mean()
        x = (x - gray) * saturation + gray
        return ((x.clamp(0, 1) - _MEAN) / _STD).contiguous(), label


def build(*, n_samples: int = 2048, num_classes: int = 10, seed: int = 0, **_: object) -> Augmented:
    return Augmented(n_samples, num_classes, seed=seed)


def model(*, in_shape: tuple[int, ...], num_classes: int, width: int = 16, **_: object) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_shape[0], width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, num_classes),
    )
