"""The probe behind engine/predict/model.py: what one sample, one batch and one step cost on this machine, apart from
any loader setting, measured in a few seconds.

    load, latency, pools, spread, gil   a batch's fetch + collate on one thread, its waits, hidden pools, GIL share
    compute, step gil, hand-off          the step at two thread counts, beside Python, and a worker's hand-off

Each key is typed and described in engine/predict/records.py (Probe); how each is measured: docs/predict.md,
"What the probe measures".

The probe does not depend on the loader, its workers or its threads, so one probe predicts them all
(engine/predict/model.py). It is cached per workload, model, batch size and device on this host, and
per thread environment (OMP_NUM_THREADS and the like) and CPU affinity (`<store dir>/calibrations/probe-*.json`):
a later run of the same pipeline, in any sweep, is predicted before it runs.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, NotRequired

import torch

from engine.calibrate import compute_pass, time_again
from engine.loaders import epoch_batches, open_loader, stream_fetch, to_device
from engine.measure import fingerprint, hidden_pools, tree_cpu_s, usable_cpus
from engine.predict._probe_handoff import handoff
from engine.predict._probe_pools import PAIR, PAIRS, pool_collapse
from engine.predict._probe_step import step_beside_python
from engine.predict.records import ComputeAt, Handoff, Probe
from engine.workloads import build_dataset, is_stream

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["PROBE_KEYS", "PROBE_METHOD", "probe"]

# what a probe depends on: the dataset, the model and its step, the batch and where it runs (not the loader)
PROBE_KEYS = (
    "workload",
    "n_samples",
    "image_size",
    "num_classes",
    "work_us",
    "latency_ms",
    "folder",
    "seed",
    "model",
    "width",
    "depth",
    "optimizer",
    "lr",
    "batch_size",
    "device",
    "collate",
    "loss",
)
PROBE_METHOD = 4  # how the figures are taken; a change of method keys new probes (engine/predict/model.py: probe_path)
_LOAD_S = 0.4  # wall seconds of batches each load measurement aims at (at least 2 batches)
_STEPS = 16  # steps replayed per thread count
_TOO_BUSY = 1.5  # core sharing (see _core_sharing) above which the GIL share is not told apart from it
_GIL_PAIRS = 3  # pairs of windows (one thread, then two at once) the GIL share is the median of
_SPIN_WINDOW_S = 0.04  # idle after a parallel op: longer than OpenMP's spin before its threads sleep
_WARM_BATCHES = 1  # untimed: lazy first use of the dataset (file cache, decoder set-up)
# NOTE: the load figure is the median of every one-thread window the probe times (_tries back to back, then the GIL
# pairs' six, seconds later), not the fastest (as the bound's passes keep theirs): a shared machine's speed drifts for
# seconds at a time (`bench/load_between_steps.py` shows it), and an epoch pays the drift's middle, so the fastest
# window predicts too fast (bench/RESULTS.md, 'Predict before you run'). A median still stands one hiccup.
_REPEATS = 3
_LATENT = 0.25  # a latency share of the load's wall above which its mean latency is measured over more batches
_TAIL_S = 1.5  # wall seconds the mean latency may take, beyond the windows
_POOL_BUSY = 0.05  # CPU of other threads, as a share of the loading thread's, past which a hidden pool is in use
_QUICK_HANDOFF_S = 0.6  # what a quick probe keeps for its hand-off pass (3 workers' start, 8 hand-offs), and
# half of which must be left for it
QUICK_SPREAD = 0.25  # the least half-width (relative) of a quick probe's ranges: fewer windows, less sure
_TAIL_ITEMS = 512  # items enough to see a heavy tail's weight (lognormal, sigma 1: the mean within ~10 %)


@dataclass(frozen=True)
class _Plan:
    """How many of each measurement the probe takes: the full probe, or a quick one that fits a short budget (one
    window where there were three, one GIL pair (none where the load mostly waits), no latency tail beyond the
    window, one step at each thread count, no step-beside-Python, a hand-off pass of 4 batches only where what is
    left holds it) and says so with a wider range."""

    repeats: int = _REPEATS
    gil_pairs: int = _GIL_PAIRS
    tail_s: float = _TAIL_S
    quick: bool = False


class _Load(Handoff):
    """The load's part of the probe (Probe says what each key is): _load's figures, then the hand-off's and the
    step's beside Python where probe() measures them."""

    load_wall_s: float
    load_cpu_s: float
    load_median_wall_s: float
    load_fastest_wall_s: float
    load_windows: int
    gil_share: float | None
    core_sharing: float
    pools: list[dict[str, Any]]
    pools_loaded: list[dict[str, Any]]
    pool_spin_s: float
    pool_collapse: float | None
    spread: float
    latency_batches: int
    quick: bool
    step_gil_share: NotRequired[float | None]
    step_beside_python: NotRequired[float | None]


