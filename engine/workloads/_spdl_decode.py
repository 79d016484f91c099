"""The `jpeg` workload's sample decoded by SPDL's own decoders (spdl.io, FFmpeg's, GIL-free), as SPDL's users run it:
the spdl loader takes this path where spdl_io imports and its FFmpeg libraries load (`available()`), and the dataset's
own __getitem__ (PIL) everywhere else, a plugin's included.

The sample is the PIL path's: the same crop box and flip from the same per-sample seed, the same normalisation;
FFmpeg's crop, bilinear scale and flip replace PIL's. spdl_io needs FFmpeg's shared libraries (4 to 7; Debian 12:
libavfilter8 libavformat59 libavcodec59 libavdevice59 libswscale6 libswresample4).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from types import ModuleType
from typing import Any

import numpy as np
import torch

try:  # NOTE: optional (requirements.txt pins it, FFmpeg's libraries may still be missing): without it, PIL's path
    import spdl.io as _spdl_io

    spdl_io: ModuleType | None = _spdl_io
except ImportError:
    spdl_io = None

from engine.workloads._base import sample_seed
from engine.workloads._image import _OFFSET, _SCALE, crop_box

__all__ = ["OFF_ENV", "available", "decode"]

log = logging.getLogger(__name__)


OFF_ENV = "LOADERLAB_SPDL_DECODERS"  # "0": the spdl loader decodes with PIL (bench/spdl_decoders.py compares both)


def available() -> bool:
    """Whether spdl_io imports and decodes (its FFmpeg libraries load), unless OFF_ENV is "0"."""
    return os.environ.get(OFF_ENV) != "0" and _loads()


@functools.cache
def _loads() -> bool:
    """Whether spdl_io's library loads: checked once per process."""
    if spdl_io is None:
        log.info("spdl_io is not installed: the spdl loader decodes with PIL")
        return False
    try:
        # NOTE: spdl.io.lib hands out a lazily imported module: only a read of one of its names loads the library
        _ = spdl_io.lib._libspdl.make_demuxer  # noqa: SLF001 - raises where no FFmpeg library loads
    except (ImportError, RuntimeError, AttributeError, OSError) as err:
        log.info("spdl_io's decoders are not available (%s): the spdl loader decodes with PIL", err)
        return False
    return True


def decode(dataset: Any, key: Any) -> tuple[torch.Tensor, int]:
    """dataset[key] for the jpeg workload (engine/workloads/jpeg.py), decoded, cropped, scaled and flipped by
    FFmpeg through spdl.io: float32 (3, size, size), ImageNet-normalised, and the label."""
    epoch, index = dataset._parse_key(key)  # noqa: SLF001 - the dataset's own key rules
    if dataset.latency_s > 0:
        time.sleep(dataset.latency_s)
    path = dataset.path_of(index)
    assert spdl_io is not None  # the loader calls this only where available() holds
    packets = spdl_io.demux_image(str(path))
    rng = np.random.default_rng(sample_seed(dataset.seed, epoch, index))
    x0, y0, x1, y1 = crop_box(packets.width, packets.height, rng)
    size = dataset.image_size
    flip = ",hflip" if rng.random() < 0.5 else ""
    graph = (
        f"crop=w={x1 - x0}:h={y1 - y0}:x={x0}:y={y0},scale=w={size}:h={size}:flags=bilinear{flip},format=pix_fmts=rgb24"
    )
    frames = spdl_io.decode_packets(packets, filter_desc=graph)
    hwc = spdl_io.to_numpy(spdl_io.convert_frames(frames)).reshape(size, size, 3)  # (H, W, 3) uint8
    x = hwc.transpose(2, 0, 1).astype(np.float32, order="C")
    x *= _SCALE
    x -= _OFFSET
    return torch.from_numpy(x), dataset.label_of(index)
