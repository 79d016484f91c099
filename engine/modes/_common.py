"""What the modes share: the step, model i, one epoch of one model, the epoch record, the run figures.

    loss = train_step(model, opt, x, y)                            # forward, backward, step
    model = build_model(cfg, dataset, idx=1, device=device)       # dual-*: model_b / width_b for idx 1
    record = train_epoch(model, opt, loader.epoch(e), device)     # the single loop's body, for one model
    record, loss = timed_epoch(batches, device, step)              # the one timed loop, for any step
    recorder.write(epoch_payload(cfg, model_idx, rank, e, record))
    recorder.finish()                                              # ctx.summary: aggregate figures

Test hook: LOADERLAB_FAIL_AT="<model_idx or rank>:<epoch>" makes that model (or ddp rank) raise at the
start of that epoch, so tests can prove that one failing thread or process fails the whole run cleanly.
"""

from __future__ import annotations

import os
import statistics
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable

import torch

from engine import devices, models
from engine.errors import ConfigError
from engine.loaders import to_device
from engine.measure import startup
from engine.measure import EpochTimer, samples_per_s, span_s
from engine.modes._base import RunContext
from engine.plugins import is_spec

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = [
    "FAIL_AT_ENV",
    "Recorder",
    "build_model",
    "check_devices",
    "check_model_b",
    "epoch_payload",
    "fail_point",
    "step_builder",
    "throughput",
    "timed_epoch",
    "train_epoch",
    "train_step",
]

FAIL_AT_ENV = "LOADERLAB_FAIL_AT"


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Forward, backward, step. Returns the detached loss (no .item(): that would sync CUDA per step)."""
    opt.zero_grad(set_to_none=True)
    loss = models.loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.detach()


def build_model(cfg: RunConfig, dataset: Any, idx: int, device: torch.device, *, dual: bool = False) -> torch.nn.Module:
    """Model idx, seeded with seed + idx (distinct, reproducible weights); with dual, idx 1 is model_b/width_b."""
    arch, width, field = cfg.model, cfg.width, "model"
    if dual and idx == 1:
        arch, width, field = cfg.model_b or cfg.model, cfg.width_b or cfg.width, "model_b"
    torch.manual_seed(cfg.seed + idx)
    return models.build_model(cfg, dataset.sample_shape, dataset.num_classes, arch=arch, width=width, field=field).to(
        device
    )


def step_builder(
    cfg: RunConfig, idx: int, device: torch.device, *, dual: bool = False
) -> Callable[[Any], list[Callable]]:
    """For a mode's lower bound (engine/calibrate/bound.py): dataset -> [model idx's train_step on device]."""

    def build(dataset: Any) -> list[Callable]:
        model = build_model(cfg, dataset, idx, device, dual=dual)
        opt = models.make_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
        return [lambda x, y: train_step(model, opt, x, y)]

    return build


def timed_epoch(
    batches: Iterable,
    device: torch.device,
    step: Callable[[torch.Tensor, torch.Tensor], Any],
    settle: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], torch.Tensor | None]:
    """The one timed epoch loop every mode runs: for each batch, the wait for it, its copy to `device` and
    `step(x, y)`, timed by an EpochTimer. `step` returns the batch's mean loss (one per model: a tensor of N), or
    None when it keeps its own; `settle` runs after the last step and before the timer's end (split: the other
    devices' streams). Returns the timer's record and the mean loss per sample (None if the step kept none)."""
    timer = EpochTimer(device)
    loss_sum: torch.Tensor | None = None
    samples = 0
    for batch in timer.batches(batches):
        with timer.copy():
            x, y = to_device(batch, device)
        with timer.compute():
            loss = step(x, y)
            if loss is not None:  # NOTE: summed as a tensor: no .item() (a sync) inside the timed step
                loss_sum = loss * y.shape[0] if loss_sum is None else loss_sum + loss * y.shape[0]
        samples += y.shape[0]
    if settle is not None:
        settle()
    record = timer.finish(samples)
    return record, None if loss_sum is None else loss_sum / max(samples, 1)


def train_epoch(
    model: torch.nn.Module, opt: torch.optim.Optimizer, batches: Iterable, device: torch.device
) -> dict[str, Any]:
    """One epoch of one model over `batches` (the timed loop); the record includes the mean loss."""
    record, loss = timed_epoch(batches, device, lambda x, y: train_step(model, opt, x, y))
    record["loss"] = loss.item() if loss is not None else 0.0
    return record


def epoch_payload(cfg: RunConfig, model_idx: int, rank: int, epoch: int, record: dict[str, Any]) -> dict[str, Any]:
    """The `epoch` event's fields (see engine/runlog.py)."""
    return {"model_idx": model_idx, "rank": rank, "epoch": epoch, "warmup": epoch < cfg.warmup_epochs, **record}