def _full_load_s(first: float) -> float:
    """Seconds the full plan's load measurements take, from one batch's: the windows, the tail, the GIL pairs."""
    window = max(_LOAD_S, 2 * first)
    return _REPEATS * window + _TAIL_S + _GIL_PAIRS * (3 * max(_LOAD_S / 2, 2 * first) + _LOAD_S)


def probe(
    cfg: RunConfig, device: torch.device, steps: Callable[[Any], list[Callable]], budget_s: float | None = None
) -> Probe:
    """Measure the probe for cfg's pipeline on `device`; steps(dataset) -> [the mode's train step] (one).

    budget_s: seconds the probe may take from here (None: no limit). Where the full probe does not fit, a quick one
    (`_Plan`) is taken instead, its ranges wider (QUICK_SPREAD): a prediction with a wide range beats none."""
    end = time.perf_counter() + budget_s if budget_s else math.inf
    dataset = build_dataset(cfg)
    kept: list[Any] = []  # batches the load made, replayed by the step: a waiting dataset is not read again
    with open_loader(dataset, cfg, device, loader="sync") as loader:
        # a stream: batches of the probe's own pass over it (a fresh iter(): the run's epochs are not consumed)
        keys, fetch = (
            stream_fetch(loader)
            if is_stream(dataset)
            else (epoch_batches(len(dataset), cfg.batch_size, cfg.seed, 1), loader.fetch)
        )

        def plan(first: float) -> _Plan:  # NOTE: the load gets at most about half of what is left, the step the rest
            left = end - time.perf_counter()
            if _full_load_s(first) <= 0.45 * left:
                return _Plan()
            return _Plan(repeats=1, gil_pairs=1, tail_s=0.0, quick=True)

        load = _load(fetch, keys, device, cores := usable_cpus(), plan, kept)  # the loaders' fetch: collate, pinning
    default = torch.get_num_threads()
    # a processes worker's hand-off of a batch, and the training process's serial side of it; a quick probe passes
    # 4 batches, and only where what is left holds it. NOTE: without it processes read as free of their hand-off:
    # over storage-like reads processes with 8 workers tied threads with 8 (both overlap the waits), and a tune
    # answered either by its noise. So where items wait a quick probe's step plans to leave the pass its time
    pin = bool(cfg.pin_memory) and device.type == "cuda"
    waits = load["load_wall_s"] > 0 and 1 - load["load_cpu_s"] / load["load_wall_s"] > _LATENT
    reserve = _QUICK_HANDOFF_S if load["quick"] and waits else 0.0
    compute, batches = _compute(cfg, device, steps, kept, default, end - reserve, load["quick"])
    if not load["quick"]:
        load.update(handoff(kept[:8], pin))
    elif end - time.perf_counter() > _QUICK_HANDOFF_S / 2:
        load.update(handoff(kept[:2], pin, n=4))
    spin = _spin_after_step() if device.type == "cpu" and default > 1 and not load["quick"] else 0.0
    gil_free = load["core_sharing"] <= _TOO_BUSY and cores >= 2  # NOTE: one core, or too busy: the GIL is not told
    step_s = compute[str(default)]["wall_s"]
    # the step beside a Python thread replays its batches about 6 times: only where that fits what is left
    fits = not load["quick"] and 6 * batches * step_s * 2 < end - time.perf_counter()
    with _threads(1):
        beside = (
            step_beside_python(cfg, device, steps, load["core_sharing"], kept[: int(batches)])
            if gil_free and fits
            else {}
        )
    load["step_gil_share"], load["step_beside_python"] = beside.get("step_gil_share"), beside.get("step_beside_python")
    if load["quick"]:
        load["spread"] = max(load["spread"], QUICK_SPREAD)
    n_samples = (dataset.total or cfg.n_samples) if is_stream(dataset) else len(dataset)
    out: Probe = {
        "batch_size": cfg.batch_size,
        "n_samples": n_samples,
        "batches": len(keys),
        "cores": cores,
        "default_threads": default,
        "device": device.type,
        "load_wall_s": load["load_wall_s"],
        "load_cpu_s": load["load_cpu_s"],
        "compute": compute,
    }
    out.update(load)
    out.update(
        {
            "spin_after_step_s": spin,
            "steps_replayed": batches,
            "machine": fingerprint()["machine"],
            "taken_at": time.time(),
        }
    )
    return out


