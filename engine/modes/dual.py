"""The dual-* modes: two models (model/width and model_b/width_b) trained on the same data, four ways.

    dual-sequential  one after the other in each epoch, one loader: the baseline for every dual mode
    dual-threads     one Python thread per model, each with its own optimizer; dual_data = shared (one
                     loader fanned out through bounded queues) or separate (one loader per model)
    dual-processes   one spawned process per model, each with its own loader, on devices [a, b]
    dual-streams     one CUDA stream per model, issued from one thread (engine/modes/_streams.py)

Always two models (n_models is fused's and is ignored here). Every mode writes one epoch event per
(model_idx, epoch) and puts aggregate_samples_per_s, wall_s_total and per_model_samples_per_s in the
run summary (engine/modes/_common.py).

    python -m engine run --mode dual-threads --dual-data separate --model-b cnn
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import torch

from engine import devices
from engine.errors import ConfigError
from engine.loaders import open_loader
from engine.measure import trace
from engine.calibrate import Calibrator, Pass, Phase
from engine.models import make_optimizer
from engine.modes._base import ModeSpec, RunContext
from engine.modes._common import (
    Recorder,
    build_model,
    check_devices,
    check_model_b,
    epoch_payload,
    fail_point,
    step_builder,
    train_epoch,
)
from engine.modes._fanout import FanOut, Stopped, until_stopped
from engine.modes._procs import ChildGroup, Link
from engine.modes._streams import check_streams, run_streams
from engine.workloads import build_dataset

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["PROCESSES", "SEQUENTIAL", "STREAMS", "THREADS", "concurrent_bound", "sequential_bound"]

log = logging.getLogger(__name__)
N_MODELS = 2


def _build(cfg: RunConfig, device: torch.device) -> tuple[Any, list[torch.nn.Module], list[torch.optim.Optimizer]]:
    dataset = build_dataset(cfg)
    models = [build_model(cfg, dataset, i, device, dual=True) for i in range(N_MODELS)]
    return dataset, models, [make_optimizer(m.parameters(), cfg.optimizer, cfg.lr) for m in models]


# ---------------------------------------------------------------------------- dual-sequential


def run_sequential(ctx: RunContext) -> None:
    cfg, device = ctx.cfg, ctx.device
    dataset, models, opts = _build(cfg, device)
    recorder = Recorder(ctx)
    with open_loader(dataset, cfg, device) as loader:
        for epoch in range(cfg.epochs):
            # NOTE: models alternate per epoch (not model A's whole run, then B's) so that the steady-state
            # epochs of both form one contiguous window, the same window the concurrent modes are judged over.
            for i, (model, opt) in enumerate(zip(models, opts)):
                fail_point(i, epoch)
                record = train_epoch(model, opt, loader.epoch(epoch), device)
                recorder.write(epoch_payload(cfg, i, 0, epoch, record))
        # --trace: one extra, unstored epoch of both models in turn, as the measured ones ran
        trace.extra_epoch(ctx, lambda e: [train_epoch(m, o, loader.epoch(e), device) for m, o in zip(models, opts)])
    recorder.finish()


# ---------------------------------------------------------------------------- dual-threads


def _thread_loop(
    recorder: Recorder,
    cfg: RunConfig,
    i: int,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    source: Callable[[int], Iterable],
    device: torch.device,
    stop: threading.Event,
    stream: torch.cuda.Stream | None = None,
) -> None:
    # NOTE: on CUDA each thread queues on its own stream: on one shared stream each model's timing events
    # would bracket the other's kernels and the two models could never overlap on the GPU.
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for epoch in range(cfg.epochs):
            fail_point(i, epoch)
            batches = until_stopped(source(epoch), stop)
            if stream is not None:
                batches = _on_stream(batches, stream)
            record = train_epoch(model, opt, batches, device)
            recorder.write(epoch_payload(cfg, i, 0, epoch, record))


def _on_stream(batches: Iterable[Any], stream: torch.cuda.Stream) -> Iterator[Any]:
    """Order device batches (a prefetch loader's, maybe handed over on another thread's stream) before `stream`."""
    for batch in batches:
        x, y = batch
        if x.is_cuda:
            ready = getattr(batch, "wait_span", None)
            if ready is not None:  # recorded right after the hand-over: waits for this batch's copy only
                stream.wait_event(ready.end)
            else:
                stream.wait_stream(torch.cuda.default_stream(x.device))
            for t in (x, y):
                t.record_stream(stream)  # read on this stream too: the allocator must wait for it
        yield batch


def _run_to_end(targets: list[Callable[[], None]], stop: threading.Event) -> None:
    """Run each target in its own thread and wait for all; re-raise the first error (set `stop` on one).

    NOTE: plain threads, not a ThreadPoolExecutor: a loader worker forked from an executor's thread runs
    the executor's exit hook at its own exit, fails to join itself and exits with status 1, which
    DataLoader reports as a crashed worker.
    """
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as e:  # noqa: BLE001 - carried to the caller below
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(t,), name=f"loaderlab-model{i}") for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    real = [e for e in errors if not isinstance(e, Stopped)]
    if real:
        raise real[0]


def run_threads(ctx: RunContext) -> None:
    cfg, device = ctx.cfg, ctx.device
    dataset, models, opts = _build(cfg, device)
    recorder = Recorder(ctx)
    stop = threading.Event()  # set when either thread fails: the other one (and the feeder) stop between batches
    with contextlib.ExitStack() as stack:
        # --- data: one loader fanned out to both threads, or one loader each ---
        sources: list[Callable[[int], Iterator[Any]]]  # per model: epoch -> its batches
        if cfg.dual_data == "shared":
            loader = stack.enter_context(open_loader(dataset, cfg, device))
            fan = stack.enter_context(FanOut(loader, N_MODELS, cfg.epochs, cfg.prefetch_depth, stop))
            sources = [functools.partial(fan.epoch, i) for i in range(N_MODELS)]
        else:
            sources = [stack.enter_context(open_loader(dataset, cfg, device)).epoch for _ in range(N_MODELS)]
        # --- train: one thread per model (one CUDA stream each); the first real error wins, the other stops ---
        streams = [_thread_stream(device) for _ in range(N_MODELS)]
        _run_to_end(
            [
                functools.partial(
                    _thread_loop, recorder, cfg, i, models[i], opts[i], sources[i], device, stop, streams[i]
                )
                for i in range(N_MODELS)
            ],
            stop,
        )
    recorder.finish()


def _thread_stream(device: torch.device) -> torch.cuda.Stream | None:
    """A stream for one model's thread, ordered after the models' weights were built on the current stream."""
    if device.type != "cuda":
        return None
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    return stream


# ---------------------------------------------------------------------------- dual-processes


def _process_main(i: int, cfg: RunConfig, device_names: list[str], threads: int, link: Link) -> None:
    """Model i's whole run in its own process: its own loader, model and optimizer (a spawned child)."""
    torch.set_num_threads(threads)
    device = devices.resolve(device_names[i])
    dataset = build_dataset(cfg)
    model = build_model(cfg, dataset, i, device, dual=True)
    opt = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    with open_loader(dataset, cfg, device) as loader:
        link.ready()  # both models start training together
        for epoch in range(cfg.epochs):
            fail_point(i, epoch)
            link.emit(epoch_payload(cfg, i, 0, epoch, train_epoch(model, opt, loader.epoch(epoch), device)))


