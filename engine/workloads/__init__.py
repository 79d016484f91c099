"""Workloads: map-style torch Datasets built from a RunConfig, one per file.

    tensor   in-memory random tensors; work_us of GIL-releasing torch work per sample
    pyloop   the same tensors; work_us of GIL-holding Python work per sample
    jpeg     synthetic JPEGs generated once under data/datasets/, decoded and augmented per sample
    folder   the user's ImageFolder-style directory (--folder), same transform as jpeg
    plugin   not a name: PluginDataset wraps the user's own dataset ('module:callable', engine/plugins.py)

Every workload takes `(cfg)`, has `num_classes` and `sample_shape`, and answers `ds[index]` or
`ds[(epoch, index)]` with `(x float32 CHW, y int)`, deterministically; see `_base.SeededDataset`.
"""

from engine.workloads._base import SeededDataset
from engine.workloads.folder import FolderWorkload
from engine.workloads.jpeg import JpegWorkload
from engine.workloads.plugin import PluginDataset
from engine.workloads.pyloop import PyloopWorkload
from engine.workloads.tensor import TensorWorkload

__all__ = ["FolderWorkload", "JpegWorkload", "PluginDataset", "PyloopWorkload", "SeededDataset", "TensorWorkload"]
