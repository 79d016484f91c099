"""Predict the steady epoch time of a loader setting before running it, from a capacity model of this machine and
this pipeline (the probe, engine/predict/probe.py).

    python -m engine predict --workload jpeg --model cnn                      # every tune candidate, ranked
    python -m engine predict --workload jpeg --model cnn --loader processes --workers 2 --threads 1

The model, per batch (b samples; probe figures scaled per sample when the batch size differs):

    latency   L = load wall - load CPU          (sleeps, I/O: any number of workers overlap it)
    work      W = load CPU                      (needs a core; a share g of it holds the GIL)
    producer  sync, prefetch   L + W            one thread makes every batch
              threads   (w)    (L + (1-g) W) / w + g W     the GIL-held share never runs on two threads
              processes (w)    (L + W) / w
    compute   C(t) = C1 ((1 - q) + q / t)       Amdahl's law through the probe's 1-thread and default-thread steps
                                                (t: the run's intra-op threads, at most the usable cores)
              past the cores (t + w runnable > cores, a loader beside the step): C + min(W / w, C) (s - 1),
                                                s = (t + w) / cores: the step time-sliced with the producers' work;
                                                C = C(1) when t > 1 (a time-sliced OpenMP team loses its speed-up)
    cores     (W + step CPU) / usable cores     step CPU: its busy work; when runnable threads (t + workers)
                                                outnumber the cores, what its t threads burn (OpenMP spins on
                                                a core a worker wants), and their spin after it (measured)

    epoch     = the largest of      data      waves of w batches (w producers start together) x w x producer
                                              + one step
                                    compute   first batch + batches x compute
                                    cores     batches x cores
                (a sync loader on a CPU cannot overlap: batches x (producer + compute))

The largest term names the limit in the bound's words (engine/measure/verdicts.py): data-bound, compute-bound,
cpu-bound, no-overlap. Predictions cover the single mode; other modes' loops (two models, pipelines, ranks)
are not modelled and get none.

Accuracy is measured, not assumed: `bench/predict.py` fits on one probe and compares with measured medians of
settings it never saw (bench/RESULTS.md, "Predict before you run").
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.measure.verdicts import serial_kind

if TYPE_CHECKING:  # annotations only
    from engine.config import RunConfig

__all__ = ["MODES", "Prediction", "load_probe", "predict", "probe_path", "rank", "save_probe"]

MODES = ("single",)  # the modes the model covers
_SLOWER = -4.0  # the least Amdahl share: a step at n threads at most 1 - q (1 - 1/n) = 3x slower at 2 threads


@dataclass(frozen=True)
class Prediction:
    """A predicted steady epoch and what limits it. terms: the per-epoch seconds of each limit (the verdict
    names); runnable: intra-op threads + loader threads, against `cores`; scaled: the batch size differs from
    the probe's, so per-sample costs were scaled (less sure)."""

    epoch_s: float
    limit: str
    terms: dict[str, float]
    runnable: int
    cores: float
    scaled: bool = False

    @property
    def oversubscribed(self) -> bool:
        return self.runnable > self.cores


def predict(cfg: RunConfig, probe: dict[str, Any], cores: float | None = None) -> Prediction | None:
    """The steady epoch of cfg's loader setting on a machine with `cores` usable CPUs (default: the probe's);
    None for a mode the model does not cover."""
    if cfg.mode not in MODES:
        return None
    cores = float(cores or probe["cores"])
    per_sample = cfg.batch_size / probe["batch_size"]
    batches = math.ceil(probe["n_samples"] / cfg.batch_size)
    work = probe["load_cpu_s"] * per_sample
    latency = max(0.0, probe["load_wall_s"] * per_sample - work)
    threads = min(cfg.threads or probe["default_threads"], max(1, int(cores)))
    step_wall, step_cpu, spin_cpu = _step(probe, threads)
    step_wall, step_cpu, spin_cpu = step_wall * per_sample, step_cpu * per_sample, spin_cpu * per_sample
    loader_threads = {"sync": 0, "prefetch": 1}.get(cfg.loader, cfg.workers)
    runnable = threads + loader_threads
    on_cpu = probe["device"] == "cpu"
    # NOTE: past the cores, the intra-op threads' spinning takes cores the loader wants: while the step runs, and
    # after it while the loop waits for the next batch (the probe measures how long OpenMP spins then)
    after = probe.get("spin_after_step_s", 0.0) * (threads - 1) / max(1, probe["default_threads"] - 1)
    busy = spin_cpu + after if on_cpu and runnable > cores else step_cpu
    if on_cpu and cfg.loader != "sync" and runnable > cores:
        # NOTE: an OpenMP team time-sliced with the loader's producers loses its parallel speed-up (each barrier waits
        # for the thread that is off its core): on 2 cores a jpeg + cnn step of 22-30 ms on 2 threads read 62-68 ms
        # beside one decoding worker, slower than on 1 thread (43 ms). So it is taken at its one-thread time.
        one = _step(probe, 1)[0] * per_sample if threads > 1 else step_wall
        step_wall = _shared_step(max(step_wall, one), work, loader_threads, runnable / cores)
    produce = _producer(cfg, latency, work, probe.get("gil_share"))
    cpu = batches * (work + busy) / cores
    if on_cpu and cfg.loader == "sync":  # one thread loads, then steps: nothing overlaps
        terms = {serial_kind(produce, step_wall): batches * (produce + step_wall), "cpu-bound": cpu}
    else:
        # the first batch is waited for in full (one producer makes it), the last batch's step runs after it; w
        # producers start together, so batches come in waves of w (8 batches, 4 workers: 2 waves, not 1 + 7/4)
        first = latency + work
        producers = max(1, loader_threads) if cfg.loader in ("threads", "processes", "spdl") else 1
        terms = {"data-bound": math.ceil(batches / producers) * producers * produce + step_wall,
                 "compute-bound": first + batches * step_wall, "cpu-bound": cpu}
    limit = max(terms, key=terms.__getitem__)
    return Prediction(terms[limit], limit, terms, runnable, cores, per_sample != 1.0)


