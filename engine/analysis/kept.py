"""What limits a run cut short, from its kept epochs alone: a cancelled or killed run (its bound's passes run after
its epochs, so stopping skips them) still shows where its steady-state time went. The store keeps the answer as the
run's verdict, the same word the bound's verdict uses (engine/calibrate/bound.py).

The limit rests on the time split alone, so it is named only where the split decides it: a loop that waited for
data most of the time is data-bound; one that barely waited and computed most of the time is compute-bound.
Anything between needs the bound (shared cores, overlap, overhead) and gets none, said in words.

    name, why = kept_epochs_limit({"data_wait_share": 0.94, "compute_share": 0.05})   # "data-bound", "..."
"""

from __future__ import annotations

from typing import Any

from engine.measure import VERDICTS

__all__ = ["DATA_BOUND_WAIT", "kept_epochs_limit"]

DATA_BOUND_WAIT = 0.5  # waiting for data over half the steady time: the loader is the limit, whatever the bound
_COMPUTE_BOUND = (0.1, 0.5)  # data wait under 10 % while compute takes over half: the model is the limit


def _share(run: dict[str, Any], key: str) -> float | None:
    value = run.get(key)
    return float(value) if isinstance(value, (int, float)) and value == value else None


def kept_epochs_limit(run: dict[str, Any]) -> tuple[str | None, str]:
    """(the limit or None, the sentence that says what it rests on) from a run's data_wait_share and compute_share."""
    wait, compute = _share(run, "data_wait_share"), _share(run, "compute_share")
    if wait is None:
        return None, "no steady-state epoch was kept, so there is no time split to judge"
    said = f"{wait:.0%} of the kept steady-state time waiting for data"
    if wait >= DATA_BOUND_WAIT:
        return "data-bound", f"{VERDICTS['data-bound']} ({said}; from the kept epochs, without a lower bound)"
    if compute is not None and wait < _COMPUTE_BOUND[0] and compute >= _COMPUTE_BOUND[1]:
        return "compute-bound", (
            f"{VERDICTS['compute-bound']} ({said}, {compute:.0%} computing; from the kept "
            "epochs, without a lower bound)"
        )
    return None, f"{said}: between the clear cases, only the lower bound (not measured) could say what limits it"
