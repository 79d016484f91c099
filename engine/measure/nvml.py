"""NVML for one CUDA device: found by UUID, read counter by counter, its name without a CUDA context.

The GPU is found in NVML by its UUID, not by the CUDA ordinal: under CUDA_VISIBLE_DEVICES (or Ray) cuda:0
is not NVML's device 0. Every read is guarded on its own: a counter that this GPU does not support
(utilisation on a MIG slice, say) returns None from then on; the other counters go on.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pynvml  # nvidia-ml-py: torch imports it too; NVML itself is only opened where a GPU is
import torch

__all__ = ["Gpu", "gpu_facts"]

log = logging.getLogger(__name__)


def _cuda_uuid(index: int) -> str | None:
    """The UUID of CUDA device `index` as this process numbers it (after CUDA_VISIBLE_DEVICES)."""
    try:
        return str(torch.cuda.get_device_properties(index).uuid)
    except Exception as e:  # noqa: BLE001 - no CUDA or an old torch: no UUID, no GPU fields
        log.debug("no CUDA UUID for device %s: %s", index, e)
        return None


class Gpu:
    """NVML handle for one GPU, or nothing when there is no GPU, no NVML or no way to find the right one."""

    def __init__(self, index: int | None):
        self.handle: Any = None
        self._off: set[str] = set()
        if index is None:
            return
        try:
            pynvml.nvmlInit()
            self._nvml = pynvml
            self.handle = self._find(index, _cuda_uuid(index))
        except Exception as e:  # noqa: BLE001 - metrics are best effort; the run goes on without them
            log.debug("no NVML: %s", e)

    def _find(self, index: int, uuid: str | None) -> Any:
        nvml = self._nvml
        if uuid:
            names = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
            for name in names:
                try:
                    return nvml.nvmlDeviceGetHandleByUUID(name)
                except nvml.NVMLError:
                    continue
        if "CUDA_VISIBLE_DEVICES" not in os.environ:  # only then is the CUDA ordinal NVML's index
            return nvml.nvmlDeviceGetHandleByIndex(index)
        log.warning("GPU metrics off: cuda:%d (UUID %s) not found in NVML under CUDA_VISIBLE_DEVICES", index, uuid)
        return None

    def _field(self, name: str, read: Any) -> Any:
        if self.handle is None or name in self._off:
            return None
        try:
            return read(self.handle)
        except self._nvml.NVMLError as e:  # unsupported here (MIG, vGPU): drop this field for the run
            log.info("GPU %s not sampled: %s", name, e)
            self._off.add(name)
            return None

    def read(self) -> tuple[float | None, int | None]:
        util = self._field("utilisation", lambda h: float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu))
        mem = self._field("memory", lambda h: int(self._nvml.nvmlDeviceGetMemoryInfo(h).used))
        return util, mem


def gpu_facts() -> dict[str, Any] | None:
    """Name (of the first visible GPU), visible count and driver from NVML alone, or None without NVML.

    NOTE: not torch.cuda.get_device_name: that initialises CUDA, and the dashboard and the job worker,
    which only want the host fingerprint, would then hold a CUDA context (and its GPU memory) for life.
    """
    try:
        pynvml.nvmlInit()
        try:
            first, count = _first_visible(pynvml)
            name = pynvml.nvmlDeviceGetName(first) if first is not None else None
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - NVML is optional; the caller falls back
        log.debug("NVML unavailable: %s", e)
        return None
    return {"gpu_name": _text(name), "gpu_count": count, "driver": _text(driver)}


def _first_visible(nvml: Any) -> tuple[Any, int]:
    """(handle of what CUDA calls device 0, how many CUDA sees), honouring CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        count = nvml.nvmlDeviceGetCount()
        return (nvml.nvmlDeviceGetHandleByIndex(0) if count else None), count
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    if not entries or entries[0].startswith("-"):
        return None, 0
    first = entries[0]
    handle = nvml.nvmlDeviceGetHandleByIndex(int(first)) if first.isdigit() else nvml.nvmlDeviceGetHandleByUUID(first)
    return handle, len(entries)


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v
