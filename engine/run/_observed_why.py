"""An observed run's why: its bound, efficiency and verdict, in the lab's words (engine/calibrate/bound.py), from what
watching the script's loop measured, with no pass that would run the script's dataset or model again.

    fields = observed_figures(read_events(run_dir))   # {"bound_s", "efficiency", "verdict", "verdict_help", ...}

The lab's bound takes a loader-only and a compute-only pass; a script's loop gives neither, so the parts come from
its own readings (the median steady epoch's), and the arithmetic is the lab's (bound.figures):

    load     a loader in the loop (num_workers=0 on a CPU, where nothing overlaps it): its data wait after the first
             batch, which is the load itself; workers (or a GPU, whose queued kernels overlap the next load): the
             epoch's wall after its first batch where the step waited on data for (1 - EXPLAINED) of it or more (the
             loader was the slower side and delivered every batch within it), else the wait alone (the loader kept
             up; how far ahead it ran cannot be seen from outside it)
    step     the loop's own step (arrival of a batch to the request of the next)
    cores    the process tree's CPU-seconds over the steady epochs / the usable cores
    threads  torch's intra-op threads + the loader's workers against the usable cores

Not seen from outside the loop, and said so in the run's bound_note: the loader and the step apart from each other,
the thread pools the script's own code starts (BLAS, OpenMP), and the GIL's share of the load.
Loaded by the observe command's parent only, once a run ended (it imports torch through engine.calibrate), never in
the script, whose observer sits below the bound's layer.
"""

from __future__ import annotations

import json
from typing import Any

from engine.calibrate.bound import EXPLAINED, Phase, figures, steady_cpu_pct
from engine.measure import median_epoch_s, usable_cpus

__all__ = ["UNSEEN", "observed_figures"]

UNSEEN = (
    "observed from outside the loop: no loader-only or compute-only pass (each would run the script's dataset "
    "or model again), so the load and the step are the loop's own readings; the thread pools the script's code "
    "starts (BLAS, OpenMP) and the GIL's share of the load are not counted"
)
_PASS_FIELDS = ("loader_only_s", "compute_only_s", "loader_cpu_s", "compute_cpu_s", "calib_age_s")


def observed_figures(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The run row's bound fields for an observed RunLog (module doc); a run with no steady epoch gets a note only."""
    settings: dict[str, Any] = {}
    stream = None
    mean_cpu = None
    for e in events:
        if e.get("type") == "summary":
            if e.get("observed_settings"):
                settings = json.loads(e["observed_settings"])
                stream = e.get("observed_stream")
            mean_cpu = e.get("mean_cpu_pct", mean_cpu)
    steady = [e for e in events if e.get("type") == "epoch" and not e.get("warmup") and e.get("n_steps")]
    if not steady:
        return {"bound_note": "no steady epoch with a batch was observed: nothing to bound"}
    measured = median_epoch_s(steady)
    if measured is None:
        return {"bound_note": "no steady epoch with a wall time was observed: nothing to bound"}
    e = max((x for x in steady if x["wall_s"] <= measured), key=lambda x: x["wall_s"])  # the (lower) median epoch
    ttfb = e["ttfb_s"]  # NOTE: the same epoch's: its wait and wall hold this first batch, not the median's
    wait, step = max(0.0, e["data_wait_s"] - e["ttfb_s"]), e["compute_s"]
    workers = int(settings.get("num_workers") or 0)
    cuda = e.get("gpu_idle_s") is not None
    overlaps = workers > 0 or cuda
    after_first = max(0.0, e["wall_s"] - e["ttfb_s"])
    waited = wait >= (1 - EXPLAINED) * after_first
    load = after_first if overlaps and waited else wait
    cores = usable_cpus()
    cpu_pct = steady_cpu_pct(events, steady)
    cpu_pct = mean_cpu if cpu_pct is None else cpu_pct
    cpu_s = (cpu_pct or 0.0) / 100.0 * e["wall_s"]
    threads = {
        "intra_op": int(settings.get("intra_op_threads") or 1),
        "loader": workers,
        "cores": cores,
        "extra": 0,
        "kind": "processes" if workers else "sync",
        "pools": None,
    }
    phase = Phase(loader_s=load, compute_s=step, loader_cpu_s=cpu_s, overlaps=overlaps)
    out = figures([phase], measured, ttfb, 0.0, threads, mean_cpu_pct=cpu_pct, own_times=(e["data_wait_s"], step))
    out.update(dict.fromkeys(_PASS_FIELDS), steady_cpu_pct=cpu_pct)
    if out.get("verdict_help") and stream:
        out["verdict_help"] += (
            f" (the DataLoader at {stream}: num_workers={workers} on {cores:g} usable cores; "
            "python -m engine tune -- python SCRIPT tries the others)"
        )
    how = (
        "the load is the data wait (nothing overlaps it)"
        if not overlaps
        else "the load is the epoch after its first batch (the step waited on data)"
        if waited
        else "the load is the data wait only (the loader kept up)"
    )
    out["bound_note"] = "; ".join(x for x in (UNSEEN + f"; {how}", out.get("bound_note")) if x)
    out["epoch_s"] = measured  # the efficiency's denominator, stored as the run's epoch time (as calibrate's)
    return out
