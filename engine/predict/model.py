"""Predict the steady epoch time of a loader setting before running it, from a capacity model of this machine and
this pipeline (the probe, engine/predict/probe.py).

    python -m engine predict --workload jpeg --model cnn                      # every tune candidate, ranked
    python -m engine predict --workload jpeg --model cnn --loader processes --workers 2 --threads 1

The model, per batch: latency and work of the load (a share of the work holding the GIL), the producers a loader
runs at once, a worker's hand-off, the step by Amdahl's law through the probe's two thread counts (time-sliced
where the runnable threads outnumber the cores), and the cores' CPU. An epoch is the largest of its data, compute,
cores and GIL terms, and the largest names the limit in the bound's words (engine/measure/verdicts.py). The
formulas in full: docs/predict.md, "The model in full".

Each prediction has a range, lo..hi, from the probe's own spread or, with earlier runs, the residuals' spread; two
settings whose ranges overlap cannot be told apart on this machine. With earlier runs of the pipeline on this host
(`prior+runs`, engine/predict/learned.py), a prediction is scaled by the median measured / predicted of its limit
(`adjusted`). Predictions cover the single mode only.

Accuracy is measured, not assumed: `bench/predict.py` fits on one probe and compares with measured medians of
settings it never saw (bench/RESULTS.md, "Predict before you run").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.measure import VERDICTS, serial_kind
from engine.predict.records import Probe

if TYPE_CHECKING:  # annotations only
    from engine.config import RunConfig

__all__ = [
    "GIL_LIMIT",
    "LOADER_SHAPES",
    "MODES",
    "LoaderShape",
    "Prediction",
    "adjusted",
    "apart",
    "load_probe",
    "pool_use",
    "predict",
    "probe_path",
    "rank",
    "residuals",
    "save_probe",
]

MODES = ("single",)  # the modes the model covers
_SLOWER = -4.0  # the least Amdahl share: a step at n threads at most 1 - q (1 - 1/n) = 3x slower at 2 threads
_SPREAD_MIN = 0.03  # NOTE: the least half-width of a range (relative): two windows of one probe never agree exactly
# NOTE: the verdict that names a producer thread and the step taking turns on the GIL, where the vocabulary has it
GIL_LIMIT = "gil-contention" if "gil-contention" in VERDICTS else "cpu-bound"
# the environment that sets the thread pools a probe measures under (its cache key: engine/predict/probe.py)
_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


@dataclass(frozen=True)
class LoaderShape:
    """A loader as the model sees it. threads(workers): the runnable threads it adds beside the training thread;
    producers(workers): how many make batches at once; in_process: its producers are threads of the training
    process (they share its GIL and its hidden pools; else each worker process has pools of its own);
    overlaps: loading overlaps the step (sync's does not); per_sample: each producer makes one sample at a time and
    the batch is gathered from them (else each makes a whole batch)."""

    threads: Callable[[int], int]
    producers: Callable[[int], int]
    in_process: bool
    overlaps: bool = True
    per_sample: bool = False


# NOTE: a loader missing here gets no prediction; a thread-based one (spdl, say) is one more line like `threads`
LOADER_SHAPES: dict[str, LoaderShape] = {
    "sync": LoaderShape(threads=lambda w: 0, producers=lambda w: 1, in_process=True, overlaps=False),
    "prefetch": LoaderShape(threads=lambda w: 1, producers=lambda w: 1, in_process=True),
    "threads": LoaderShape(threads=lambda w: max(1, w), producers=lambda w: max(1, w), in_process=True),
    # spdl: its fetch stage runs on `workers` threads of the training process, so it is shaped as threads.
    # NOTE: at a batch's grain, though its threads fetch samples (concurrency=workers over samples): SPDL's own cost
    # a sample (an asyncio task, two thread hand-offs), which the probe does not measure, outweighed the overlap of
    # waits a sample's grain buys over storage-like reads on 2 busy cores (spdl with 8 and 32 workers ran slower
    # than threads with 8); `per_sample` is how a shape says so, where that cost is measured
    "spdl": LoaderShape(threads=lambda w: max(1, w), producers=lambda w: max(1, w), in_process=True),
    "processes": LoaderShape(threads=lambda w: max(1, w), producers=lambda w: max(1, w), in_process=False),
}


@dataclass(frozen=True)
class Prediction:
    """A predicted steady epoch and what limits it. terms: the per-epoch seconds of each limit (the verdict
    names); runnable: intra-op threads + loader threads + hidden pools' extra threads, against `cores`; scaled: the
    batch size differs from the probe's, so per-sample costs were scaled (less sure); lo..hi: the range the
    probe's spread (or the residuals') allows; source: 'prior' (the probe alone) or 'prior+runs' (adjusted)."""

    epoch_s: float
    limit: str
    terms: dict[str, float]
    runnable: int
    cores: float
    scaled: bool = False
    lo: float = 0.0
    hi: float = 0.0
    source: str = "prior"

    @property
    def oversubscribed(self) -> bool:
        return self.runnable > self.cores


def predict(cfg: RunConfig, probe: Probe, cores: float | None = None) -> Prediction | None:
    """The steady epoch of cfg's loader setting on a machine with `cores` usable CPUs (default: the probe's);
    None for a mode or a loader the model does not cover.

    NOTE: where the hidden pools of the worker processes at work outnumber the cores, the range's high end is the
    epoch with each batch's CPU grown by the probe's collapse (`_collapse`): epochs of one setting are collapsed or
    not by chance (2x and 22x on 2 cores, bench/RESULTS.md), so the figure is the epoch without it, the range both."""
    shape = LOADER_SHAPES.get(cfg.loader)
    if cfg.mode not in MODES or shape is None:
        return None
    cores = float(cores or probe["cores"])
    calm = _predict(cfg, probe, cores, shape)
    collapse = _collapse(cfg, probe, shape, _active(cfg, probe, shape), cores)
    if collapse <= 1:
        return calm
    spun = _predict(cfg, probe, cores, shape, collapse)
    return replace(calm, hi=max(calm.hi, spun.epoch_s))


def _predict(cfg: RunConfig, probe: Probe, cores: float, shape: LoaderShape, collapse: float = 1.0) -> Prediction:
    """predict's figure, with each worker's batch `collapse` times its CPU (and no pool speed-up) where > 1."""
    per_sample = cfg.batch_size / probe["batch_size"]
    batches = math.ceil(probe["n_samples"] / cfg.batch_size)
    work = probe["load_cpu_s"] * per_sample
    latency = max(0.0, probe["load_wall_s"] * per_sample - work)
    threads = cfg.threads or probe["default_threads"]
    step_wall, step_cpu, spin_cpu = (x * per_sample for x in _step(probe, threads, cores))
    pool_extra, pool_spin, pool_k = _pools(cfg, probe, shape)
    pool_spin *= per_sample
    producers = shape.producers(cfg.workers)
    units = probe["n_samples"] if shape.per_sample else batches
    active = _active(cfg, probe, shape)
    if collapse > 1:
        # worker processes whose pools outnumber the cores, collapsed: each batch's CPU grows by the probe's collapse
        # (teams spinning at their barriers), and a team no longer speeds its batch (its threads wait on each other)
        work, pool_k = work * collapse, 1.0
    # a producer whose pool worked spreads its load over pool_k threads: a batch takes W / pool_k of wall (its CPU
    # stays W, which the cores term charges)
    made = work / pool_k
    loader_threads = shape.threads(cfg.workers)
    # the pools' threads run beside the step only where loading overlaps it (sync's pool runs between steps)
    # (a worker process that never gets a batch leaves its pool idle too)
    pools_at_work = pool_extra if shape.in_process else pool_extra * active / producers
    beside_step = threads + min(loader_threads, active) + (pools_at_work if shape.overlaps else 0.0)
    runnable = threads + loader_threads + pool_extra
    on_cpu = probe["device"] == "cpu"
    # NOTE: past the cores, the intra-op threads' spinning takes cores the loader wants: while the step runs, and
    # after it while the loop waits for the next batch (the probe measures how long OpenMP spins then)
    after = probe.get("spin_after_step_s", 0.0) * (threads - 1) / max(1, probe["default_threads"] - 1)
    busy = (spin_cpu + after if on_cpu and beside_step > cores else step_cpu) + pool_spin
    # NOTE: the epoch's last step runs with nothing left to make beside it, so it is never time-sliced with producers
    alone = step_wall
    if on_cpu and beside_step > cores and (shape.overlaps or pool_spin > 0):
        # NOTE: an OpenMP team time-sliced with the loader's producers loses its parallel speed-up (each barrier waits
        # for the thread that is off its core), and can run slower than on one thread. So while they run it runs at
        # its one-thread speed, time-sliced; once their share of the batch is done, at its own. Beside it run the producers' work (an
        # overlapping loader) and the hidden pools' spin after each transform.
        one = _step(probe, 1, cores)[0] * per_sample if threads > 1 else step_wall
        # NOTE: one producer's share of a batch's work and of its pool's spin, spread over its pool_k threads
        beside = ((work if shape.overlaps else 0.0) + pool_spin) / active / pool_k
        step_wall = _shared_step(step_wall, max(step_wall, one), beside, beside_step / cores)
    gil_share = probe.get("gil_share")
    gil = 1.0 if gil_share is None else gil_share  # NOTE: unmeasured (one core): GIL-bound
    # the GIL-held seconds of a batch: never more than the calling thread's own share of the work (a pool's
    # threads run BLAS, which holds no GIL)
    held = min(gil * work, made)
    in_process = shape.in_process and shape.overlaps
    beside_python = probe.get("step_beside_python")
    if in_process and beside_python:
        # a Python-bound producer thread slows the step while it holds the GIL (the step waits for its turn);
        # NOTE: never by more than the producer holds it: the step can wait no longer than that
        step_wall += min(held / active, step_wall) * min(1.0, beside_python - 1)
    # NOTE: a worker process hands each batch over (shared memory, pickled handles), and the training process takes
    # each one in turn, between its steps: that side is serial however many workers there are (the probe's passes)
    hand, receive = (
        (0.0, 0.0)
        if shape.in_process
        else (probe.get("handoff_s", 0.0) * per_sample, probe.get("receive_s", 0.0) * per_sample)
    )
    g = held / made if shape.in_process and made > 0 else 0.0  # the GIL-held share of what a producer makes
    grain = cfg.batch_size if shape.per_sample else 1  # units a batch is made of
    cpu = batches * (work + busy) / cores
    if on_cpu and not shape.overlaps:  # one thread loads, then steps: nothing overlaps
        produce = latency + made + hand
        terms = {serial_kind(produce, step_wall): batches * (produce + step_wall), "cpu-bound": cpu}
    else:
        # the first batch is waited for in full (its units' wave), the last batch's step runs after it; w
        # producers start together, so units come in waves of w (8 batches, 4 workers: 2 waves, not 1 + 7/4)
        # (the last step runs with nothing made beside it)
        made_s = _waves(units, active, latency / grain, (made + hand) / grain, g)
        first = _waves(min(units, grain), active, latency / grain, (made + hand) / grain, g)
        terms = {
            "data-bound": max(made_s, batches * receive) + alone,
            "compute-bound": first + (batches - 1) * (step_wall + receive) + alone,
            "cpu-bound": cpu,
        }
        if in_process:
            # a producer thread in the step's process and the step cannot overlap the parts both hold the GIL for
            shared = batches * (held + (probe.get("step_gil_share") or 0.0) * alone)
            terms[GIL_LIMIT] = max(terms.get(GIL_LIMIT, 0.0), shared)
    limit = max(terms, key=terms.__getitem__)
    epoch = terms[limit]
    spread = max(_SPREAD_MIN, probe.get("spread") or 0.0)
    # NOTE: a pool that worked part of the load is a runnable thread part of the time: it counts
    return Prediction(
        epoch,
        limit,
        terms,
        math.ceil(runnable - 1e-6),
        cores,
        per_sample != 1.0,
        epoch / (1 + spread),
        epoch * (1 + spread),
    )


def rank(
    configs: list[RunConfig], probe: Probe, cores: float | None = None, found: dict[str, list[float]] | None = None
) -> list[tuple[RunConfig, Prediction]]:
    """The configs the model covers, fastest predicted first (ties keep their order); `found`: residuals of
    earlier runs (`residuals`) that adjust each prediction."""
    predicted = [(c, predict(c, probe, cores)) for c in configs]
    kept = [(c, adjusted(p, found) if found else p) for c, p in predicted if p is not None]
    return sorted(kept, key=lambda cp: cp[1].epoch_s)


def residuals(
    points: list[tuple[RunConfig, float]], probe: Probe, cores: float | None = None
) -> dict[str, list[float]]:
    """measured / predicted of each (setting, measured steady epoch) point, grouped by the limit the probe
    predicted: what earlier runs say the model gets wrong, per resource."""
    out: dict[str, list[float]] = {}
    for cfg, measured in points:
        p = predict(cfg, probe, cores)
        if p is not None and p.epoch_s > 0 and measured and measured > 0:
            out.setdefault(p.limit, []).append(measured / p.epoch_s)
    return out


def adjusted(p: Prediction, found: dict[str, list[float]]) -> Prediction:
    """p scaled by the median residual of its limit (of every limit where its own has none): 'prior+runs'. Its
    range is the residuals' own spread about that median, never narrower than the probe's."""
    ratios = found.get(p.limit) or [r for rs in found.values() for r in rs]
    if not ratios:
        return p
    factor = statistics.median(ratios)
    spread = max([p.hi / p.epoch_s - 1 if p.epoch_s > 0 else _SPREAD_MIN] + [abs(r / factor - 1) for r in ratios])
    epoch = p.epoch_s * factor
    return replace(p, epoch_s=epoch, lo=epoch / (1 + spread), hi=epoch * (1 + spread), source="prior+runs")


def apart(a: Prediction, b: Prediction) -> bool:
    """Whether two predictions can be told apart on this machine: their ranges do not overlap."""
    return a.hi < b.lo or b.hi < a.lo


def _waves(units: int, producers: int, latency: float, work: float, gil: float) -> float:
    """Seconds `producers` (all of whom have a unit to make) take to make `units`, cores aside (the cores term
    charges those), in waves of `producers` units. A wave of k takes a unit's own latency + work, or the time the
    GIL lets it have: the GIL-held share g of the work never runs on two threads of one process at once (g = 0 for
    worker processes), so k units need (1 - g) work + k g work.

    NOTE: a thread that waits holds no GIL, so the others' held work runs in its wait: the GIL's turn does not add
    to the latency (it did, and 16 threads over 8 batches of storage reads were predicted slower than 8). Where
    nothing waits a wave is (1 - g) work + k g work, as before."""
    full, part = divmod(units, producers)

    def wave(k: int) -> float:
        return max(latency + work, (1 - gil) * work + k * gil * work)

    return full * wave(producers) + (wave(part) if part else 0.0)


def _pools(cfg: RunConfig, probe: Probe, shape: LoaderShape) -> tuple[float, float, float]:
    """The hidden pools' (BLAS, foreign OpenMP; engine/measure/pools.py) extra runnable threads (in each worker
    process, or once in the training process) and the CPU-seconds they spin per batch; at most the setting's
    transform_threads where it sets one (the pools it caps); and the threads one producer loads on (1 + its pool's
    working extra threads). A pool's extra threads count by the share of them the probe saw working (`pool_use`):
    a pool that sat idle through the load takes no core from the step, and speeds no load."""
    size, capped = _pool_size(probe), _capped(cfg, probe)
    processes = 1 if shape.in_process else shape.producers(cfg.workers)
    spin = probe.get("pool_spin_s", 0.0) * (capped - 1) / (size - 1) if size > 1 else 0.0
    working = (capped - 1) * pool_use(probe)
    # NOTE: the spin once a batch, whatever the workers: each batch is made in one of them, whose pool spins after it
    return processes * working, spin, 1.0 + working


def _active(cfg: RunConfig, probe: Probe, shape: LoaderShape) -> int:
    """The producers that get a unit to make. NOTE: producers past the units an epoch has (batches, or samples where
    each makes one) never get one: 16 threads over 8 batches are 8 at work, and the idle 8 take no core from the step"""
    units = probe["n_samples"] if shape.per_sample else math.ceil(probe["n_samples"] / cfg.batch_size)
    return max(1, min(shape.producers(cfg.workers), units))


def _collapse(cfg: RunConfig, probe: Probe, shape: LoaderShape, active: int, cores: float) -> float:
    """How much more CPU a batch can take where worker processes' hidden pools, counted over the workers that load
    at once, outnumber the cores: the probe's `pool_collapse` (two workers' load at once against sharing the cores,
    engine/predict/_probe_pools.py), else 1. Threads of one process share its one pool, which never collapses so.

    NOTE: measured with two workers, and held for more: the collapse comes from any team losing its core, not from
    how many teams do (on 2 cores, 4 workers collapsed as 2 did: 4.5x and 5.1x at 14fa5e3's table)."""
    measured = probe.get("pool_collapse")
    if shape.in_process or not measured or measured <= 1:
        return 1.0
    capped = _capped(cfg, probe)
    return float(measured) if capped > 1 and active * capped > cores else 1.0


def pool_use(probe: Probe) -> float:
    """The share of the hidden pools' extra threads that worked while the probe loaded (0..1): the load's CPU over
    its wall, past the loading thread's own one core, per extra thread of the largest pool.

    NOTE: numpy's OpenBLAS splits a matrix product over its threads only past a size, and numpy loads it whether
    the transform calls it or not: a pool that idled adds no core. One that worked adds its threads (a transform
    that runs matrix products over two pool threads reads about twice its wall in CPU, a share near 1)."""
    size = _pool_size(probe)
    wall = probe.get("load_median_wall_s") or probe.get("load_wall_s") or 0.0  # the same windows as load_cpu_s
    if size <= 1 or wall <= 0:
        return 0.0
    return min(1.0, max(0.0, probe["load_cpu_s"] / wall - 1) / (size - 1))


def _capped(cfg: RunConfig, probe: Probe) -> int:
    """The largest working pool's threads under the setting's transform_threads, where it sets one."""
    cap = getattr(cfg, "transform_threads", 0) or 0
    size = _pool_size(probe)
    return min(size, cap) if cap > 0 else size


def _pool_size(probe: Probe) -> int:
    """The threads of the largest hidden pool the probe saw working (1: none)."""
    return max((p["threads"] for p in probe.get("pools") or []), default=1)


def _shared_step(step: float, slow: float, beside: float, share: float) -> float:
    """The step's wall time when its threads and others outnumber the cores (share = runnable / cores > 1).
    step: its time at its own threads alone; slow: at its time-sliced speed (one thread's, or its own where threads
    slow it). Processor sharing: while all are runnable each gets 1/share of a core; `beside` is the CPU-seconds one
    other thread burns per step (a producer's share of a batch, a pool's spin). For as long as that runs the step
    runs time-sliced at its slow speed, doing a share beside / slow of its work; the rest at its own speed.

    NOTE: without this term, a step beside more process workers than cores reads as fast as beside fewer; how close
    the model comes is bench/RESULTS.md, 'Predict before you run'."""
    done = min(beside, slow) / slow if slow > 0 else 1.0
    return done * slow * share + (1 - done) * step


def _step(probe: Probe, threads: int, cores: float) -> tuple[float, float, float]:
    """Per step at `threads` intra-op threads on `cores`: wall, CPU of busy work, CPU its threads burn (spins)."""
    one = probe["compute"]["1"]
    n = probe["default_threads"]
    many = probe["compute"].get(str(n), one)
    parallel = 0.0
    if n > 1 and one["wall_s"] > 0:
        # Amdahl: many = one ((1 - q) + q / n). NOTE: q below 0 is a step that threads slow down (a small model:
        # more synchronising than work)
        parallel = min(1.0, max(_SLOWER, (1 - many["wall_s"] / one["wall_s"]) * n / (n - 1)))
    # NOTE: threads that help run at most `cores` at once; threads that slow the step slow it by their number, on
    # any cores (the team synchronises all t). Capping those at the cores would predict more cores slowing a
    # setting
    on = min(threads, max(1, int(cores))) if parallel >= 0 else threads
    wall = one["wall_s"] * ((1 - parallel) + parallel / on)
    thread_s = n * many["wall_s"]
    spin = many["cpu_s"] * (on * wall) / thread_s if thread_s > 0 else one["cpu_s"]
    return wall, one["cpu_s"], max(one["cpu_s"], spin)


def probe_path(calibrations: Path, cfg: RunConfig, machine: str, device: str) -> Path:
    """Where cfg's probe lives: keyed by the pipeline (PROBE_KEYS), the machine, the device type, and what sets the
    thread pools it measured under (the thread variables, the CPUs this process may run on), not by the loader or
    the sweep, so every run of the pipeline on this host and under these settings finds it."""
    # NOTE: here, not at the top: the probe's module imports torch, which the CLI's parent and the pages must not load
    from engine.predict.probe import PROBE_KEYS, PROBE_METHOD

    key: list[Any] = [machine, device, [getattr(cfg, k) if k != "device" else device for k in PROBE_KEYS]]
    key.append(PROBE_METHOD)  # NOTE: a probe taken another way is not this model's input: measured again, not reused
    pools = {k: os.environ.get(k) for k in _THREAD_ENV if os.environ.get(k) is not None}
    if pools or _affinity() is not None:  # NOTE: the default layout keeps the key (and the cache) it always had
        key.append([pools, _affinity()])
    return calibrations / f"probe-{hashlib.sha1(json.dumps(key).encode()).hexdigest()[:16]}.json"


def _affinity() -> list[int] | None:
    """The CPUs this process may run on, where it is narrower than the machine's (None: all of them)."""
    try:
        mine = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return None if len(mine) == (os.cpu_count() or len(mine)) else mine


def load_probe(path: Path) -> Probe | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def save_probe(path: Path, probe: Probe) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{id(probe)}.tmp")
    tmp.write_text(json.dumps(probe))
    tmp.replace(path)
