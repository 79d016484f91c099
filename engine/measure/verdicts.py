"""The verdicts' vocabulary: what limits a run, and one line of what would help.

One list for the CLI summary, the run page, Explore and the advisor (engine/calibrate/bound.py decides which
applies). Pure: the dashboard and the advisor import it without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OVERLAP_MIN", "VERDICTS", "serial_kind", "verdict_help"]

OVERLAP_MIN = 0.1  # a share of the epoch below which there is next to nothing to overlap

# verdict -> what would help (verdict_help fills in the counts of `oversubscribed`)
VERDICTS = {
    "data-bound": "the loader pass explains the time: more workers, or a lighter transform",
    "compute-bound": "the model explains the time: the loader is good enough",
    "cpu-bound": "loader and model compete for the same cores: fewer or lighter workers, or a GPU",
    "oversubscribed": "more runnable threads than usable cores",
    "no-overlap": "the sync loader cannot overlap loading with compute by design: try prefetch or workers",
    "overhead-bound": "none of the above explains the time: per-step overhead (Python, queues, copies)",
}


def verdict_help(name: str | None, threads: dict[str, Any] | None = None) -> str | None:
    """One line of what would help; `oversubscribed` says the counts and the thread setting that fits."""
    if name != "oversubscribed" or not threads:
        return VERDICTS.get(name) if name else None
    intra, loader, cores = threads["intra_op"], threads["loader"], threads["cores"]
    fit = max(1, int(cores) - loader)
    todo = ([f"set threads to {fit} (cores - workers)"] if fit < intra else []) + \
        (["use fewer workers"] if loader >= cores else [])
    return (f"{intra} intra-op + {loader} loader thread(s) = {intra + loader} runnable on {cores:g} usable cores: "
            + (", or ".join(todo) or "fewer threads or workers"))


def serial_kind(loader_s: float, compute_s: float) -> str:
    """What limits a loop that cannot overlap (sync on a CPU): no-overlap, unless next to nothing is loaded (or
    computed); then what dominates, not advice to overlap."""
    both = loader_s + compute_s
    return ("compute-bound" if loader_s < OVERLAP_MIN * both else
            "data-bound" if compute_s < OVERLAP_MIN * both else "no-overlap")
