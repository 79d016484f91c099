"""Workloads: map-style torch Datasets built from a RunConfig, one per file.

    tensor   in-memory random tensors; work_us of GIL-releasing torch work per sample
    pyloop   the same tensors; work_us of GIL-holding Python work per sample
    jpeg     synthetic JPEGs generated once under data/datasets/, decoded and augmented per sample
    folder   the user's ImageFolder-style directory (--folder), same transform as jpeg
    plugin   not a name: PluginDataset wraps the user's own dataset ('module:callable', engine/plugins/__init__.py)
    stream   not a name: StreamDataset wraps the user's own iterable (an IterableDataset), split over workers and ranks

Every workload takes `(cfg)`, has `num_classes` and `sample_shape`, and answers `ds[index]` or
`ds[(epoch, index)]` with `(x float32 CHW, y int)`, deterministically; see `_base.SeededDataset`.
WORKLOADS maps each name to its class; runs build the dataset, built-in or the user's own, with build_dataset.

    dataset = build_dataset(cfg)
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import IterableDataset

from engine.errors import ConfigError
from engine.names import DEFAULT_CLASSES, unique
from engine.plugins import call_factory, is_spec, resolve
from engine.workloads._base import SeededDataset, ShardDataset
from engine.workloads.folder import FolderWorkload
from engine.workloads.jpeg import JpegWorkload
from engine.workloads.plugin import PluginDataset
from engine.workloads._tally import EpochTally, StreamMismatch
from engine.workloads.pyloop import PyloopWorkload
from engine.workloads.stream import SPLITS, BadStreamItem, StreamDataset, is_stream
from engine.workloads.tensor import TensorWorkload

__all__ = [
    "BadStreamItem",
    "EpochTally",
    "FolderWorkload",
    "JpegWorkload",
    "PluginDataset",
    "PyloopWorkload",
    "SPLITS",
    "SeededDataset",
    "ShardDataset",
    "StreamDataset",
    "StreamMismatch",
    "TensorWorkload",
    "WORKLOADS",
    "build_dataset",
    "is_stream",
    "shard_of",
]

WORKLOADS = unique(
    "workload",
    [
        ("tensor", TensorWorkload),
        ("jpeg", JpegWorkload),
        ("pyloop", PyloopWorkload),
        ("folder", FolderWorkload),
    ],
)


def build_dataset(cfg: Any) -> Any:
    """The run's dataset: a built-in workload, or the user's factory called with every config field, wrapped."""
    if not is_spec(cfg.workload):
        return WORKLOADS[cfg.workload](cfg)
    # NOTE: num_classes auto (0) reaches the factory as the lab's default, so a factory that takes it
    # (`% num_classes`, a head of that width) gets a usable count; its dataset's own num_classes, if it declares
    # one, is what the run then uses (engine/workloads/_classes.py)
    fields = {**cfg.to_dict(), "num_classes": cfg.num_classes or DEFAULT_CLASSES}
    inner = call_factory(resolve(cfg.workload, "workload"), cfg.workload, "workload", fields)
    if isinstance(inner, IterableDataset) or (not hasattr(inner, "__getitem__") and hasattr(inner, "__iter__")):
        return StreamDataset(inner, cfg, cfg.workload)  # a stream: split over workers and ranks, checked per epoch
    if not hasattr(inner, "__getitem__"):
        raise ConfigError(
            "workload",
            f"'{cfg.workload}' returned type {type(inner).__name__}, neither a map-style "
            "Dataset nor a stream; return an object with __len__ and __getitem__(index) -> "
            "(x, y), or an iterable of (x, y) (an IterableDataset)",
        )
    return PluginDataset(inner, cfg, cfg.workload)


def shard_of(dataset: Any, rank: int, world: int) -> Any:
    """Rank `rank`'s share of the run's dataset (ddp): samples rank, rank + world, ..., or that rank's stream parts."""
    return dataset.for_rank(rank, world) if is_stream(dataset) else ShardDataset(dataset, rank, world)
