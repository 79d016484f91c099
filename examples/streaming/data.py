"""The streaming example: parquet shards of JPEG bytes and labels, read a row group at a time, decoded and augmented.

This is the shape of Hugging Face datasets' parquet exports and of tar-shard formats (WebDataset, MosaicML
Streaming): a folder of shard files, each holding many encoded samples, read sequentially. `build(folder=...)`
reads every `*.parquet` file of a folder with a `jpeg` (binary) and a `label` (integer) column. Without one, it
makes a small synthetic set the first time (no download) under $LOADERLAB_DATA/datasets or data/datasets.

The dataset exposes its shards (`shards()`: one per row group, `iter_shard(shard)`), so LoaderLab splits them
over workers and ranks: every worker reads only its own row groups. Randomness comes from
`engine.plugins.item_rng()`, seeded by LoaderLab per item, so `thread_safe = True` holds.

    python -m engine run --workload examples.streaming.data:build --model examples.own_pipeline.nets:resnet \
        --loader processes --workers 2 --check-samples
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from PIL import Image, ImageDraw
from torch.utils.data import IterableDataset

from engine.plugins import item_rng

__all__ = ["ParquetJpegs", "build", "make_shards"]

_ROWS_PER_GROUP = 64  # samples per row group: the unit a worker reads at once


class ParquetJpegs(IterableDataset):
    """Rows (jpeg bytes, label) of parquet shards -> (float32 [3, S, S], int label, key 'file:row')."""

    thread_safe = True  # every random draw comes from item_rng(), this thread's own generator

    def __init__(self, folder: str | Path, image_size: int):
        self.files = sorted(str(p) for p in Path(folder).glob("*.parquet"))
        if not self.files:
            raise ValueError(f"no *.parquet files in {folder}; point --folder at a folder of parquet shards")
        metas = [pq.ParquetFile(f).metadata for f in self.files]
        self.groups = [(f, g) for f, m in zip(self.files, metas) for g in range(m.num_row_groups)]
        # each row group's first row in its file: the rows' keys say where they came from
        self.first = {
            (f, g): sum(m.row_group(k).num_rows for k in range(g))
            for (f, g), m in zip(self.groups, (metas[self.files.index(f)] for f, _ in self.groups))
        }
        self.rows = sum(m.num_rows for m in metas)
        # the label column alone is cheap to read: the classes are the labels the shards hold
        self.num_classes = max(
            2, 1 + max(int(pc.max(pq.read_table(f, columns=["label"])["label"]).as_py() or 0) for f in self.files)
        )
        self.image_size = image_size

    def __len__(self) -> int:
        return self.rows  # LoaderLab checks that each epoch delivers each row once

    def shards(self) -> list[tuple[str, int]]:
        return self.groups

    def iter_shard(self, shard: tuple[str, int]) -> Iterator[tuple[torch.Tensor, int, str]]:
        path, group = shard
        table = pq.ParquetFile(path).read_row_group(group, columns=["jpeg", "label"])
        first = self.first[(path, group)]
        for i, (jpeg, label) in enumerate(zip(table["jpeg"].to_pylist(), table["label"].to_pylist())):
            yield self._decode(jpeg), int(label), f"{Path(path).name}:{first + i}"

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int, str]]:
        for shard in self.groups:
            yield from self.iter_shard(shard)

    def _decode(self, jpeg: bytes) -> torch.Tensor:
        """Decode, random-resized crop, flip, brightness jitter, scale to [-1, 1]."""
        rng = item_rng()
        with Image.open(io.BytesIO(jpeg)) as img:
            img = img.convert("RGB")
        w, h = img.size
        side = int(min(w, h) * rng.uniform(0.6, 1.0))
        x0, y0 = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
        img = img.resize((self.image_size, self.image_size), Image.BILINEAR, box=(x0, y0, x0 + side, y0 + side))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 127.5 - 1.0  # [3, S, S]
        return torch.from_numpy(x * np.float32(rng.uniform(0.8, 1.2)))


def _jpeg(rng: np.random.Generator, label: int) -> bytes:
    """A 64x64 JPEG: noise, and a square whose colour and place depend on the label."""
    img = Image.fromarray(rng.integers(0, 96, (64, 64, 3), dtype=np.uint8))
    colour = ((label * 71) % 256, (label * 113 + 60) % 256, (label * 29 + 140) % 256)
    x, y = int(rng.integers(8, 40)), int(rng.integers(8, 40))
    ImageDraw.Draw(img).rectangle((x, y, x + 16, y + 16), fill=colour)
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def make_shards(root: Path, n_samples: int, num_classes: int, seed: int, n_shards: int = 4) -> Path:
    """n_samples rows over n_shards parquet files of _ROWS_PER_GROUP-row groups; made once (a rename), then reused."""
    if not root.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
        _write_shards(tmp, n_samples, num_classes, seed, n_shards)
        try:
            os.rename(tmp, root)
        except OSError:  # another run made it first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def _write_shards(folder: Path, n_samples: int, num_classes: int, seed: int, n_shards: int) -> None:
    rng = np.random.default_rng(seed)
    for s in range(n_shards):
        rows = range(s, n_samples, n_shards)
        labels = [i % num_classes for i in rows]
        table = pa.table(
            {"jpeg": pa.array([_jpeg(rng, y) for y in labels], pa.binary()), "label": pa.array(labels, pa.int32())}
        )
        pq.write_table(table, folder / f"shard-{s:05d}.parquet", row_group_size=_ROWS_PER_GROUP)


def build(*, seed: int, image_size: int, num_classes: int, n_samples: int, folder: str = "", **_: Any) -> ParquetJpegs:
    """LoaderLab calls this with every config field as a keyword. --folder: your own shards; else synthetic ones."""
    if not folder:
        base = Path(os.environ.get("LOADERLAB_DATA") or Path(__file__).resolve().parents[2] / "data") / "datasets"
        base.mkdir(parents=True, exist_ok=True)
        classes = num_classes  # the --num-classes given, or the lab's default while it is 0 (auto)
        folder = str(make_shards(base / f"streaming-{n_samples}-{classes}-{seed}", n_samples, classes, seed))
    return ParquetJpegs(folder, image_size)
