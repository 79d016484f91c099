"""Device names: parse, check and resolve `auto`, `cpu`, `cuda`, `cuda:N`.

A device that this machine lacks is a ConfigError naming the field, never a CUDA traceback later.
"""

from __future__ import annotations

import re
import time

import torch

from engine.errors import ConfigError

__all__ = ["check_device", "init_cuda", "resolve", "set_threads", "threads"]

_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d{1,3})?)$")


def check_device(field_name: str, name: str) -> None:
    if not _PATTERN.match(name):
        raise ConfigError(field_name, f"'{name}' is not a device; use auto, cpu, cuda or cuda:N")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(field_name, f"'{name}' needs CUDA, but this machine has no CUDA GPU; use cpu or auto")
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                field_name, f"'{name}' does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
            )


def resolve(name: str) -> torch.device:
    """`auto` is the first CUDA GPU when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    return torch.device("cuda:0" if name == "cuda" else name)


def set_threads(threads: int) -> None:
    """A run's intra-op threads; 0 = auto: torch's default is left alone (the host fingerprint records it)."""
    if threads > 0:
        torch.set_num_threads(threads)


def threads() -> int:
    """The intra-op threads torch uses now (before set_threads: its default, which the predictor's probe needs)."""
    return torch.get_num_threads()


def init_cuda(device: torch.device) -> float | None:
    """Create the CUDA context on `device` now, so that its cost is timed on its own (a run's start-up phase,
    engine/measure/startup.py) rather than hidden in the first model copy; seconds, or None on CPU."""
    if device.type != "cuda":
        return None
    t = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device=device)  # the context on this device, not only the driver
    torch.cuda.synchronize(device)
    return time.perf_counter() - t
