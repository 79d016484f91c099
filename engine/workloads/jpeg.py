"""The `jpeg` workload: real JPEG files on disk, decoded and augmented per sample like an ImageNet loader.

On first use it writes N = n_samples synthetic 256x256 JPEGs (quality 90) under
`datasets_dir()/jpeg-n{N}-s{seed}/` with a `manifest.json` (parameters; per file: path, visual class,
bytes, sha256). Later runs reuse them. Integrity, kept cheap:
  * on open, every file's size is compared with the manifest; missing or resized files are regenerated;
  * at read time, a file that fails to decode is regenerated once and read again; if it still fails,
    the error names the file and says to delete the dataset folder.
Images depend only on (seed, index), so a regenerated file is identical to the original.
Generation takes an exclusive fcntl lock on a sibling `.lock` file and writes each file atomically
(temporary name, then os.replace), so concurrent runs and workers never see a half-written file.

Labels: image `i` is drawn in visual class `i % 1000` (its palette and shape kind), and its label is
`visual_class % num_classes`, so one set of files serves every num_classes.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from tqdm import tqdm

from engine import paths
from engine.errors import ConfigError
from engine.workloads import _spdl_decode
from engine.workloads._base import SeededDataset, sample_seed
from engine.workloads._image import load_rgb, render_jpeg, train_transform

__all__ = ["JpegWorkload", "dataset_dir", "ensure_dataset"]

log = logging.getLogger(__name__)

VISUAL_CLASSES, SIDE, QUALITY = 1000, 256, 90
_PARAMS_VERSION = 1
_EST_BYTES_PER_IMAGE = 24_000  # above a rendered image's usual size, so the disk-space check errs toward refusing


def dataset_dir(n: int, seed: int) -> Path:
    return paths.datasets_dir() / f"jpeg-n{n}-s{seed}"


def _relpath(index: int) -> str:
    return f"{index // 1000:04d}/{index:07d}.jpg"  # shards of 1000 keep directories small


def _params(n: int, seed: int) -> dict[str, Any]:
    return {
        "version": _PARAMS_VERSION,
        "n": n,
        "seed": seed,
        "side": SIDE,
        "quality": QUALITY,
        "visual_classes": VISUAL_CLASSES,
    }


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, even if this process dies
        yield


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _generate(root: Path, seed: int, index: int) -> dict[str, Any]:
    data = render_jpeg(seed, index, index % VISUAL_CLASSES, SIDE, QUALITY)
    _write_atomic(root / _relpath(index), data)
    return {
        "file": _relpath(index),
        "label": index % VISUAL_CLASSES,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _read_manifest(root: Path, n: int, seed: int) -> list[dict[str, Any]] | None:
    try:
        manifest = json.loads((root / "manifest.json").read_text())
        if manifest["params"] == _params(n, seed) and len(manifest["files"]) == n:
            return manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def ensure_dataset(n: int, seed: int, only: list[int] | None = None) -> Path:
    """Make `dataset_dir(n, seed)` complete and return it. `only`: regenerate just these indices."""
    root = dataset_dir(n, seed)
    with _locked(root):
        files = _read_manifest(root, n, seed)
        if files is None:
            todo, files = list(range(n)), [{}] * n
        elif only is not None:
            todo = list(only)
        else:
            todo = [i for i, f in enumerate(files) if _size(root / f["file"]) != f["bytes"]]
        if not todo:
            return root
        log.info("writing %d of %d JPEGs under %s", len(todo), n, root)
        # NOTE: threads help because Pillow releases the GIL while it resizes, draws and encodes.
        with (
            ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool,
            tqdm(
                total=len(todo), desc=f"generating {root.name}", unit="img", file=sys.stderr, delay=2.0, mininterval=1.0
            ) as bar,
        ):
            for i, entry in zip(todo, pool.map(lambda i: _generate(root, seed, i), todo)):
                files[i] = entry
                bar.update()
        manifest = {"params": _params(n, seed), "files": files}
        _write_atomic(root / "manifest.json", json.dumps(manifest, separators=(",", ":")).encode())
    return root


class JpegWorkload(SeededDataset):
    """Decode + random-resized-crop + flip + normalize of on-disk JPEGs; see the module docstring."""

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.root = ensure_dataset(self._len, self.seed)

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Cheap: is there room for the files? Generates nothing."""
        root = dataset_dir(cfg.n_samples, cfg.seed)
        if (root / "manifest.json").is_file():
            return
        existing = next(p for p in (root, *root.parents) if p.exists())
        if not os.access(existing, os.W_OK):
            raise ConfigError(
                "workload",
                f"the jpeg workload must write its images under {root}, but {existing} "
                "is not writable; set LOADERLAB_DATA to a writable directory",
            )
        need, free = cfg.n_samples * _EST_BYTES_PER_IMAGE, shutil.disk_usage(existing).free
        if need > free:
            raise ConfigError(
                "n_samples",
                f"the jpeg workload would write about {need / 1e9:.1f} GB under {root}, "
                f"but only {free / 1e9:.1f} GB are free; lower n_samples or set "
                "LOADERLAB_DATA to a bigger disk",
            )

    def path_of(self, index: int) -> Path:
        return self.root / _relpath(index)

    def label_of(self, index: int) -> int:
        return (index % VISUAL_CLASSES) % self.num_classes

    def spdl_fetch(self) -> Callable[[Any], tuple[torch.Tensor, int]] | None:
        """This sample decoded by SPDL's own decoders, as SPDL's users run it (the spdl loader's fetch), where
        spdl_io and its FFmpeg libraries load; else None (the loader calls __getitem__: PIL)."""
        return functools.partial(_spdl_decode.decode, self) if _spdl_decode.available() else None

    def _load(self, epoch: int, index: int) -> tuple[torch.Tensor, int]:
        path = self.root / _relpath(index)
        try:
            img = load_rgb(path)
        except OSError as e:
            log.warning("%s cannot be decoded (%s); regenerating it", path, e)
            ensure_dataset(self._len, self.seed, only=[index])
            try:
                img = load_rgb(path)
            except OSError as e2:
                raise RuntimeError(
                    f"{path} cannot be decoded even after regenerating it ({e2}); delete {self.root} and run again"
                ) from e2
        x = train_transform(img, self.image_size, np.random.default_rng(sample_seed(self.seed, epoch, index)))
        return x, (index % VISUAL_CLASSES) % self.num_classes