def run_processes(ctx: RunContext) -> None:
    cfg = ctx.cfg
    names = cfg.devices or [str(ctx.device)] * N_MODELS
    # NOTE: the children share the cores the run has; each gets its share of intra-op threads (at least 1)
    threads = max(1, torch.get_num_threads() // N_MODELS)
    recorder = Recorder(ctx)
    with ChildGroup(_process_main, N_MODELS, (cfg, names, threads), recorder.write, who="model") as group:
        group.wait()
    recorder.finish()


# ---------------------------------------------------------------------------- bounds and specs


def _computes(cal: Calibrator) -> list[Pass]:
    """Each model's compute-only epoch, on its own device (dual-processes with `devices`) or the run's."""
    names = cal.cfg.devices if cal.cfg.mode == "dual-processes" and cal.cfg.devices else [None, None]
    out = []
    for i, name in enumerate(names):
        dev = devices.resolve(name) if name else cal.device
        out.append(cal.compute(f"dual-{i}", step_builder(cal.cfg, i, dev, dual=True), device=dev)[0])
    return out


def sequential_bound(cal: Calibrator) -> list[Phase]:
    """Two phases, model A's epoch then model B's, each loading the epoch once."""
    loader = cal.loader()
    return [Phase(loader.seconds, c.seconds, None, loader.cpu_s, c.cpu_s, cal.overlaps) for c in _computes(cal)]


def concurrent_bound(cal: Calibrator) -> list[Phase]:
    """One phase: the loader against the slower model, A + B kept as the serial compute (for `overlap`). On
    the cores, both models' compute and every loader (one each with dual-processes or separate data)."""
    a, b = _computes(cal)
    loader = cal.loader()
    loaders = 2 if cal.cfg.mode == "dual-processes" or cal.cfg.dual_data == "separate" else 1
    return [
        Phase(
            loader.seconds,
            max(a.seconds, b.seconds),
            a.seconds + b.seconds,
            loader.cpu_s * loaders,
            a.cpu_s + b.cpu_s,
            cal.overlaps,
        )
    ]


def _check(cfg: RunConfig) -> None:
    check_model_b(cfg)


def _check_processes(cfg: RunConfig) -> None:
    check_model_b(cfg)
    check_devices(cfg, N_MODELS, "one per model")
    if len(cfg.devices) == 1:
        raise ConfigError("devices", "dual-processes takes two devices (one per model) or none (both on `device`)")


SEQUENTIAL = ModeSpec(
    run=run_sequential, check=_check, doc="two models, one after the other: the dual baseline", bound=sequential_bound
)
THREADS = ModeSpec(run=run_threads, check=_check, doc="two models, one Python thread each", bound=concurrent_bound)
PROCESSES = ModeSpec(
    run=run_processes,
    check=_check_processes,
    doc="two models, one spawned process each",
    bound=concurrent_bound,
    own_processes=True,
)
STREAMS = ModeSpec(
    run=run_streams, check=check_streams, doc="two models on one GPU, one CUDA stream each", bound=concurrent_bound
)