def _compute(
    cfg: RunConfig,
    device: torch.device,
    steps: Callable[[Any], list[Callable]],
    kept: list[Any],
    default: int,
    end: float,
    quick: bool,
) -> tuple[dict[str, ComputeAt], float]:
    """The step replayed on the load's batches at one intra-op thread and at torch's default: wall and CPU seconds
    per step, and how many batches were replayed: _STEPS where they fit what is left before `end`, fewer for a
    heavy step (a first replay of one batch sizes them), at least one; a quick probe's one step, timed on part of a
    batch where a whole one does not fit (the share it timed)."""
    out: dict[str, ComputeAt] = {}

    def measure(threads: int, n: int) -> None:
        with _threads(threads):
            c = compute_pass(cfg, device, steps, batches=kept[:n])
        out[str(threads)] = {"wall_s": c["seconds"] / c["batches"], "cpu_s": c["cpu_s"] / c["batches"]}

    n = min(_STEPS, len(kept))
    if quick:  # NOTE: a compute pass times each replay 3 times at least, and once more on one thread: too long here
        out, part = _one_step_each(cfg, device, steps, kept[0], default, end)
        return out, part / cfg.batch_size
    if end < math.inf:
        measure(default, 1)  # NOTE: a compute pass times a replay at least 3 times, plus one untimed step
        left = end - time.perf_counter()
        one_step = out[str(default)]["wall_s"]
        # the rest: the one-thread pass (up to `default` times slower) and the default's again, ~5 replays each
        n = max(1, min(n, int(0.8 * left / max(5 * one_step * (1 + default), 1e-6))))
        if n > 1:
            measure(default, n)
        if default != 1:
            measure(1, n)
        return out, n
    for threads in sorted({1, default}):
        measure(threads, n)
    return out, n


def _spin_after_step() -> float:
    """CPU-seconds the intra-op threads burn after a parallel op ends, while the main thread waits (for the next
    batch): OpenMP's workers spin before they sleep. Idle cores absorb it; a loader worker that wants the core
    pays it.
    The median of a few tries: a parallel matmul, then an idle window."""
    a = torch.randn(256, 256)
    return _spin_after(lambda: torch.mm(a, a))


