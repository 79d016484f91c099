"""Limits that know the host: a config's processes and memory against this machine's usable cores and memory,
checked before anything is launched: CLI run, sweep and tune, job submit, the launch form, and launch() itself.

    warnings = check_host(cfg)                      # ConfigError when it cannot fit; warning lines when it is
    warnings = check_host(cfg, oversubscribe=True)  # oversubscribed but runs; insisting lifts the refusal of heavy
    warnings = check_all(sweep.configs())           # oversubscription (the memory refusal stays)

The schema allows 1024 ddp ranks and 256 workers whatever the machine, and a run far past the host would still
end and be stored as done, its figures meaningless. Here:
  * memory: a lower bound of what the run needs (each spawned Python process with torch, each model's weights,
    gradients and optimizer state on the CPU, each process's in-memory sample bank) above the memory available
    (psutil, and the cgroup's limit) is refused, with no way to insist: it cannot fit;
  * cores: processes that train or load in parallel (ddp ranks, dual-processes, the processes loader's
    workers, per rank or model) beyond the usable cores (affinity and the cgroup's CPU quota) is a warning:
    time-sharing can be the experiment; beyond HEAVY times the usable cores it is refused unless insisted on
    (--oversubscribe, or LOADERLAB_OVERSUBSCRIBE=1 for the job worker and a notebook).

Threads (the threads loader, dual-threads) are not counted against cores: they are cheap and often wait on I/O.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any


from engine.errors import ConfigError
from engine.names import DEFAULT_CLASSES
from engine.measure import available_memory, usable_cores, usable_cpus
from engine.plugins import is_spec

__all__ = [
    "HEAVY",
    "INSIST_HINT",
    "OVERSUBSCRIBE_ENV",
    "PROCESS_BYTES",
    "Demand",
    "available_memory",
    "check_all",
    "check_host",
    "check_machine",
    "check_machine_all",
    "check_rules",
    "demand",
    "oversubscribe_from_env",
    "usable_cores",
    "usable_cpus",
]

OVERSUBSCRIBE_ENV = "LOADERLAB_OVERSUBSCRIBE"
# the refusal's last words; the launch form says its checkbox instead (ui/form.py): no CLI flag in a browser
INSIST_HINT = f"pass --oversubscribe (or {OVERSUBSCRIBE_ENV}=1) to insist"
HEAVY = 4  # parallel processes per usable core past which oversubscription is refused unless insisted on
# NOTE: a lower bound, so a refusal is sound: a spawned Python process with torch and the engine imported holds
# more than this of its own (its unique set), and more again resident
PROCESS_BYTES = 128 * 2**20
_OPTIMIZER_STATES = {"sgd": 1, "adamw": 2}  # tensors per parameter besides the weight and its gradient


@dataclass(frozen=True)
class Demand:
    """What a config asks of the host: parallel processes (and the field that makes them), memory at least."""

    processes: int
    process_field: str
    memory_bytes: int
    memory_field: str
    memory_parts: str


def oversubscribe_from_env() -> bool:
    return os.environ.get(OVERSUBSCRIBE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def demand(cfg: Any) -> Demand:
    """A lower bound of what cfg needs: its parallel processes and its memory, each with the field to change."""
    if cfg.mode == "ddp":
        copies, copy_field = cfg.world_size, "world_size"  # spawned ranks, each with its own loader and model
    elif cfg.mode == "dual-processes":
        copies, copy_field = 2, "mode"  # one spawned process per model
    else:
        copies, copy_field = 1, "workers"
    workers = cfg.workers if cfg.loader == "processes" else 0
    spawned_workers = workers if cfg.start_method != "fork" else 0  # NOTE: forked workers share the parent's pages
    models = cfg.n_models if cfg.mode == "fused" else 2 if cfg.mode.startswith("dual-") else copies
    # NOTE: the models' weights are counted only where torch is loaded already: the CLI's parent leaves torch to
    # the run child, which checks again before its RunLog starts (engine/run/runner.py)
    model_bytes = _model_bytes(cfg) if "torch" in sys.modules and _on_cpu(cfg) else 0
    per_process = PROCESS_BYTES + _bank_bytes(cfg)
    parts: dict[str, int] = {}  # memory by the field that makes it (the launching run process itself: "run")
    for name, size in (
        ("run", per_process),
        (copy_field, (copies if copies > 1 else 0) * per_process),
        ("workers", copies * spawned_workers * per_process),
        ("n_models" if cfg.mode == "fused" else copy_field if copies > 1 else "width", models * model_bytes),
    ):
        parts[name] = parts.get(name, 0) + size
    words = f"{1 + (copies if copies > 1 else 0) + copies * spawned_workers} process(es) of at least {_gb(per_process)}"
    if model_bytes:
        words += f", {models} model(s) of {_gb(model_bytes)} with gradients and optimizer state"
    # NOTE: with workers, the training process mostly waits on them: workers = cores (the usual advice) fits
    return Demand(
        processes=copies * max(1, workers),
        process_field=copy_field if copies >= workers else "workers",
        memory_bytes=sum(parts.values()),
        memory_field=max((k for k in parts if k != "run"), key=lambda k: parts[k]),
        memory_parts=words,
    )


def check_host(cfg: Any, *, oversubscribe: bool | None = None) -> list[str]:
    """Refuse (ConfigError, one line naming the field) what cannot fit this host, or heavy oversubscription not
    insisted on; return a warning line for each lighter oversubscription. oversubscribe None: the environment."""
    insist = oversubscribe_from_env() if oversubscribe is None else oversubscribe
    need, cores, free = demand(cfg), usable_cores(), available_memory()
    if need.memory_bytes > free:
        raise ConfigError(
            need.memory_field,
            f"this run needs at least {_gb(need.memory_bytes)} of memory "
            f"({need.memory_parts}) and this host has {_gb(free)} available; "
            f"make it smaller ({_smaller(need.memory_field)}) or use a bigger "
            "machine",
        )
    if need.processes <= cores:
        return []
    what = f"{need.processes} parallel processes on this host's {cores} usable cores"
    if need.processes > HEAVY * cores and not insist:
        raise ConfigError(
            need.process_field,
            f"{what} is {need.processes / cores:.0f}x oversubscribed: they would "
            "time-share the cores, and the run would measure that, not the "
            f"loader; use at most {cores} (one per core), or {INSIST_HINT}",
        )
    return [f"{need.process_field}: {what}: they time-share the cores, so the run measures oversubscription"]


def check_all(configs: list[Any], *, oversubscribe: bool | None = None) -> list[str]:
    """check_host over a sweep's configs: the first refusal raises; each distinct warning once."""
    warnings: dict[str, None] = {}
    for cfg in configs:
        warnings.update(dict.fromkeys(check_host(cfg, oversubscribe=oversubscribe)))
    return list(warnings)


