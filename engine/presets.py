"""Presets: plain functions that return a RunConfig, one per situation the lab demonstrates.

The launch page offers them in a picker, and as `/launch?preset=<name>` in a link; either fills the form.
From Python (a notebook, a script) start from one and change what differs:

    from engine.presets import PRESETS; cfg = PRESETS["storage_latency"]().replace(workers=8)

Each returns an unvalidated RunConfig (the constructor does not check); `RunConfig.from_dict(cfg.to_dict())`
validates it against this machine's registry and devices, as every other entry point does.
"""

from __future__ import annotations

from typing import Callable

from engine.config import RunConfig

__all__ = ["PRESETS", "gil_bound_pyloop", "jpeg_loaders", "many_small_models", "storage_latency", "tiny_cpu"]


def tiny_cpu() -> RunConfig:
    """Seconds on any laptop: checks that the whole path works before a long sweep."""
    return RunConfig(
        workload="tensor",
        n_samples=256,
        image_size=16,
        width=32,
        batch_size=32,
        epochs=2,
        loader="sync",
        device="cpu",
        bound=False,
        tag="tiny",
    )


def jpeg_loaders() -> RunConfig:
    """JPEG decode + augment per sample: CPU-heavy loading that workers can hide behind compute."""
    return RunConfig(
        workload="jpeg",
        n_samples=2048,
        image_size=64,
        model="cnn",
        width=32,
        batch_size=64,
        epochs=3,
        loader="threads",
        workers=4,
        tag="jpeg",
    )


def gil_bound_pyloop() -> RunConfig:
    """Per-sample pure-Python work holds the GIL: thread workers stall where process workers do not."""
    return RunConfig(
        workload="pyloop",
        work_us=200,
        n_samples=2048,
        batch_size=64,
        epochs=3,
        loader="processes",
        workers=4,
        tag="gil",
    )


def storage_latency() -> RunConfig:
    """Remote storage emulated by a per-sample sleep: many threads hide the latency cheaply."""
    return RunConfig(
        workload="tensor",
        latency_ms=2.0,
        n_samples=1024,
        batch_size=64,
        epochs=3,
        loader="threads",
        workers=16,
        prefetch_depth=4,
        tag="latency",
    )


def many_small_models() -> RunConfig:
    """Small models leave the device idle; several trained as one fused program share each batch."""
    return RunConfig(
        workload="tensor",
        n_samples=2048,
        width=64,
        batch_size=128,
        epochs=3,
        loader="prefetch",
        mode="fused",
        n_models=8,
        lr_spread=0.5,
        tag="fused",
    )


PRESETS: dict[str, Callable[[], RunConfig]] = {
    fn.__name__: fn for fn in (tiny_cpu, jpeg_loaders, gil_bound_pyloop, storage_latency, many_small_models)
}
