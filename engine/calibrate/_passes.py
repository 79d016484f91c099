"""The two calibration passes behind engine/calibrate/bound.py, measured in the run's process after the run."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from engine.loaders import epoch_batches, open_loader, to_device
from engine.measure import tree_cpu_s
from engine.workloads import build_dataset, is_stream, shard_of

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["compute_pass", "loader_pass", "time_again"]

_MAX_REPLAY_BYTES = 1 << 30  # replay at most 1 GiB of batches, then scale by the batch count
_REPLAYS, _REPLAY_BUDGET_S = 3, 2.0
_LOADER_BUDGET_S = 1.0  # timed loader epochs are repeated only while short: noise weighs on short ones most
# NOTE: a VM's core can run slow for a stretch of a few hundred ms, most often just after it idled (as after a
# dataset's slow first items), and several short replays can all fall inside one (bench/RESULTS.md, "Again, once
# the passes time a short replay until it spans 0.25 s"). Short passes are timed again until they span this long,
# and the fastest kept.
_MIN_TIMED_S = 0.25


def loader_pass(cfg: RunConfig, device: torch.device, shard: tuple[int, int] | None = None) -> dict[str, float]:
    """The run's loader with no model, in steady state: one untimed epoch, then timed epochs of the same loader.

    Returns the fastest timed epoch's seconds after its first batch, its TTFB and cpu_s (the CPU-seconds of the
    whole process tree, loader workers included, over those seconds), and the first epoch's figures apart
    (first_epoch_s, first_ttfb_s: what start-up cost, for the record; the bound never uses them).

    NOTE: the run's steady epochs are epochs of a loader that has already run one: its workers started (a
    spawned worker imports torch, a CUDA build for seconds), its first pinned buffers allocated, a dataset's
    lazy first pass over its items done. A fresh loader's first epoch pays all of that after its first batch
    (workers that come up one by one), which would raise the bound above the epochs it bounds. The warm-up epoch
    at least doubles the pass's time; only steady time bounds.
    """
    dataset = build_dataset(cfg)
    if shard is not None:
        dataset = shard_of(dataset, *shard)
    with open_loader(dataset, cfg, device) as loader:
        # from epoch 1 (not 0): generated files are already warm, and the data order is not the run's first
        first = _loader_epoch(loader, 1, device)
        steady = [_loader_epoch(loader, 2, device)]
        # a short epoch is timed again (time_again: within _LOADER_BUDGET_S), and the fastest kept, as the compute
        # pass keeps its fastest replay: a hiccup from another process would otherwise raise the bound
        while time_again(len(steady), sum(s["ttfb_s"] + s["seconds"] for s in steady), _LOADER_BUDGET_S):
            steady.append(_loader_epoch(loader, 2 + len(steady), device))
    fastest = min(steady, key=lambda s: s["seconds"])
    return {**fastest, "first_epoch_s": first["seconds"], "first_ttfb_s": first["ttfb_s"]}


def _loader_epoch(loader: Any, epoch: int, device: torch.device) -> dict[str, float]:
    """One epoch through the loader and onto the device: seconds after the first batch, the TTFB, the samples,
    and the CPU-seconds of the process tree over the seconds after the first batch."""
    t0 = time.perf_counter()
    first, samples, cpu0 = None, 0, tree_cpu_s()
    for batch in loader.epoch(epoch):
        x, _ = to_device(batch, device)  # the copy is the loader's to hide, so it counts here
        samples += x.shape[0]
        if first is None:
            first, cpu0 = time.perf_counter(), tree_cpu_s()
    _sync(device)
    end, cpu1 = time.perf_counter(), tree_cpu_s()
    first = first or end
    return {"seconds": end - first, "ttfb_s": first - t0, "samples": samples, "cpu_s": cpu1 - cpu0}


def compute_pass(
    cfg: RunConfig,
    device: torch.device,
    build: Callable[[Any], list[Callable]],
    fraction: float = 1.0,
    batches: list | None = None,
) -> dict[str, Any]:
    """The epoch's batches already on `device`, replayed through each step of build(dataset) in turn.

    fraction: the share of the epoch's batches the step sees (ddp: one rank's 1/world).
    batches: (x, y) batches already made (the predictor's probe passes those its load measured: a dataset that waits
    is not read again); per step, the figures are theirs (`batches` in the answer is their count).
    per_step: wall seconds of each step over the epoch; per_step_cpu: the CPU-seconds of busy work it needs.
    """
    dataset = build_dataset(cfg.replace(latency_ms=0.0, work_us=0))
    if batches:
        n_batches = float(len(batches))
        batches = [(x.to(device), y.to(device)) for x, y in batches]
    else:
        n_batches = (
            _stream_batches(dataset, cfg)
            if is_stream(dataset)
            else len(epoch_batches(len(dataset), cfg.batch_size, cfg.seed, 1))
        ) * fraction
        batches = _first_batches(dataset, cfg, device, int(n_batches) or 1)
    per_step, per_step_cpu = [], []
    for step in build(dataset):
        # a split stage's inputs are the earlier stages' outputs, made here, untimed
        inputs = step.prepare(batches) if hasattr(step, "prepare") else batches
        step(*inputs[0])  # one untimed step: allocator and kernel selection
        wall, cpu = _fastest_replay(step, inputs, device)
        scale = n_batches / len(batches)
        per_step.append(wall * scale)
        per_step_cpu.append(min(cpu, _single_thread_cpu(step, inputs, device)) * scale)
    return {
        "seconds": sum(per_step),
        "per_step": per_step,
        "cpu_s": sum(per_step_cpu),
        "per_step_cpu": per_step_cpu,
        "ttfb_s": 0.0,
        "batches": n_batches,
    }


def _first_batches(dataset: Any, cfg: RunConfig, device: torch.device, n: int) -> list:
    """The epoch's first n batches (at most _MAX_REPLAY_BYTES of them), on `device`."""
    per_sample = math.prod(dataset.sample_shape)  # NOTE: any item shape, not only CHW images (user datasets)
    keep = max(1, min(n, _MAX_REPLAY_BYTES // (cfg.batch_size * 4 * (1 + per_sample))))
    batches = []
    with open_loader(dataset, cfg, torch.device("cpu"), loader="sync") as loader:
        for i, (x, y) in enumerate(loader.epoch(1)):
            if i >= keep:
                break
            batches.append((x.to(device), y.to(device)))
    return batches


def _stream_batches(dataset: Any, cfg: RunConfig) -> int:
    """A stream's batches in one epoch read by one part: from its length, else counted by reading an epoch."""
    if dataset.total is not None:
        return math.ceil(dataset.total / cfg.batch_size)
    with open_loader(dataset, cfg, torch.device("cpu"), loader="sync") as loader:
        return sum(1 for _ in loader.epoch(1))


def _fastest_replay(step: Callable, inputs: list, device: torch.device) -> tuple[float, float]:
    """Wall and CPU seconds of the fastest replay of the batches (as many as time_again asks for, within
    _REPLAY_BUDGET_S). The CPU-seconds are the whole process's: on a GPU, what launching costs.

    NOTE: the fastest, because a bound is what the step allows: a replay slowed by another process
    on the machine would raise the bound and pass the slowdown off as the run's efficiency.
    """
    times = [_replay(step, inputs, device)]
    while time_again(len(times), sum(t for t, _ in times), _REPLAY_BUDGET_S):
        times.append(_replay(step, inputs, device))
    return min(times)


def time_again(timed: int, spent_s: float, budget_s: float) -> bool:
    """Whether to time a measurement once more (and keep the fastest): fewer than _REPLAYS timed, or all of them
    inside _MIN_TIMED_S (a stretch in which the core may have run slow throughout); never past the budget. The
    passes and the predictor's probe (engine/predict/probe.py) both ask it."""
    return spent_s < budget_s and (timed < _REPLAYS or spent_s < _MIN_TIMED_S)


def _single_thread_cpu(step: Callable, inputs: list, device: torch.device) -> float:
    """The CPU-seconds of the step's busy work: on a CPU with several intra-op threads, a replay on one thread.

    NOTE: OpenMP threads spin while they wait for work, so the process's CPU time at N threads overstates what
    the step needs from the cores; one thread does the same work without spinning (and without the parallel
    overhead, so this errs low: a lower bound must not overstate). A quarter of the batches, scaled.
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        return float("inf")
    part = inputs[: max(1, len(inputs) // 4)]
    torch.set_num_threads(1)
    try:
        return _replay(step, part, device)[1] * len(inputs) / len(part)
    finally:
        torch.set_num_threads(threads)


def _replay(step: Callable, inputs: list, device: torch.device) -> tuple[float, float]:
    """Wall seconds to the end of the device's work, and the CPU-seconds the host spent issuing it.

    NOTE: the CPU reading is taken before the final synchronize: on CUDA the host spins in it while the GPU
    finishes, and those CPU-seconds (up to the whole wall time) are no work the step asks of the cores; counted,
    they inflated the bound's cores term on GPU hosts with few cores. On a CPU the sync is a no-op."""
    _sync(device)
    t0, cpu0 = time.perf_counter(), tree_cpu_s()
    for x, y in inputs:
        step(x, y)
    cpu1 = tree_cpu_s()
    _sync(device)
    return time.perf_counter() - t0, cpu1 - cpu0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