def _one_step_each(
    cfg: RunConfig, device: torch.device, steps: Callable[[Any], list[Callable]], batch: Any, default: int, end: float
) -> tuple[dict[str, ComputeAt], int]:
    """A quick probe's step, and the samples it was timed on: an untimed step on two samples, then timed steps at
    torch's default threads (wall, and the process's CPU, no more than one thread's, as a compute pass counts it)
    and at one thread.

    NOTE: a step too heavy for what is left before `end` (a ResNet on a CPU takes seconds) is timed on two samples and
    on as many as fit, and the line through the two carried to the whole batch: a step has a part that does not grow
    with the batch (the optimizer's update, the dispatch), so scaling two samples' time per sample reads it too slow."""
    step = steps(build_dataset(cfg.replace(latency_ms=0.0, work_us=0)))[0]
    x, y = (t.to(device) for t in batch)
    full = x.shape[0]

    def timed(threads: int, n: int) -> tuple[float, float]:
        with _threads(threads):
            t0, c0 = time.perf_counter(), tree_cpu_s()
            step(x[:n], y[:n])
            cpu = tree_cpu_s() - c0
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return time.perf_counter() - t0, cpu

    def line(a: tuple[int, tuple[float, float]], b: tuple[int, tuple[float, float]]) -> ComputeAt:
        """The line through two (samples, (wall, CPU)) points carried to the whole batch, held between the larger
        point's own time and that time scaled per sample (a noisy slope is not multiplied up)."""
        (n0, t0), (n1, t1) = a, b
        held = []
        for i in (0, 1):  # wall, CPU
            carried = t1[i] + (t1[i] - t0[i]) * (full - n1) / (n1 - n0) if n1 > n0 else t1[i] * full / n1
            held.append(min(max(carried, t1[i]), t1[i] * full / n1))
        return {"wall_s": held[0], "cpu_s": held[1]}

    two = min(2, full)
    timed(default, two)  # untimed: allocator and kernel selection
    small = (two, timed(default, two))
    # the most samples (the batch, 32, 8) whose step, scaled per sample (an upper bound), fits beside a one-thread
    # step in what is left; 8 at least: a single point carried per sample blows a small step's fixed cost up
    left = end - time.perf_counter()
    sizes = [n for n in (full, 32, 8) if n <= full]
    part = next((n for n in sizes if small[1][0] * n / two * (1 + default) <= left), min(8, full))
    big = (part, timed(default, part)) if part > two else small
    out = {str(default): line(small, big)}
    if default != 1:
        # NOTE: where one more step does not fit what is left, one thread's step is the default's CPU-seconds: the
        # same work on one core (less the team's spin, which errs it slow, the side a short probe's range covers)
        cpu = out[str(default)]["cpu_s"]
        if end - time.perf_counter() > 1.5 * big[1][1]:
            out["1"] = line((two, timed(1, two)), (part, timed(1, part)) if part > two else (two, timed(1, two)))
        else:
            out["1"] = {"wall_s": cpu, "cpu_s": cpu}
        out[str(default)]["cpu_s"] = min(out[str(default)]["cpu_s"], out["1"]["cpu_s"])
    return out, part


