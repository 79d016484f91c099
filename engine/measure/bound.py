"""Lower bound and efficiency: how close a run came to what its loader and its model allow.

Each mode owns its bound (`ModeSpec.bound`, a function `bound(cal)` in its file in engine/modes/): it says
which passes to measure and how they combine, as a list of Phases run one after another (or None: no bound
from this process). What can overlap in a mode decides its phases:

  single, fused       one phase: the loader against the step (fused: the vmapped step of all models)
  dual-sequential     two phases, model A's epoch then model B's, each loading the epoch once
  dual-threads, -processes, -streams
                      one phase: the loader against the slower model's compute, A + B kept as the
                      serial compute so `overlap` says how much of the concurrency was realised
  split               per stage, on the stage's device: naive (1 micro-batch) is the sum of the stages;
                      a pipeline is the busiest device's sum (the rest can overlap)
  ddp                 rank 0 only: its shard through the loader, its share of the batches through one
                      model, at the world size that ran (torchrun's); all-reduce is not in the bound

This module keeps the shared passes (engine/measure/_passes.py) and the arithmetic:

  loader-only   iterate the loader, no model: one warm-up epoch, then one timed (steady time after the first batch)
  compute-only  the epoch's batches already on the device, replayed through the mode's step(s)

    bound      = sum over phases of max(loader, compute) + (phases x the run's median steady TTFB)
                 (the run's own TTFB: a fresh loader's would charge worker start-up that persistent
                 workers pay only once, and overstate the bound)
    efficiency = bound / median steady-state epoch time          (1.0 = nothing left on the table)
    verdict    = data-bound | compute-bound    when the bound explains >= EXPLAINED of the time,
                 overhead-bound                otherwise; none when efficiency > STALE (not a fraction)
    overlap    = concurrent modes only: (serial bound - measured) / (serial bound - bound), where the
                 serial bound charges the models' compute one after another: 0 = no overlap, 1 = perfect,
                 below 0 = slower than one after another; none when serial bound - bound is under
                 OVERLAP_MIN of the epoch (then there is next to nothing to overlap)

Calibrations are cached per (sweep, repeat) under `<store dir>/calibrations/`, keyed by the fields each
pass depends on, so a sweep that varies only the loader pays for the compute pass once per repeat.
Each records when it was taken; `calib_age_s` says how old it was when this run used it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.measure._passes import compute_pass, loader_pass
from engine.runlog import read_events

__all__ = ["COMPUTE_KEYS", "EXPLAINED", "FAIL_ENV", "LOADER_KEYS", "STALE", "Calibrator", "Phase", "calibrate",
           "verdict"]

log = logging.getLogger(__name__)

EXPLAINED = 0.8
FAIL_ENV = "LOADERLAB_FAIL_CALIBRATION"  # test hook: calibration raises, the run must stay `done`
STALE = 1.1  # efficiency above this is no fraction: the bound was measured under other conditions
OVERLAP_MIN = 0.1  # overlap is reported only where the models' serial compute could cost this share of the epoch
_WORKLOAD_KEYS = ("workload", "n_samples", "image_size", "num_classes", "work_us", "latency_ms", "folder", "seed")
LOADER_KEYS = _WORKLOAD_KEYS + ("loader", "workers", "prefetch_depth", "start_method", "persistent_workers",
                                "pin_memory", "batch_size", "device", "threads", "collate")
COMPUTE_KEYS = ("model", "width", "depth", "optimizer", "lr", "batch_size", "device", "image_size", "num_classes",
                "n_samples", "workload", "folder", "mode", "n_models", "lr_spread", "model_b", "width_b",
                "devices", "n_stages", "micro_batches", "threads", "collate", "loss")


@dataclass(frozen=True)
class Phase:
    """A stretch of the epoch in which loading and compute overlap. serial_compute_s: concurrent modes'
    compute if their models ran one after another (for `overlap`)."""

    loader_s: float
    compute_s: float
    serial_compute_s: float | None = None


def verdict(loader_s: float, compute_s: float, efficiency: float) -> str | None:
    if efficiency > STALE:
        return None
    if efficiency < EXPLAINED:
        return "overhead-bound"
    return "data-bound" if loader_s >= compute_s else "compute-bound"


class Calibrator:
    """The shared passes for one run, cached per (sweep, repeat); handed to the mode's bound hook."""

    def __init__(self, ctx: Any, scope: str, cache: Path):
        self.cfg, self.device, self.ctx, self.runlog = ctx.cfg, ctx.device, ctx, ctx.log
        self.scope, self.cache = scope, cache
        self.taken: list[float] = []

    def loader(self, shard: tuple[int, int] | None = None) -> dict[str, float]:
        """One epoch of the run's loader; shard (rank, world): that rank's share only (ddp)."""
        return self._cached("loader", LOADER_KEYS, [shard], lambda: loader_pass(self.cfg, self.device, shard))

    def compute(self, name: str, steps: Callable[[], list[Callable]], fraction: float = 1.0,
                device: Any = None) -> list[float]:
        """Seconds per step callable over one epoch of cached batches (x fraction of the epoch's batches)."""
        dev = device or self.device
        result = self._cached("compute", COMPUTE_KEYS, [name, fraction, str(dev)],
                              lambda: compute_pass(self.cfg, dev, steps, fraction))
        return result["per_step"]

    def _cached(self, kind: str, keys: tuple[str, ...], extra: list[Any], measure: Callable) -> dict[str, Any]:
        key_data = [self.scope, kind, [getattr(self.cfg, k) for k in keys], extra]
        path = self.cache / f"{hashlib.sha1(json.dumps(key_data).encode()).hexdigest()[:16]}.json"
        cached = path.exists()
        if cached:
            result = json.loads(path.read_text())
        else:
            result = {**measure(), "taken_at": time.time()}
            self.cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(result))
            tmp.replace(path)
        self.taken.append(result["taken_at"])
        self.runlog.write("calibration", kind=kind, cached=cached, **{k: v for k, v in result.items()
                                                                      if k not in ("kind", "cached")})
        return result