def fail_point(who: int, epoch: int) -> None:
    """Raise if LOADERLAB_FAIL_AT names this model (or rank) and epoch: the test hook described above."""
    target = os.environ.get(FAIL_AT_ENV, "")
    if target and target == f"{who}:{epoch}":
        raise RuntimeError(f"injected failure in model/rank {who} at epoch {epoch} ({FAIL_AT_ENV}={target})")


def throughput(events: list[dict[str, Any]], per: str = "model") -> dict[str, Any]:
    """Run figures over steady-state epochs (all epochs if every one is warm-up).

    aggregate_samples_per_s = samples of all models / wall time from the first start to the last end
    (engine/measure/throughput.py, as the store's); wall_s_total is that wall time; per_<per>_samples_per_s[i]
    is model (or rank) i's samples over its own first start to last end.
    """
    steady = [e for e in events if not e["warmup"]] or events
    if not steady:
        return {}
    wall = span_s(steady)
    groups: dict[int, list[dict[str, Any]]] = {}
    for e in steady:
        groups.setdefault(e["model_idx"] if per == "model" else e["rank"], []).append(e)
    per_group = [samples_per_s(groups[key]) or 0.0 for key in sorted(groups)]
    return {
        "aggregate_samples_per_s": samples_per_s(steady, wall) or 0.0,
        "wall_s_total": wall,
        "aggregate_samples": sum(e["samples"] for e in steady),
        f"per_{per}_samples_per_s": per_group,
        f"n_{per}s_run": len(groups),
        f"mean_{per}_samples_per_s": statistics.fmean(per_group),
    }


class Recorder:
    """Writes a mode's epoch events (thread-safe: RunLog locks) and keeps their timing fields for finish().

    The first epoch written also closes the run's start-up: its `startup` event (engine/measure/startup.py)."""

    _KEEP = ("model_idx", "rank", "epoch", "warmup", "samples", "t_start", "t_end")

    def __init__(self, ctx: RunContext, per: str = "model"):
        self.ctx, self.per = ctx, per
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # dual-threads writes from two threads

    def write(self, payload: dict[str, Any]) -> None:
        with self._lock:
            first = not self.events
            self.events.append({k: payload[k] for k in self._KEEP})
        if first and self.ctx.startup:
            marks = self.ctx.startup
            self.ctx.log.write(
                "startup", **startup.phases(marks["launched_at"], marks["imported_at"], marks["cuda_s"], payload)
            )
        self.ctx.log.write("epoch", **payload)

    def finish(self) -> None:
        figures = throughput(self.events, self.per)
        # NOTE: one throughput for every mode (the run row's samples_per_s): steady samples of all models and
        # ranks over the wall from the first steady start to the last end, gaps between epochs included
        figures["samples_per_s"] = figures.get("aggregate_samples_per_s")
        self.ctx.summary.update(figures)


# ---------------------------------------------------------------------------- config checks


def check_devices(cfg: RunConfig, most: int | None, what: str) -> None:
    """Each `devices` entry must be a device this machine has; at most `most` of them."""
    for d in cfg.devices:
        devices.check_device("devices", d)
    if most is not None and len(cfg.devices) > most:
        raise ConfigError("devices", f"{cfg.mode} takes at most {most} devices ({what}); got {len(cfg.devices)}")


def check_model_b(cfg: RunConfig) -> None:
    if cfg.model_b and cfg.model_b not in models.MODELS and not is_spec(cfg.model_b):
        raise ConfigError(
            "model_b",
            f"'{cfg.model_b}' is unknown; choose one of: {', '.join(models.MODELS)}, your own "
            "as 'module.path:callable', or leave it empty for the same model as `model`",
        )