def rank(configs: list[RunConfig], probe: dict[str, Any], cores: float | None = None
         ) -> list[tuple[RunConfig, Prediction]]:
    """The configs the model covers, fastest predicted first (ties keep their order)."""
    predicted = [(c, predict(c, probe, cores)) for c in configs]
    return sorted(((c, p) for c, p in predicted if p is not None), key=lambda cp: cp[1].epoch_s)


def _producer(cfg: RunConfig, latency: float, work: float, gil: float | None) -> float:
    """Seconds per batch the loader's producers need, cores aside (the cores term charges those)."""
    if cfg.loader in ("threads", "spdl"):  # spdl's stages run on `workers` threads: the same GIL share applies
        g = 1.0 if gil is None else gil  # NOTE: unmeasured (one core): assume the worst, GIL-bound
        return (latency + (1 - g) * work) / max(1, cfg.workers) + g * work
    if cfg.loader == "processes":
        return (latency + work) / max(1, cfg.workers)
    return latency + work


def _shared_step(step: float, work: float, producers: int, share: float) -> float:
    """The step's wall time when its threads and the loader's producers outnumber the cores (share = runnable /
    cores > 1). Processor sharing: while all are runnable each gets 1/share of a core; the producers make one batch
    (`work` CPU-seconds) per step between them, each its 1/producers, so the step runs slowed for as long as that
    overlaps it, then alone. NOTE: on 2 cores, jpeg + cnn on 1 thread, 8 batches of 40 ms decoding: beside 2 and 4
    process workers the epochs read 0.472 and 0.499 s; with those runs' own 43 ms step this gives 53 and 58 ms a
    step, 0.46 and 0.50 s an epoch (without it, 0.38 s for both)."""
    return step + min(work / max(1, producers), step) * (share - 1)


def _step(probe: dict[str, Any], threads: int) -> tuple[float, float, float]:
    """Per step at `threads` intra-op threads: wall, CPU of busy work, CPU its threads burn (spins included)."""
    one = probe["compute"]["1"]
    n = probe["default_threads"]
    many = probe["compute"].get(str(n), one)
    parallel = 0.0
    if n > 1 and one["wall_s"] > 0:
        # Amdahl: many = one ((1 - q) + q / n). NOTE: q below 0 is a step that threads slow down (a small model:
        # more synchronising than work), measured as 0.6 s at 2 threads against 0.44 s at 1 on a 2-core box
        parallel = min(1.0, max(_SLOWER, (1 - many["wall_s"] / one["wall_s"]) * n / (n - 1)))
    wall = one["wall_s"] * ((1 - parallel) + parallel / threads)
    thread_s = n * many["wall_s"]
    spin = many["cpu_s"] * (threads * wall) / thread_s if thread_s > 0 else one["cpu_s"]
    return wall, one["cpu_s"], max(one["cpu_s"], spin)


def probe_path(calibrations: Path, cfg: RunConfig, machine: str, device: str) -> Path:
    """Where cfg's probe lives: keyed by the pipeline (PROBE_KEYS), the machine and the device type, not by the
    loader or the sweep, so every run of the pipeline on this host finds it."""
    # NOTE: here, not at the top: the probe's module imports torch, which the CLI's parent and the pages must not load
    from engine.predict.probe import PROBE_KEYS
    key = [machine, device, [getattr(cfg, k) if k != "device" else device for k in PROBE_KEYS]]
    return calibrations / f"probe-{hashlib.sha1(json.dumps(key).encode()).hexdigest()[:16]}.json"


def load_probe(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def save_probe(path: Path, probe: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{id(probe)}.tmp")
    tmp.write_text(json.dumps(probe))
    tmp.replace(path)
