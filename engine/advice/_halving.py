"""The one search of both tunes: `python -m engine tune` (the lab's runs, engine/advice/tune.py) and
`python -m engine tune -- python train.py` (a script's trials, engine/advice/tune_script.py).

    plan = Plan(measure=..., fits=..., limit_s=..., figure="epoch_s", length=2, rng=rng, rows=result.rows)
    found = halve(first_rung(ranked, told_apart, TOP_K, siblings), plan)
    best = pick(plan.rows, "epoch_s", max_memory)
    stop = confirm(best, plan, CONFIRM_REPEATS, budget_s, into=confirm_rows)

The caller measures a candidate and estimates how long a run takes; this module decides what runs, in which order,
and when the search stops:
1. The first rung: the predicted fastest `top_k` settings the prediction tells apart, fastest first, each with the
   variants in the knobs the prediction does not read beside it (the caller's `siblings`). Its first run always goes
   (with nothing finished there is nothing to report); one that would end past the rung's limit is passed over for
   the next, which may be shorter, and the search stops after the rung ("budget spent").
2. Successive halving: the best 1/eta of a rung's finished runs (lower figure first) run again at eta x the length,
   in a shuffled order, while the whole rung fits in its limit: a rung cut short decides nothing, so its rows are
   marked `rung_cut` and `pick` reads the last whole rung.
3. Interleaved confirmation: candidate 0 (the user's own setting, or sync) and the best, `repeats` runs each at the
   first rung's length, each pair in a random order, while the budget lasts: those runs are the samples of the
   speedup's interval (stats.compare).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from engine.advice import memory

__all__ = [
    "CONFIRM_REPEATS",
    "ETA",
    "SEARCH_SHARE",
    "TIE_MARGIN",
    "TOP_K",
    "Plan",
    "confirm",
    "first_rung",
    "halve",
    "pick",
]

ETA = 3  # keep the best 1/ETA of each rung; survivors run ETA x more epochs
SEARCH_SHARE = 0.6  # of the budget for the halving; the rest confirms the best against candidate 0
CONFIRM_REPEATS = 7  # interleaved runs each of the best and candidate 0: 6 + 7 is the least for a 95% ratio interval
TOP_K = 4  # predicted-fastest settings in the first rung, beside candidate 0
# NOTE: one run of each of two settings does not tell apart epochs this close: a rung's median steady epoch of the
# same setting moves by a few percent between runs on a shared machine, so settings the model predicts alike
# come out in any order. Within it the setting that holds less memory is the answer, not the one that won the
# noise: 8 processes (8 copies of the dataset) over one process of 16 threads buys nothing.
TIE_MARGIN = 0.05


@dataclass
class Plan:
    """What the search needs from its caller. Rungs are 0, 1, ...; a confirming run's rung is "confirm"."""

    measure: Callable[[int, Any, int], dict[str, Any]]  # (candidate, rung, length) -> its row (one real run)
    fits: Callable[[list[int], Any, int, float], bool]  # (candidates, rung, length, limit_s): they end by limit_s
    limit_s: Callable[[int], float]  # rung -> seconds from the start by which its runs must end
    figure: str  # the row's figure, lower is faster; NaN where the run failed
    length: int  # the first rung's length (epochs, batches)
    rng: random.Random
    rows: list[dict[str, Any]]  # the search's rows: the caller's list, which halve() appends to
    eta: int = ETA


def first_rung(
    ranked: list[int],
    told_apart: Callable[[int], Hashable],
    top_k: int,
    siblings: Callable[[int, list[int]], list[int]],
) -> list[int]:
    """The first `top_k` of `ranked` (predicted fastest first) that the prediction tells apart, each followed by
    its siblings (step 1 of the module doc)."""
    picks: list[int] = []
    seen: set[Hashable] = set()
    for idx in ranked:
        key = told_apart(idx)
        if len(picks) < top_k and key not in seen:
            picks.append(idx)
            seen.add(key)
    return list(dict.fromkeys(j for i in picks for j in (i, *siblings(i, picks))))


def halve(first: list[int], plan: Plan) -> tuple[str, int | None]:
    """Run the rungs (module doc) into plan.rows; (why the search stopped, the first rung's rank it reached: the
    number of its candidates the limit passed over, 0 when it ran them all)."""
    survivors, rung, length = list(first), 0, plan.length
    while survivors:
        if rung:
            plan.rng.shuffle(survivors)
            if not plan.fits(survivors, rung, length, plan.limit_s(rung)):
                return "search share of the budget spent", 0
        left_out = 0
        for n, idx in enumerate(survivors):
            if (rung or n) and not plan.fits([idx], rung, length, plan.limit_s(rung)):
                if rung:  # NOTE: a rung cut short decides nothing: pick() reads the last whole one
                    for r in plan.rows:
                        if r["rung"] == rung:
                            r["rung_cut"] = True
                    return "search share of the budget spent", 0
                left_out += 1
                continue
            plan.rows.append(plan.measure(idx, rung, length))
        if left_out:
            return "budget spent", left_out
        done = [r for r in plan.rows if r["rung"] == rung and not math.isnan(r[plan.figure])]
        if len(done) <= 1:
            return ("one candidate left" if done else "every run of the rung failed"), 0
        ranked = sorted(done, key=lambda r: r[plan.figure])
        survivors = [r["candidate"] for r in ranked[: max(1, math.ceil(len(ranked) / plan.eta))]]
        if len(survivors) == 1:
            return "one candidate left", 0
        rung, length = rung + 1, length * plan.eta
    return "nothing to run", 0


def pick(
    rows: list[dict[str, Any]],
    figure: str,
    max_memory: int | None,
    memory_of: Callable[[dict[str, Any]], float | None] | None = None,
) -> int | None:
    """The fastest candidate of the highest whole rung among the finished runs within the memory cap (over it: never
    the answer), or None. With `memory_of` (a row -> its bytes, None when unknown): of the candidates within
    TIE_MARGIN of the fastest's figure, the one that uses the least memory (the faster where they use the same); the
    fastest when its own memory is unknown."""
    done = [
        r
        for r in rows
        if isinstance(r["rung"], int) and not math.isnan(r[figure]) and memory.fits(r.get("peak_bytes"), max_memory)
    ]
    whole = [r for r in done if not r.get("rung_cut")] or done
    if not whole:
        return None
    top = max(r["rung"] for r in whole)
    fastest = min((r for r in whole if r["rung"] == top), key=lambda r: r[figure])
    if memory_of is None or memory_of(fastest) is None:
        return int(fastest["candidate"])
    tied = [
        (m, r[figure], r["candidate"])
        for r in whole
        if r["rung"] == top and r[figure] <= fastest[figure] * (1 + TIE_MARGIN) and (m := memory_of(r)) is not None
    ]
    return int(min(tied)[2])


def confirm(best: int, plan: Plan, repeats: int, budget_s: float, into: list[dict[str, Any]], against: str) -> str:
    """Candidate 0 and the best in pairs, each pair in a random order, at the first rung's length, while the budget
    lasts (module doc), into `into`; what cut it short ('' when nothing did). against: candidate 0's name."""
    before = len(into)
    for rep in range(repeats):
        for idx in plan.rng.sample([0, best], 2):
            if not plan.fits([idx], "confirm", plan.length, budget_s):
                return (
                    "budget spent while confirming"
                    if len(into) > before
                    else f"no time left to confirm against {against}"
                )
            into.append({**plan.measure(idx, "confirm", plan.length), "rung": "confirm", "repeat": rep})
    return ""