def check_rules(configs: list[Any]) -> None:
    """What the schema leaves to this machine and the registry (engine.registry.check: the device, --trace, each
    workload's and mode's rules), on every config: the first refused raises, naming its field (and grid point)."""
    # NOTE: imported here, the one gateway to it: the registry imports torch, and the dashboard, the CLI's parent
    # and launch()'s parent import this module (a run's child checks its own config, before its RunLog starts)
    from engine import registry  # noqa: PLC0415

    registry.check_each(configs)


def check_machine(cfg: Any, *, oversubscribe: bool | None = None) -> list[str]:
    """Everything this machine decides about cfg before it is queued or tried: check_rules, then check_host."""
    check_rules([cfg])
    return check_host(cfg, oversubscribe=oversubscribe)


def check_machine_all(configs: list[Any], *, oversubscribe: bool | None = None) -> list[str]:
    """check_machine over a sweep's configs: every config's rules first, then the host's limits (check_all)."""
    check_rules(configs)
    return check_all(configs, oversubscribe=oversubscribe)


def _smaller(field: str) -> str:
    return {
        "world_size": "fewer ranks",
        "workers": "fewer or forked workers",
        "n_models": "fewer models",
        "width": "a smaller model",
    }.get(field, field)


def _gb(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _on_cpu(cfg: Any) -> bool:
    """Whether the models live in host memory. NOTE: a GPU's memory is left to the run (its own OOM message)."""
    if cfg.device == "cpu":
        return True
    if cfg.device != "auto":
        return False
    torch, _ = _torch()
    return not torch.cuda.is_available()


def _torch() -> tuple[Any, dict[str, Any]]:
    """torch and the built-in models."""
    # NOTE: imported here: engine.models imports torch, and the dashboard imports this module without it
    import torch  # noqa: PLC0415
    from engine.models import MODELS  # noqa: PLC0415

    return torch, MODELS


def _model_bytes(cfg: Any) -> int:
    """One built-in model's weights, gradients and optimizer state, counted on the meta device (nothing allocated);
    0 for the user's own model or workload (shapes unknown until built: preflight builds them)."""
    if is_spec(cfg.model) or is_spec(cfg.workload):
        return 0
    torch, models = _torch()
    try:
        with torch.device("meta"):
            classes = cfg.num_classes or DEFAULT_CLASSES
            model = models[cfg.model]((3, cfg.image_size, cfg.image_size), classes, cfg.width, cfg.depth)
    except Exception:  # noqa: BLE001 - an estimate: a model the meta device cannot build counts as nothing
        return 0
    params = sum(p.numel() for p in model.parameters())
    return params * 4 * (2 + _OPTIMIZER_STATES.get(cfg.optimizer, 1))


def _bank_bytes(cfg: Any) -> int:
    """The in-memory sample bank each process of a tensor or pyloop run builds (engine/workloads/_base.py)."""
    if cfg.workload not in ("tensor", "pyloop"):
        return 0
    per_sample = 4 * 3 * cfg.image_size**2
    return max(1, min(cfg.n_samples, 4096, (64 * 2**20) // per_sample)) * per_sample
