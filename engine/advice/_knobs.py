"""The knobs users turn that the capacity model does not read: pin_memory, persistent_workers and the start method.

tune's space gains them jointly with what it searches (loader, workers, prefetch depth, intra-op threads), where they
can matter (`widen`):
    pin_memory           on CUDA only: on a CPU run pinning does nothing (the lab ignores it there)
    persistent_workers   for processes, where epochs are short enough for worker start-up to show (under SHORT_EPOCH_S
                         predicted, or unknown): re-starting workers every epoch costs a start-up per epoch
    start_method         for processes, where this platform's default is not fork (macOS, Windows: spawn), unless the
                         user set one (`--set start_method=spawn`): theirs is kept
The model ranks loader, workers and threads; these it cannot tell apart, so each of the predicted fastest settings
brings its variants into the first rung (`siblings`) and successive halving decides, as it does without a prediction.
"""

from __future__ import annotations

import multiprocessing
import sys

from engine.predict.model import predict
from engine.predict.records import Probe
from engine.config import RunConfig

__all__ = ["KNOBS", "SHORT_EPOCH_S", "siblings", "widen"]

KNOBS = ("pin_memory", "persistent_workers", "start_method")
SHORT_EPOCH_S = 30.0  # a fork start-up (0.1-1 s) or a spawn one (seconds, imports) shows in epochs shorter than this
_DEFAULT_START = RunConfig.__dataclass_fields__["start_method"].default


def _start_methods(base: RunConfig) -> list[str]:
    """Other start methods to try: this platform's where its default is not fork and the user set none."""
    # NOTE: fork is the default on Linux (Python <= 3.13); spawn on macOS and Windows. Asking multiprocessing would
    # fix this process's own start method as a side effect.
    if base.start_method != _DEFAULT_START or sys.platform.startswith("linux"):
        return []
    return [m for m in multiprocessing.get_all_start_methods() if m != base.start_method]


def widen(configs: list[RunConfig], base: RunConfig, probe: Probe | None) -> tuple[list[RunConfig], str]:
    """configs and their knob variants (module docstring), candidate 0 first; and a note naming the knobs searched."""
    cuda = str(base.device).startswith("cuda") or (probe is not None and probe["device"] == "cuda")
    ref = predict(base.replace(loader="sync", workers=0), probe) if probe else None
    short = ref is None or ref.epoch_s < SHORT_EPOCH_S
    methods = _start_methods(base)
    out, seen = [], set()
    for cfg in configs:
        family = [cfg]
        if cuda:
            family += [c.replace(pin_memory=not c.pin_memory) for c in family]
        if cfg.loader == "processes":
            if short:
                family += [c.replace(persistent_workers=not c.persistent_workers) for c in family]
            family += [c.replace(start_method=m) for c in family for m in methods]
        for c in family:
            if (key := c.to_json()) not in seen:
                seen.add(key)
                out.append(c)
    searched = [k for k, on in zip(KNOBS, (cuda, short, bool(methods))) if on]
    return out, ", ".join(searched)


def siblings(configs: list[RunConfig], picked: list[int]) -> list[int]:
    """The candidates that differ from a picked one only in KNOBS, in the order listed (the picked excluded)."""

    def rest(c: RunConfig) -> str:
        return RunConfig.to_json(c.replace(**{k: RunConfig.__dataclass_fields__[k].default for k in KNOBS}))

    wanted = {rest(configs[i]) for i in picked}
    return [i for i, c in enumerate(configs) if i not in picked and rest(c) in wanted]
