"""The verdicts' vocabulary: what limits a run, and one line of what would help.

One list for the CLI summary, the run page, Explore and the advisor (engine/calibrate/bound.py decides which
applies). Pure: the dashboard and the advisor import it without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ABOVE_ONE", "OVERLAP_MIN", "VERDICTS", "efficiency_text", "serial_kind", "verdict_help"]

OVERLAP_MIN = 0.1  # a share of the epoch below which there is next to nothing to overlap

# verdict -> what would help (verdict_help fills in the counts of `oversubscribed` and `hidden-threads`)
VERDICTS = {
    "data-bound": "the loader pass explains the time: more workers, or a lighter transform",
    "compute-bound": "the model explains the time: the loader is good enough",
    "cpu-bound": "loader and model compete for the same cores: fewer or lighter workers, or a GPU",
    "oversubscribed": "more runnable threads than usable cores, and the cores were busy or the step ran slowed "
    "beside them",
    "hidden-threads": "thread pools the lab did not set (BLAS, OpenMP in your transform) oversubscribe the cores: "
    "set transform_threads=1",
    "gil-contention": "a Python-bound producer thread shares the GIL with the training step: use processes, or a "
    "transform that releases the GIL (numpy, torch ops, decoding in C)",
    "no-overlap": "the sync loader cannot overlap loading with compute by design: try prefetch or workers",
    "overhead-bound": "none of the above explains the time, and a fifth of it or more is outside the run's own "
    "data wait, copy and step: per-step overhead (Python, hooks, logging)",
}
ABOVE_ONE = "≥ 1: bound measured under other conditions"  # an efficiency above 1 is no fraction: no verdict


def efficiency_text(efficiency: float | None) -> str:
    """'84%', or ABOVE_ONE for an efficiency above 1 (the run beat a bound taken under other conditions)."""
    if efficiency is None or efficiency != efficiency:  # NaN: a store's missing value
        return "—"
    return ABOVE_ONE if efficiency > 1.0 else f"{efficiency:.0%}"


def verdict_help(name: str | None, threads: dict[str, Any] | None = None) -> str | None:
    """One line of what would help; `oversubscribed` and `hidden-threads` say the counts and the setting that fits.
    threads: intra_op, loader, cores, and optionally extra (pool threads), pools (their words), items_note (why the
    items load one at a time), which leads the line of whatever verdict applies."""
    note = (threads or {}).get("items_note")
    line = (
        _counts(name, threads)
        if name in ("oversubscribed", "hidden-threads") and threads
        else VERDICTS.get(name)
        if name
        else None
    )
    return f"{note}; {line}" if note and line else line or note


def _counts(name: str, threads: dict[str, Any]) -> str:
    intra, loader, cores, extra = threads["intra_op"], threads["loader"], threads["cores"], threads.get("extra", 0)
    pools = f" + {extra} pool thread(s)" if extra else ""
    counts = (
        f"{intra} intra-op + {loader} loader thread(s){pools} = {intra + loader + extra} runnable on {cores:g} "
        "usable cores: "
    )
    if name == "hidden-threads":
        return counts + (threads.get("pools") or "set transform_threads=1")
    fit = max(1, int(cores) - loader)
    todo = ([f"set threads to {fit} (cores - workers)"] if fit < intra else []) + (
        ["use fewer workers"] if loader >= cores else []
    )
    return counts + (", or ".join(todo) or "fewer threads or workers")


def serial_kind(loader_s: float, compute_s: float) -> str:
    """What limits a loop that cannot overlap (sync on a CPU): no-overlap, unless next to nothing is loaded (or
    computed); then what dominates, not advice to overlap."""
    both = loader_s + compute_s
    return (
        "compute-bound"
        if loader_s < OVERLAP_MIN * both
        else "data-bound"
        if compute_s < OVERLAP_MIN * both
        else "no-overlap"
    )
