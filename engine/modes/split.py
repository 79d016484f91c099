"""`split`: one model cut into n_stages stages over `devices`, trained with a GPipe-style schedule.

micro_batches M = 1 is the naive split (each stage waits for the previous one). M > 1 is GPipe: the
batch is cut into M micro-batches, every micro-batch goes forward through every stage, then one backward
runs over the sum of the micro-batch losses, each weighted by its share of the batch, so the gradient
equals the full-batch gradient. On CUDA each stage runs on its own stream and stage s works on
micro-batch m at clock m + s, so stages overlap (also when `devices` repeats one GPU, which measures the
pipeline's overhead on one device). On CPU the same schedule runs in order: correct, with no overlap.

NOTE: torch.distributed.pipelining puts one stage per process; with one process and a list of devices
a schedule of our own is simpler and keeps every mode in the runner's process.

`devices`: empty puts every stage on `device`; otherwise stage s goes on devices[s * len(devices) // n_stages]
(contiguous blocks of stages per device).

    python -m engine run --mode split --n-stages 4 --micro-batches 4 --devices cuda:0,cuda:0
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import torch
from torch import nn

from engine.devices import resolve as resolve_device
from engine.errors import ConfigError
from engine.calibrate import Calibrator, Phase
from engine.loaders import open_loader
from engine.names import DEFAULT_CLASSES
from engine.models import MODELS, build_model, loss_fn, make_optimizer, split_stages
from engine.modes._base import ModeSpec, RunContext
from engine.modes._common import Recorder, check_devices, epoch_payload, fail_point, timed_epoch
from engine.modes._stage_step import stage_builder
from engine.plugins import is_spec
from engine.workloads import build_dataset

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["Pipeline", "SPEC", "bound", "run", "stage_devices"]

log = logging.getLogger(__name__)


def stage_devices(cfg: RunConfig, default: torch.device) -> list[torch.device]:
    if not cfg.devices:
        return [default] * cfg.n_stages
    return [resolve_device(cfg.devices[s * len(cfg.devices) // cfg.n_stages]) for s in range(cfg.n_stages)]


class Pipeline:
    """Stages placed on devices; forward_backward(x, y) leaves the full-batch gradient in the parameters."""

    def __init__(self, stages: Sequence[nn.Module], devices: list[torch.device], micro_batches: int):
        self.stages = [stage.to(d) for stage, d in zip(stages, devices)]
        self.devices, self.micro_batches = devices, micro_batches
        self.streams = [torch.cuda.Stream(d) if d.type == "cuda" else None for d in devices]

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """GPipe step without the optimizer: all forwards, then one backward. Returns the batch's mean loss."""
        xs, ys = x.chunk(self.micro_batches), y.chunk(self.micro_batches)  # the last chunk may be smaller
        acts: list[torch.Tensor] = list(xs)
        ready: list[torch.cuda.Event | None] = [self._event(None, self.devices[0]) for _ in xs]
        # --- forward: at clock t, stage s runs micro-batch t - s (stages overlap on CUDA) ---
        n_stages = len(self.stages)
        for clock in range(len(xs) + n_stages - 1):
            for s in range(n_stages):
                m = clock - s
                if 0 <= m < len(xs):
                    acts[m], ready[m] = self._run_stage(s, acts[m], ready[m])
        self._join_streams()
        # --- backward: one pass over the batch-weighted micro-batch losses == the full-batch mean loss ---
        last = self.devices[-1]
        total = sum(loss_fn(a, t.to(last, non_blocking=True)) * (t.shape[0] / y.shape[0]) for a, t in zip(acts, ys))
        assert isinstance(total, torch.Tensor)  # a sum of one loss or more: never sum()'s start, 0
        total.backward()
        return total.detach()

    def _run_stage(
        self, s: int, a: torch.Tensor, ready: torch.cuda.Event | None
    ) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        stream, device = self.streams[s], self.devices[s]
        if stream is None:
            if ready is not None:
                ready.synchronize()  # a CPU stage after a CUDA stage: its input must be finished first
            return self.stages[s](a.to(device)), None
        cross = a.is_cuda and a.device != device
        # NOTE: a cross-device copy runs on the SOURCE device's current stream (ATen joins it with ours by a
        # two-way barrier): waiting on our stream alone would order only the destination, and the copy could
        # read the activation before the previous stage's stream has written it.
        reader = torch.cuda.current_stream(a.device) if cross else stream
        with torch.cuda.stream(stream):
            if ready is not None:
                stream.wait_event(ready)  # the input was produced on the previous stage's stream
                if cross:
                    reader.wait_event(ready)
            if a.is_cuda:
                a.record_stream(reader)  # ...and is read there: keep its memory until that stream is done
            out = self.stages[s](a.to(device, non_blocking=True))
        return out, self._event(stream, device)

    @staticmethod
    def _event(stream: torch.cuda.Stream | None, device: torch.device) -> torch.cuda.Event | None:
        if device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record(stream or torch.cuda.current_stream(device))
        return event

    def _join_streams(self) -> None:
        """Each device's current stream waits for its stages, so the loss, backward and step see their work."""
        for stream, device in zip(self.streams, self.devices):
            if stream is not None:
                torch.cuda.current_stream(device).wait_stream(stream)

    def sync_to_first(self) -> None:
        """The first device's stream waits for every other device, so a CUDA timer there spans the whole step."""
        first = self.devices[0]
        for device in {d for d in self.devices if d != first and d.type == "cuda"}:
            event = self._event(None, device)  # an event: the device is a CUDA one
            if event is not None and first.type == "cuda":
                torch.cuda.current_stream(first).wait_event(event)