def _load(
    fetch: Callable,
    keys: list,
    device: torch.device,
    cores: float,
    plan_for: Callable[[float], _Plan] = lambda first: _Plan(),
    kept: list | None = None,
) -> _Load:
    """Per batch: wall and CPU seconds of fetch + collate (+ copy) on one thread, the GIL share (None on one core:
    two threads would wait for the core, not the GIL), the hidden pools, and the spread of the windows.
    plan_for(one batch's seconds) -> how many windows to take; `kept` gets the first _STEPS batches made."""

    def one(batch_keys: list) -> None:
        batch = fetch(batch_keys)
        if kept is not None and len(kept) < _STEPS:
            kept.append(batch)
        to_device(batch, device)

    with _threads(1):
        for k in keys[:_WARM_BATCHES]:
            one(k)
        loaded = hidden_pools()  # NOTE: after an item: the transform's libraries are loaded by now
        t0, c0, own0 = time.perf_counter(), time.process_time(), time.thread_time()
        one(keys[_WARM_BATCHES % len(keys)])
        first = time.perf_counter() - t0
        # a pool counts where its threads worked beside this one (numpy's OpenBLAS is loaded with torch, and idle
        # unless the transform calls it); then their CPU is the load's too (the process's, this thread the only one)
        pools = (
            loaded
            if (time.process_time() - c0) - (time.thread_time() - own0) > _POOL_BUSY * (time.thread_time() - own0)
            else []
        )
        clock = time.process_time if pools else time.thread_time
        plan = plan_for(first)
        n = max(2, min(len(keys), math.ceil(_LOAD_S / max(first, 1e-4))))
        batch = [keys[i % len(keys)] for i in range(n)]
        tries = _tries(lambda: _one_thread(one, batch, clock), plan.repeats)
        fastest, fast_cpu = (x / n for x in min(tries))
        waits = [max(0.0, w - c) / n for w, c in tries]
        latent = fastest > 0 and (fastest - fast_cpu) / fastest > _LATENT
        if latent and plan.tail_s > 0:  # latency: its mean, over more of the epoch's batches
            waits += _more_waits(one, keys[n:], n, clock, plan.tail_s)
        # each pair's windows: half a load window's wall, whatever the dataset's length (keys again if short)
        least = 1 if plan.quick else 2  # a quick probe's pairs: one batch a window where one is slow
        pair = [keys[i % len(keys)] for i in range(max(least, math.ceil(_LOAD_S / 2 / max(fastest, 1e-4))))]
        # NOTE: a quick probe of a load that mostly waits skips the GIL pairs: the share is of its little work, and
        # unmeasured it counts as held (the model's side that errs slow)
        pairs = 0 if plan.quick and latent else plan.gil_pairs
        gil, shared, singles = _gil_share(one, pair, clock, pairs) if cores >= 2 and pairs else (None, 1.0, [])
        pool_spin = _spin_after(lambda: one(batch[0])) if pools else 0.0
        windows = [(w / n, c / n) for w, c in tries] + [(w / len(pair), c / len(pair)) for w, c in singles]
        wall, cpu = (statistics.median(x[i] for x in windows) for i in (0, 1))
        # NOTE: only where the pools of two workers can outnumber the cores: teams that fit them cannot collapse
        size = max((p["threads"] for p in pools), default=1)
        collapse = (
            pool_collapse(fetch, pair, cpu * len(pair), wall * len(pair), cores, 1 if plan.quick else PAIRS)
            if pools and PAIR * size > cores
            else None
        )
    latency = sum(waits) / len(waits) if latent else max(0.0, wall - cpu)
    cpu = min(cpu, wall) if not pools else cpu
    return {
        "load_wall_s": cpu + latency,
        "load_cpu_s": cpu,
        "load_median_wall_s": wall,
        "load_fastest_wall_s": fastest,
        "load_windows": len(windows),
        "gil_share": gil,
        "core_sharing": shared,
        "pools": pools,
        "pools_loaded": loaded,
        "pool_spin_s": pool_spin,
        "pool_collapse": collapse,
        "spread": _spread([w for w, _ in windows], waits, cpu + latency),
        "latency_batches": len(waits) * n,
        "quick": plan.quick,
    }


def _gil_share(
    one: Callable[[Any], None], batch: list, clock: Callable[[], float], n_pairs: int = _GIL_PAIRS
) -> tuple[float | None, float, list[tuple[float, float]]]:
    """The load's GIL-held share, the core sharing it was told apart from, and the one-thread windows (wall, CPU)
    it timed: the median of _GIL_PAIRS pairs of windows, each pair two threads at once between two one-thread
    windows, back to back (None where it cannot tell: a machine so busy that two threads get about one core
    between them).

    In each pair the second thread's extra wall, past what sharing the cores costs any two threads just then, is
    the GIL-held work it waited for; as a share of the CPU work. NOTE: a pair, not the fastest one-thread window
    against the fastest two-thread window taken seconds apart: a shared machine's speed drifts over seconds, so
    windows apart disagree across probes of the same load, where back-to-back pairs agree."""
    pairs, singles = [], []
    for _ in range(n_pairs):
        before = _one_thread(one, batch, clock)
        two = _two_threads(one, batch)
        after = _one_thread(one, batch, clock)  # one thread on both sides: a drift of the VM's speed cancels
        singles += [before, after]
        wall, cpu = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
        shared = _core_sharing(cpu) if cpu > 0 else 1.0
        pairs.append((shared, (two - wall - cpu * (shared - 1)) / cpu if cpu > 0 else 0.0))
    shared = statistics.median(s for s, _ in pairs)
    gil = None if shared > _TOO_BUSY else min(1.0, max(0.0, statistics.median(g for _, g in pairs)))
    return gil, shared, singles


