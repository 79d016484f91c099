"""The dataset of the own-pipeline example: JPEGs in one folder per class, decoded and augmented with PIL/numpy.

`build(folder=...)` reads an ImageFolder-style directory. Without one, it makes a small synthetic set
the first time (one folder per class, a coloured shape per class on a noisy background) under
$LOADERLAB_DATA/datasets or data/datasets, and reuses it after.

Randomness comes from `engine.plugins.item_rng()`, a numpy Generator that LoaderLab seeds per
(seed, epoch, index) for the item being loaded in this thread. So the dataset can declare
`thread_safe = True`: the `threads` loader then loads items in parallel, and every loader still sees
the same batches. (A dataset that draws from the global `random`/`numpy`/`torch` generators works as
well: LoaderLab seeds those per item too, but then loads one item at a time per process.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import Dataset

from engine.plugins import item_rng

__all__ = ["FolderImages", "build", "make_folder"]

_EXTENSIONS = (".jpg", ".jpeg", ".png")
_MEAN = np.array([0.5, 0.5, 0.5], dtype=np.float32).reshape(3, 1, 1)
_STD = np.array([0.25, 0.25, 0.25], dtype=np.float32).reshape(3, 1, 1)


class FolderImages(Dataset):
    """folder/<class>/<image>: random-resized crop, flip, brightness jitter, normalise -> (float32 [3, S, S], int)."""

    thread_safe = True  # every random draw comes from item_rng(), this thread's own generator

    def __init__(self, folder: str | Path, image_size: int):
        root = Path(folder)
        self.classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        self.items = [
            (str(p), label)
            for label, name in enumerate(self.classes)
            for p in sorted((root / name).iterdir())
            if p.suffix.lower() in _EXTENSIONS
        ]
        self.num_classes = len(self.classes)  # LoaderLab builds the model for this many classes
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        rng = item_rng()
        with Image.open(path) as img:
            img = img.convert("RGB")
        w, h = img.size
        side = int(min(w, h) * rng.uniform(0.5, 1.0))  # random-resized crop: a random square, resized
        x0, y0 = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
        img = img.resize((self.image_size, self.image_size), Image.BILINEAR, box=(x0, y0, x0 + side, y0 + side))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0  # [3, S, S] in [0, 1]
        x = x * rng.uniform(0.8, 1.2)  # brightness jitter
        return torch.from_numpy((x - _MEAN) / _STD), label


def make_folder(root: Path, n_samples: int, num_classes: int, seed: int) -> Path:
    """A synthetic ImageFolder of n_samples 96x96 JPEGs; made once, atomically (a rename), then reused."""
    if root.is_dir():
        return root
    rng = np.random.default_rng(seed)
    tmp = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
    for i in range(n_samples):
        label = i % num_classes
        (tmp / f"class_{label:03d}").mkdir(exist_ok=True)
        noise = rng.integers(0, 80, (96, 96, 3), dtype=np.uint8)
        img = Image.fromarray(noise)
        hue = np.array([(label * 97) % 256, (label * 57 + 80) % 256, (label * 31 + 160) % 256])
        x, y, r = rng.integers(20, 76), rng.integers(20, 76), rng.integers(10, 20)
        ImageDraw.Draw(img).ellipse((x - r, y - r, x + r, y + r), fill=tuple(int(c) for c in hue))
        img.save(tmp / f"class_{label:03d}" / f"{i:05d}.jpg", quality=90)
    try:
        os.rename(tmp, root)
    except OSError:  # another run made it first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def build(
    *, seed: int, image_size: int, num_classes: int, n_samples: int, folder: str = "", **_: object
) -> FolderImages:
    """LoaderLab calls this with every config field as a keyword; this pipeline uses five of them."""
    if not folder:
        base = Path(os.environ.get("LOADERLAB_DATA") or Path(__file__).resolve().parents[2] / "data") / "datasets"
        base.mkdir(parents=True, exist_ok=True)
        folder = str(make_folder(base / f"own_pipeline-{n_samples}-{num_classes}-{seed}", n_samples, num_classes, seed))
    return FolderImages(folder, image_size)