def _step(pipe: Pipeline, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One split step: the pipelined forward and backward, the optimizer step, the first device waiting for all."""
    opt.zero_grad(set_to_none=True)
    loss = pipe.forward_backward(x, y)
    opt.step()
    pipe.sync_to_first()
    return loss


def _sync_others(devices: list[torch.device], first: torch.device) -> None:
    """Before the epoch's timer ends on the first device: every other CUDA device has finished its work."""
    for device in {d for d in devices if d.type == "cuda" and d != first}:
        torch.cuda.synchronize(device)


def run(ctx: RunContext) -> None:
    cfg = ctx.cfg
    # --- build: the model (seeded like single), cut into stages placed on their devices ---
    torch.manual_seed(cfg.seed)
    dataset = build_dataset(cfg)
    model = build_model(cfg, dataset.sample_shape, dataset.num_classes)
    devices = stage_devices(cfg, ctx.device)
    pipe = Pipeline(split_stages(model, cfg.n_stages), devices, cfg.micro_batches)
    opt = make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    first = devices[0]  # batches land on the first stage's device; the timer runs there
    recorder = Recorder(ctx)

    with open_loader(dataset, cfg, first) as loader:
        for epoch in range(cfg.epochs):
            fail_point(0, epoch)
            # --- one epoch: every step is one pipelined forward/backward plus the optimizer step ---
            record, loss = timed_epoch(
                loader.epoch(epoch),
                first,
                lambda x, y: _step(pipe, opt, x, y),
                settle=lambda: _sync_others(devices, first),
            )
            record["loss"] = loss.item() if loss is not None else 0.0
            recorder.write(epoch_payload(cfg, 0, 0, epoch, record))
    recorder.finish()


def bound(cal: Calibrator) -> list[Phase]:
    """Per stage, on the stage's device: naive (1 micro-batch) is the sum of the stages; a pipeline is the
    busiest device's sum (the rest can overlap)."""
    devs = stage_devices(cal.cfg, cal.device)
    stages = [cal.compute(f"stage-{s}", stage_builder(cal.cfg, devs, s), device=devs[s])[0] for s in range(len(devs))]
    loader, cpu = cal.loader(), sum(p.cpu_s for p in stages)
    if cal.cfg.micro_batches == 1:
        return [Phase(loader.seconds, sum(p.seconds for p in stages), None, loader.cpu_s, cpu, cal.overlaps)]
    per_device: dict[str, float] = {}
    for s, d in enumerate(devs):
        per_device[str(d)] = per_device.get(str(d), 0.0) + stages[s].seconds
    return [
        Phase(loader.seconds, max(per_device.values()), sum(p.seconds for p in stages), loader.cpu_s, cpu, cal.overlaps)
    ]


def _check(cfg: RunConfig) -> None:
    check_devices(cfg, cfg.n_stages, "stages are placed on devices in contiguous blocks")
    if cfg.micro_batches > cfg.batch_size:
        raise ConfigError(
            "micro_batches", f"must be at most batch_size ({cfg.batch_size}): each micro-batch needs a sample"
        )
    if is_spec(cfg.model):
        return  # a user's model is built for its data: engine.run.preflight cuts it on one real batch
    # how many blocks there are to cut depends on the architecture and depth only: a tiny instance says
    split_stages(MODELS[cfg.model]((3, 8, 8), cfg.num_classes or DEFAULT_CLASSES, 8, cfg.depth), cfg.n_stages)


SPEC = ModeSpec(
    run=run, check=_check, doc="one model cut into n_stages stages over devices, GPipe micro-batches", bound=bound
)