def _more_waits(
    one: Callable[[Any], None], rest: list, n: int, clock: Callable[[], float], tail_s: float = _TAIL_S
) -> list[float]:
    """Latency per batch of windows of n batches over the rest of the epoch, while they take under _TAIL_S and
    until _TAIL_ITEMS items (counted as batches x n of the first window's size) are seen."""
    waits: list[float] = []
    t0 = time.perf_counter()
    for i in range(0, len(rest) - n + 1, n):
        if time.perf_counter() - t0 > tail_s or (len(waits) + 3) * n * len(rest[0]) >= _TAIL_ITEMS:
            break
        w, c = _one_thread(one, rest[i : i + n], clock)
        waits.append(max(0.0, w - c) / n)
    return waits


def _spread(walls: list[float], waits: list[float], per_batch: float) -> float:
    """The relative half-width a prediction's range gets: how far the windows' walls (per batch) reach from their
    median, on the farther side, and twice the mean latency's standard error, as shares of the batch's time."""
    mid = statistics.median(walls)
    windows = max(mid / min(walls) - 1, max(walls) / mid - 1) if min(walls) > 0 else 0.0
    sem = statistics.stdev(waits) / math.sqrt(len(waits)) if len(waits) > 1 else 0.0
    return max(windows, 2 * sem / per_batch if per_batch > 0 else 0.0)


def _spin_after(work: Callable[[], object]) -> float:
    """CPU-seconds this process's other threads burn in an idle window after work() (a pool's threads spinning
    before they sleep): the median of a few tries."""
    tries = []
    for _ in range(3):
        work()
        cpu0, main0 = time.process_time(), time.thread_time()
        time.sleep(_SPIN_WINDOW_S)
        tries.append(max(0.0, (time.process_time() - cpu0) - (time.thread_time() - main0)))
    return sorted(tries)[len(tries) // 2]


def _core_sharing(seconds: float) -> float:
    """How much slower two threads of GIL-free CPU work run at once than one alone, now: 1 on two idle cores,
    up to 2 on a machine whose other processes leave one. Hashing a large buffer releases the GIL.

    NOTE: without it, a busy machine's wait for a core read as the GIL (0.98 for GIL-free work under load)."""
    data = bytes(1 << 20)
    t0 = time.perf_counter()
    hashlib.sha256(data).digest()
    rounds = max(2, int(min(seconds, _LOAD_S / 2) / max(time.perf_counter() - t0, 1e-6)))

    def work(_: object = None) -> None:
        for _ in range(rounds):
            hashlib.sha256(data).digest()

    t0 = time.perf_counter()
    work()
    alone = time.perf_counter() - t0
    return max(1.0, _two_threads(work, [None]) / alone) if alone > 0 else 1.0


def _tries(measure: Callable[[], tuple[float, ...]], repeats: int = _REPEATS) -> list[tuple[float, ...]]:
    """The measurements time_again asks for, while they add up (by their first figure, wall seconds) to under
    repeats x _LOAD_S: a slow pipeline's probe stays a few seconds."""
    tries = [measure()]
    while time_again(len(tries), sum(t[0] for t in tries), repeats * _LOAD_S):
        tries.append(measure())
    return tries


def _one_thread(
    one: Callable[[Any], None], batch: list, clock: Callable[[], float] = time.thread_time
) -> tuple[float, float]:
    """Wall and CPU seconds (by `clock`) for this thread to run one(k) for each k of `batch`."""
    t0, c0 = time.perf_counter(), clock()
    for k in batch:
        one(k)
    return time.perf_counter() - t0, clock() - c0


def _two_threads(one: Callable[[Any], None], batch: list) -> float:
    """Wall seconds for two threads to run one(k) for each k of `batch` each, at once."""
    start = threading.Barrier(3)

    def work() -> None:
        with _threads(1):
            start.wait()
            for k in batch:
                one(k)

    pair = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for t in pair:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pair:
        t.join()
    return time.perf_counter() - t0


@contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
