"""Workloads: map-style torch Datasets built from a RunConfig, one per file.

    tensor   in-memory random tensors; work_us of GIL-releasing torch work per sample
    pyloop   the same tensors; work_us of GIL-holding Python work per sample
    jpeg     synthetic JPEGs generated once under data/datasets/, decoded and augmented per sample
    folder   the user's ImageFolder-style directory (--folder), same transform as jpeg
    plugin   not a name: PluginDataset wraps the user's own dataset ('module:callable', engine/plugins/__init__.py)

Every workload takes `(cfg)`, has `num_classes` and `sample_shape`, and answers `ds[index]` or
`ds[(epoch, index)]` with `(x float32 CHW, y int)`, deterministically; see `_base.SeededDataset`.
WORKLOADS maps each name to its class; runs build the dataset, built-in or the user's own, with build_dataset.

    dataset = build_dataset(cfg)
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import IterableDataset

from engine.errors import ConfigError
from engine.names import unique
from engine.plugins import call_factory, is_spec, resolve
from engine.workloads._base import SeededDataset, ShardDataset
from engine.workloads.folder import FolderWorkload
from engine.workloads.jpeg import JpegWorkload
from engine.workloads.plugin import PluginDataset
from engine.workloads.pyloop import PyloopWorkload
from engine.workloads.tensor import TensorWorkload

__all__ = ["FolderWorkload", "JpegWorkload", "PluginDataset", "PyloopWorkload", "SeededDataset", "ShardDataset",
           "TensorWorkload", "WORKLOADS", "build_dataset"]

WORKLOADS = unique("workload", [
    ("tensor", TensorWorkload), ("jpeg", JpegWorkload), ("pyloop", PyloopWorkload), ("folder", FolderWorkload),
])


def build_dataset(cfg: Any) -> Any:
    """The run's dataset: a built-in workload, or the user's factory called with every config field, wrapped."""
    if not is_spec(cfg.workload):
        return WORKLOADS[cfg.workload](cfg)
    inner = call_factory(resolve(cfg.workload, "workload"), cfg.workload, "workload", cfg.to_dict())
    if isinstance(inner, IterableDataset) or not hasattr(inner, "__getitem__"):
        raise ConfigError("workload", f"'{cfg.workload}' returned type {type(inner).__name__}, not a map-style "
                                      "Dataset; return an object with __len__ and __getitem__(index) -> (x, y)")
    return PluginDataset(inner, cfg, cfg.workload)
