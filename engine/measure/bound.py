"""Lower bound and efficiency: how close a run came to what its loader and its model allow.

Two calibration passes, measured after the run in the same process:
  loader-only   iterate one epoch of the loader, no model (steady time and time to first batch)
  compute-only  the same epoch's batches already on the device, replayed through a fresh model

    bound      = max(loader steady, compute) + time to first batch
                 (the run's own median steady-state TTFB: a fresh loader's TTFB would charge worker
                 start-up that persistent workers pay only once, and overstate the bound)
    efficiency = bound / median steady-state epoch time          (1.0 = nothing left on the table)
    verdict    = data-bound | compute-bound    when the bound explains >= EXPLAINED of the time,
                 overhead-bound                otherwise (neither pass explains the time)

The compute-only pass follows the mode (the same cached batches in every case):
  single, split     the whole model, one step per batch
  dual-*            model A then model B on each batch: a bound that assumes the two cannot overlap,
                    so efficiency above 1 in a dual mode measures real overlap, not noise alone
  fused             the fused vmapped step of all n_models
  ddp               one model on 1/world_size of the batches (perfect scaling, no communication)

Calibrations are cached per sweep (`<store dir>/calibrations/`), keyed by the fields each pass
depends on, so a sweep that varies only the loader pays for the compute pass once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from engine.config import RunConfig
from engine.runlog import RunLog, read_events

__all__ = ["EXPLAINED", "LOADER_KEYS", "COMPUTE_KEYS", "calibrate", "verdict"]

log = logging.getLogger(__name__)

EXPLAINED = 0.8
_WORKLOAD_KEYS = ("workload", "n_samples", "image_size", "num_classes", "work_us", "latency_ms", "folder", "seed")
LOADER_KEYS = _WORKLOAD_KEYS + ("loader", "workers", "prefetch_depth", "start_method", "persistent_workers",
                                "pin_memory", "batch_size", "device")
COMPUTE_KEYS = ("model", "width", "depth", "optimizer", "lr", "batch_size", "device", "image_size", "num_classes",
                "n_samples", "workload", "folder", "mode", "n_models", "lr_spread", "model_b", "width_b",
                "world_size")
_MAX_REPLAY_BYTES = 1 << 30  # replay at most 1 GiB of batches, then scale by the batch count


def verdict(loader_s: float, compute_s: float, efficiency: float) -> str:
    if efficiency < EXPLAINED:
        return "overhead-bound"
    return "data-bound" if loader_s >= compute_s else "compute-bound"


def calibrate(cfg: RunConfig, device: torch.device, runlog: RunLog, run_dir: Path) -> dict[str, Any]:
    """Measure (or reuse) both passes, log them, and return the summary figures for the run row."""
    events = read_events(run_dir)
    start = next(e for e in events if e["type"] == "start")
    steady_events = [e for e in events if e["type"] == "epoch" and not e["warmup"]]
    steady = _epoch_walls(steady_events)
    if not steady:
        return {}
    scope = start.get("sweep_id") or start["run_id"]
    cache = run_dir.parent.parent / "calibrations"
    loader = _cached(cache, scope, "loader", cfg, LOADER_KEYS, lambda: _loader_pass(cfg, device), runlog)
    compute = _cached(cache, scope, "compute", cfg, COMPUTE_KEYS, lambda: _compute_pass(cfg, device), runlog)
    measured = statistics.median(steady)
    ttfb = statistics.median(e["ttfb_s"] for e in steady_events)
    bound_s = max(loader["seconds"], compute["seconds"]) + ttfb
    efficiency = bound_s / measured if measured > 0 else None
    return {"bound_s": bound_s, "efficiency": efficiency, "loader_only_s": loader["seconds"],
            "compute_only_s": compute["seconds"], "calib_ttfb_s": loader["ttfb_s"], "bound_ttfb_s": ttfb,
            "verdict": verdict(loader["seconds"], compute["seconds"], efficiency or 0.0)}


def _epoch_walls(epochs: list[dict[str, Any]]) -> list[float]:
    """Per epoch: the wall time from the first model/rank's start to the last one's end."""
    by_epoch: dict[int, list[dict[str, Any]]] = {}
    for e in epochs:
        by_epoch.setdefault(e["epoch"], []).append(e)
    return [max(e["t_end"] for e in group) - min(e["t_start"] for e in group) if len(group) > 1
            else group[0]["wall_s"] for group in by_epoch.values()]


def _cached(cache: Path, scope: str, kind: str, cfg: RunConfig, keys: tuple[str, ...], measure: Any,
            runlog: RunLog) -> dict[str, float]:
    key = hashlib.sha1(json.dumps([scope, kind, [getattr(cfg, k) for k in keys]]).encode()).hexdigest()[:16]
    path = cache / f"{key}.json"
    if path.exists():
        result = json.loads(path.read_text())
        runlog.write("calibration", kind=kind, cached=True, **result)
        return result
    result = measure()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)
    runlog.write("calibration", kind=kind, cached=False, **result)
    return result


def _loader_pass(cfg: RunConfig, device: torch.device) -> dict[str, float]:
    from engine.modes._base import to_device  # noqa: PLC0415
    from engine.registry import LOADERS, WORKLOADS  # noqa: PLC0415

    dataset = WORKLOADS[cfg.workload](cfg)
    with LOADERS[cfg.loader](dataset, cfg, device) as loader:
        # epoch 1 (not 0) so persistent workers and generated files are already warm, like steady epochs
        t0 = time.perf_counter()
        first = None
        for batch in loader.epoch(1):
            x, _ = to_device(batch, device)  # the copy is the loader's to hide, so it counts here
            if first is None:
                first = time.perf_counter()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        end = time.perf_counter()
    first = first or end
    return {"seconds": end - first, "ttfb_s": first - t0}


def _compute_pass(cfg: RunConfig, device: torch.device) -> dict[str, float]:
    from engine.loaders._base import epoch_batches  # noqa: PLC0415
    from engine.registry import LOADERS, WORKLOADS  # noqa: PLC0415

    dataset = WORKLOADS[cfg.workload](cfg.replace(latency_ms=0.0, work_us=0))
    n_batches = len(epoch_batches(len(dataset), cfg.batch_size, cfg.seed, 1))
    per_batch = cfg.batch_size * 4 * (1 + dataset.sample_shape[0] * dataset.sample_shape[1] * dataset.sample_shape[2])
    keep = max(1, min(n_batches, _MAX_REPLAY_BYTES // per_batch))
    batches = []
    with LOADERS["sync"](dataset, cfg.replace(loader="sync", workers=0), torch.device("cpu")) as loader:
        for i, (x, y) in enumerate(loader.epoch(1)):
            if i >= keep:
                break
            batches.append((x.to(device), y.to(device)))
    steps = _mode_steps(cfg, dataset, device)
    seconds = 0.0
    for step in steps:  # dual modes: model A's pass, then model B's
        step(*batches[0])  # one untimed step: allocator and kernel selection
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for x, y in batches:
            step(x, y)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += (time.perf_counter() - t0) * n_batches / len(batches)
    if cfg.mode == "ddp":
        seconds /= cfg.world_size
    return {"seconds": seconds, "ttfb_s": 0.0}


def _mode_steps(cfg: RunConfig, dataset: Any, device: torch.device) -> list[Any]:
    """The training step(s) whose cost bounds the mode's compute, as callables of (x, y)."""
    from engine.models._base import make_optimizer  # noqa: PLC0415
    from engine.modes._common import build_model  # noqa: PLC0415
    from engine.modes.single import train_step  # noqa: PLC0415

    if cfg.mode == "fused":
        from engine.modes.fused import FusedStep, model_lrs  # noqa: PLC0415

        models = [build_model(cfg, dataset, i, device) for i in range(cfg.n_models)]
        return [FusedStep(models, cfg.optimizer, model_lrs(cfg))]
    n = 2 if cfg.mode.startswith("dual-") else 1
    steps = []
    for i in range(n):
        model = build_model(cfg, dataset, i, device, dual=n == 2)
        opt = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
        steps.append(lambda x, y, m=model, o=opt: train_step(m, o, x, y))
    return steps
