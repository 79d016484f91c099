"""tune's space gains the knobs users turn (engine/advice/_knobs.py): pin_memory on CUDA only, persistent_workers where
epochs are short, the start method only where the platform's default is not fork and the user set none; the model
cannot rank them, so a predicted-fastest setting brings its variants into the first rung."""

from __future__ import annotations

import sys

import pytest

from engine.advice._knobs import siblings, widen
from engine.advice.tune import candidates
from engine.config import RunConfig

TINY = {"n_samples": 128, "image_size": 8, "width": 8, "batch_size": 32}


def _varied(configs: list[RunConfig], knob: str) -> set:
    return {getattr(c, knob) for c in configs}


def test_on_cpu_only_processes_gain_the_persistent_workers_variant():
    base = RunConfig.from_dict({**TINY, "device": "cpu"})
    space = candidates(base, cores=2)
    wide, note = widen(space, base, None)
    assert wide[:1] == space[:1] and len({c.to_json() for c in wide}) == len(wide)  # candidate 0 first, no twins
    added = [c for c in wide if c not in space]
    assert added and {c.loader for c in added} == {"processes"} and _varied(added, "persistent_workers") == {False}
    assert _varied(wide, "pin_memory") == {True}  # pinning does nothing on a CPU run: not searched
    assert note == "persistent_workers"


def test_on_cuda_pin_memory_is_searched_jointly():
    base = RunConfig.from_dict({**TINY, "device": "cuda"})
    wide, note = widen(candidates(base, cores=2), base, None)
    assert _varied(wide, "pin_memory") == {True, False} and note.startswith("pin_memory")
    syncs = [c for c in wide if c.loader == "sync" and c.threads == 0]
    assert {c.pin_memory for c in syncs} == {True, False}


def test_long_epochs_keep_workers_persistent():
    base = RunConfig.from_dict({**TINY, "device": "cpu"})
    probe_says_long = {
        "device": "cpu",
        "cores": 2,
        "batch_size": 32,
        "n_samples": 128,
        "default_threads": 2,
        "load_cpu_s": 10.0,
        "load_wall_s": 10.0,
        "gil_share": 0.0,
        "compute": {"1": {"wall_s": 1.0, "cpu_s": 1.0}, "2": {"wall_s": 0.6, "cpu_s": 1.2}},
    }
    wide, note = widen(candidates(base, cores=2), base, probe_says_long)
    assert _varied(wide, "persistent_workers") == {True} and note == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the start method is searched off Linux")
def test_start_methods_are_left_alone_on_linux_and_a_users_choice_is_kept():
    for method in ("fork", "spawn"):
        base = RunConfig.from_dict({**TINY, "device": "cpu", "start_method": method})
        wide, _ = widen(candidates(base, cores=2), base, None)
        assert _varied([c for c in wide if c.loader == "processes"], "start_method") == {method}


def test_a_picked_setting_brings_only_its_knob_variants():
    base = RunConfig.from_dict({**TINY, "device": "cuda"})
    wide, _ = widen(candidates(base, cores=2), base, None)
    picked = next(i for i, c in enumerate(wide) if c.loader == "processes" and c.workers == 2)
    sibs = siblings(wide, [picked])
    assert len(sibs) == 3  # pin x persistent, less the picked one
    for i in sibs:
        c, p = wide[i], wide[picked]
        assert (c.loader, c.workers, c.threads, c.prefetch_depth) == (p.loader, p.workers, p.threads, p.prefetch_depth)
        assert (c.pin_memory, c.persistent_workers) != (p.pin_memory, p.persistent_workers)
