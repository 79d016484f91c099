"""SQL pieces of Explore's summary that keep it honest: the exact interval of the median, and the
count of distinct configs a point pools (with the fields that differ).

Interval: the binomial order-statistic interval [x_(k), x_(n-k+1)] of the median, the same method as
engine.analysis.stats (`median_ci_ranks`), needing n >= 6 at 95 %; below that a group has no interval.
The ranks are computed here in Python for the group sizes present and joined into the query.

Pooling: two runs are the same config when every RunConfig field that shapes the timing is equal,
and so is `code_hash` (the user's plugin code); tag, seed and the measurement knobs below do not count.
"""

from __future__ import annotations

import functools
import math

from engine.analysis.stats import median_ci_ranks
from engine.config import config_fields

__all__ = ["NOT_CONFIG", "ci_ranks", "config_columns", "pool_sql"]

# NOTE: fields that label a run or tune the measurement, not the config whose time is measured
NOT_CONFIG = ("tag", "seed", "bound", "sample_hz", "worker_timeout_s", "trace")  # trace: an extra, unstored epoch
_EXACT_INTS_UP_TO = 400  # the two computations agree (tests/app/test_explore.py); this one is O(n^2) in bits


@functools.lru_cache(maxsize=4096)
def _exact_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    alpha, cdf, k = (1 - confidence) / 2, 0.0, 0
    log_half_n = n * math.log(0.5)
    while k <= n:  # largest k with P(Bin(n, 1/2) <= k - 1) <= alpha
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half_n)
        if cdf > alpha:
            break
        k += 1
    return (k, n - k + 1) if k >= 1 else None


def ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks (lo, hi) of the exact interval of the median of n values, or None (n too small).

    engine.analysis.stats.median_ci_ranks for small groups; the same ranks in floating point (log-gamma terms)
    for big ones, where its exact integer arithmetic takes about a second per size (n = 3000)."""
    n = int(n)
    if n > _EXACT_INTS_UP_TO:
        return _exact_ranks(n, confidence)
    return median_ci_ranks(n, confidence)  # one method everywhere


def config_columns(skip: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The runs columns that identify a config (RunConfig fields minus NOT_CONFIG and `skip`)."""
    return [f.name for f in config_fields() if f.name not in NOT_CONFIG and f.name not in skip]


def pool_sql(groups: list[str]) -> tuple[str, str]:
    """(aggregates for the grouped CTE, columns for the outer SELECT): `n_configs`, the number of distinct
    configs in the group, and `differs`, the comma-separated fields whose values vary within it."""
    # NOTE: code_hash is not a RunConfig field but separates configs too: a user's changed plugin code
    cols = config_columns(groups) + ([] if "code_hash" in groups else ["code_hash"])
    # NOTE: min/max and one hash per row, not a count(DISTINCT) per field: one distinct count per field costs a
    # hash table each, and a store of many runs has dozens of fields
    inner = [f"count(DISTINCT hash({', '.join(f'{chr(34)}{c}{chr(34)}' for c in cols)})) AS n_configs"]
    inner += [f'(min("{c}") <> max("{c}") OR count("{c}") NOT IN (0, count(*))) AS "_d_{c}"' for c in cols]
    differs = ", ".join(f"CASE WHEN \"_d_{c}\" THEN '{c}' END" for c in cols)
    return ",\n                   ".join(inner), f"n_configs, concat_ws(', ', {differs}) AS differs"
