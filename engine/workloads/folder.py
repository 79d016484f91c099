"""The `folder` workload: the user's own images, laid out like torchvision's ImageFolder.

    folder/<class name>/<any subfolders>/<image>.{jpg,jpeg,png,bmp,webp}

Classes are the non-hidden subfolders that hold at least one image, sorted by name; class i is the
label i. Empty class folders are skipped with a warning. The run's `n_samples` and `num_classes` are
ignored: the workload has every image it finds and as many classes as there are class folders.
The transform is the jpeg workload's (random-resized-crop, flip, normalize).

    python -m engine run --workload folder --folder ~/data/imagenette/train --image-size 160
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.errors import ConfigError
from engine.workloads._base import SeededDataset, sample_seed
from engine.workloads._image import IMAGE_EXTENSIONS, load_rgb, train_transform

__all__ = ["FolderWorkload"]

log = logging.getLogger(__name__)

_LAYOUT = "lay it out as FOLDER/<class name>/<image>.jpg (extensions: " + ", ".join(IMAGE_EXTENSIONS) + ")"


def _is_image(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _class_dirs(root: Path) -> list[Path]:
    try:
        with os.scandir(root) as it:
            return sorted(Path(e.path) for e in it if not e.name.startswith(".") and e.is_dir())
    except OSError as e:
        raise ConfigError("folder", f"'{root}' cannot be read ({e.strerror or e}); check its permissions") from None


def _images(class_dir: Path, first_only: bool = False) -> list[str]:
    """Image paths under class_dir, sorted, recursive (symlinks followed). Unreadable subfolders are an error."""

    def fail(e: OSError) -> None:
        raise ConfigError("folder", f"'{e.filename}' cannot be read ({e.strerror or e}); check its permissions")

    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(class_dir, onerror=fail, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))  # sorted: a stable index order
        for name in sorted(filenames):
            if _is_image(name):
                found.append(os.path.join(dirpath, name))
                if first_only:
                    return found
    return found


class FolderWorkload(SeededDataset):
    """ImageFolder-style images; `classes` holds the class folder names in label order."""

    def __init__(self, cfg: Any):
        self.check(cfg)
        super().__init__(cfg)
        self.root = Path(cfg.folder).expanduser().resolve()
        self.classes: list[str] = []
        self.paths: list[str] = []
        labels: list[int] = []
        for class_dir in _class_dirs(self.root):
            images = _images(class_dir)
            if not images:
                log.warning("skipping %s: it holds no images", class_dir)
                continue
            labels.extend([len(self.classes)] * len(images))
            self.classes.append(class_dir.name)
            self.paths.extend(images)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.num_classes = len(self.classes)
        self._len = len(self.paths)
        log.info("folder %s: %d images in %d classes", self.root, self._len, self.num_classes)

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Cheap: the folder exists, is readable, and its first class folder with an image is found."""
        if not cfg.folder:
            raise ConfigError("folder", "the folder workload needs --folder PATH, a directory of class subfolders")
        root = Path(cfg.folder).expanduser()
        if not root.exists():
            raise ConfigError("folder", f"'{root}' does not exist; pass a directory with one subfolder per class")
        if not root.is_dir():
            raise ConfigError(
                "folder", f"'{root}' is a file, not a directory; pass the directory that holds one subfolder per class"
            )
        if not any(_images(d, first_only=True) for d in _class_dirs(root)):
            loose = any(_is_image(p.name) for p in root.iterdir())
            hint = "; the images sit directly in it: move them into one subfolder per class" if loose else ""
            raise ConfigError("folder", f"'{root}' has no class subfolders with images; {_LAYOUT}{hint}")

    def _load(self, epoch: int, index: int) -> tuple[torch.Tensor, int]:
        path = self.paths[index]
        try:
            img = load_rgb(path)
        except OSError as e:
            raise RuntimeError(f"image '{path}' cannot be decoded ({e}); remove or replace it") from e
        x = train_transform(img, self.image_size, np.random.default_rng(sample_seed(self.seed, epoch, index)))
        return x, int(self.labels[index])
