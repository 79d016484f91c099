"""A script's candidates ranked by the lab's model (engine/predict/model.py, the one `tune` ranks by), fed from the
script's first trial (engine/advice/tune_script.py) instead of a probe of a lab pipeline.

    order = rank_settings(settings, first, cores, cuda)   # candidate indices but 0, predicted fastest first

What the model reads, and where each figure comes from (a trial sees the loop from outside: its waits, its steps,
its process tree's CPU):
- load_wall_s, a batch's load: the loop's wait per batch under the script's own setting. With no workers that is
  each batch's load in full; with w workers it is what the workers did not hide, so one worker's time per batch is
  taken as w x (wait + step), an upper estimate.
- load_cpu_s, the CPU part of that load: the trial's process-tree CPU per batch (its sampler's mean) less one core
  through the step, at most the load. ASSUMED half the load where the trial had no CPU sample.
- compute, the step: the trial's step per batch, at the script's intra-op threads. ASSUMED: threads neither speed
  nor slow it (a trial measures one thread count), so the ranking does not read threads; the first rung tries
  them beside the top pick (tune_script's _KNOBS).
- gil_share: ASSUMED 1, the model's own default where unmeasured: only the threads loader reads it, and a batch's
  CPU work is taken to hold the GIL throughout, so threads are predicted to overlap only the load's waits.
- handoff_s, receive_s: ASSUMED 0: a worker's hand-off of its batch is not seen from outside the loop.
- cores: the usable CPUs; batch_size: the script's; n_samples: the trial's batches x batch_size, so a predicted
  epoch is the trial's length, and seconds per batch is it over the batches.
"""

from __future__ import annotations

from typing import Any

from engine.config import RunConfig
from engine.predict import ComputeAt, Probe, predict

__all__ = ["probe_of", "rank_settings", "seconds_per_batch"]

_CPU_SHARE_UNSAMPLED = 0.5  # the CPU part of a batch's load where the trial had no CPU sample (module doc)


def probe_of(first: dict[str, Any], cores: float, cuda: bool) -> Probe:
    """The model's probe from the first trial's figures of the tuned loader (engine/advice/_script_trials.py's
    stream_figures): its wait and step per batch, its batches, settings and process-tree CPU."""
    settings = first["settings"]
    w0, wait, step = int(settings.get("num_workers") or 0), first["wait"], first["step"]
    load = wait if w0 == 0 else (wait + step) * w0
    cpu = first.get("cpu_pct")
    if cpu is None:
        work = load * _CPU_SHARE_UNSAMPLED
    else:  # the tree's CPU over a batch's wait and step, less one core through the step
        work = min(load, max(0.0, cpu / 100.0 * (wait + step) - step))
    threads = int(settings.get("intra_op_threads") or 1)
    batch = int(settings.get("batch_size") or 1)
    one: ComputeAt = {"wall_s": step, "cpu_s": step}
    return {
        "device": "cuda" if cuda else "cpu",
        "cores": cores,
        "batch_size": batch,
        "n_samples": max(1, first["steps"]) * batch,
        "load_wall_s": load,
        "load_cpu_s": work,
        "default_threads": threads,
        "compute": {"1": one, str(threads): one},
        "gil_share": 1.0,
        "handoff_s": 0.0,
        "receive_s": 0.0,
    }


def seconds_per_batch(setting: dict[str, Any], probe: Probe) -> float:
    """A candidate's predicted seconds per batch (its steady epoch over the probe's batches)."""
    w = int(setting.get("num_workers") or 0)
    loader = setting.get("loader") or ("processes" if w else "sync")
    cfg = RunConfig.from_dict(
        {
            "mode": "single",
            "loader": loader,
            "workers": w,
            "batch_size": probe["batch_size"],
            "threads": setting.get("threads") or 0,
            "device": "cpu",
        }
    )
    p = predict(cfg, probe)
    assert p is not None  # sync, threads and processes in the single mode: the model covers them
    return p.epoch_s * probe["batch_size"] / probe["n_samples"]


def rank_settings(settings: list[dict[str, Any]], first: dict[str, Any], cores: float, cuda: bool) -> list[int]:
    """Candidates 1.. (0 is the script's own, measured already), predicted fastest first; ties keep their order."""
    probe = probe_of(first, cores, cuda)
    return sorted(range(1, len(settings)), key=lambda i: seconds_per_batch(settings[i], probe))