def calibrate(ctx: Any, run_dir: Path, bound: Callable[[Calibrator], list[Phase] | None]) -> dict[str, Any]:
    """Measure (or reuse) the passes of the mode's `bound`, log them, and return the summary figures for the
    run row."""
    if os.environ.get(FAIL_ENV):
        raise RuntimeError(f"injected calibration failure ({FAIL_ENV} is set)")
    events = read_events(run_dir)
    start = next(e for e in events if e["type"] == "start")
    steady_events = [e for e in events if e["type"] == "epoch" and not e["warmup"]]
    steady = _epoch_walls(steady_events)
    if not steady:
        return {}
    scope = f"{start.get('sweep_id') or start['run_id']}:{start.get('repeat_idx') or 0}"
    cal = Calibrator(ctx, scope, run_dir.parent.parent / "calibrations")
    phases = bound(cal)
    if not phases:  # e.g. a ddp rank other than 0: rank 0 calibrates
        return {}
    measured = statistics.median(steady)
    ttfb = statistics.median(e["ttfb_s"] for e in steady_events)
    return _figures(phases, measured, ttfb, time.time() - min(cal.taken))


def _figures(phases: list[Phase], measured: float, ttfb: float, age_s: float) -> dict[str, Any]:
    loader_s = sum(p.loader_s for p in phases)
    compute_s = sum(p.compute_s for p in phases)
    bound_s = sum(max(p.loader_s, p.compute_s) for p in phases) + ttfb * len(phases)
    efficiency = bound_s / measured if measured > 0 else None
    out: dict[str, Any] = {
        "bound_s": bound_s, "efficiency": efficiency, "loader_only_s": loader_s, "compute_only_s": compute_s,
        "bound_ttfb_s": ttfb, "bound_phases": len(phases), "calib_age_s": age_s,
        "verdict": verdict(loader_s, compute_s, efficiency or 0.0)}
    if efficiency is not None and efficiency > STALE:
        out["bound_note"] = (f"efficiency {efficiency:.2f} > {STALE}: the run beat its lower bound; the calibration, "
                             f"taken {age_s:.0f} s before, ran under other conditions (a busier machine?); no verdict")
    if all(p.serial_compute_s is not None for p in phases):
        serial = sum(max(p.loader_s, p.serial_compute_s) for p in phases) + ttfb * len(phases)
        out["serial_bound_s"] = serial
        # NOTE: only where running the models at once could save a tenth of the epoch: below that the
        # ratio divides noise by next to nothing (a loader-bound dual run gave -796%)
        out["overlap"] = (serial - measured) / (serial - bound_s) if serial - bound_s >= OVERLAP_MIN * measured \
            else None
    return out


def _epoch_walls(epochs: list[dict[str, Any]]) -> list[float]:
    """Per epoch: the wall time from the first model/rank's start to the last one's end."""
    by_epoch: dict[int, list[dict[str, Any]]] = {}
    for e in epochs:
        by_epoch.setdefault(e["epoch"], []).append(e)
    return [max(e["t_end"] for e in group) - min(e["t_start"] for e in group) if len(group) > 1
            else group[0]["wall_s"] for group in by_epoch.values()]
