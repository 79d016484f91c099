"""Counts and ranges as a person writes them: "1 run", "3 runs", "20 s", "20–40 s", never "1 runs" or "20–20 s".

    plural(1, "run")            # "1 run"
    plural(2, "worker")         # "2 workers"
    span(20, 20, " s")          # "20 s"   (a range whose ends are equal collapses)
    span(20, 40, " s")          # "20–40 s"

MISSING is what a table shows in an empty cell (st.dataframe's placeholder): a dash, never "None" or "nan".
"""

from __future__ import annotations

from typing import Any

__all__ = ["MISSING", "plural", "span"]

MISSING = "–"
_ES = ("s", "x", "sh", "tch")  # process -> processes, batch -> batches; epoch -> epochs


def plural(n: Any, noun: str, many: str | None = None) -> str:
    """`n noun` with the noun in the plural unless n is exactly 1 (`many` for an irregular plural)."""
    many = many or noun + ("es" if noun.endswith(_ES) else "s")
    return f"{n} {noun if n == 1 else many}"


def span(low: Any, high: Any, unit: str = "", fmt: str = "{}") -> str:
    """`low–high unit`, or one value when both ends read the same once formatted."""
    lo, hi = fmt.format(low), fmt.format(high)
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"
