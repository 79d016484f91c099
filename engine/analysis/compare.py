"""lab.compare's table: one row per distinct config among some runs, with engine.analysis.stats' intervals.

Configs are told apart by the config fields that differ among the runs (or the caller's `by`), and
always by host fingerprint and plugin code hash: a speedup is only computed against a reference of
the same host and code, as everywhere else in LoaderLab.
"""

from __future__ import annotations

import pandas as pd

from engine.analysis import stats
from engine.config import config_fields
from engine.status import RunStatus

__all__ = ["compare_runs"]

_SEPARATE = ("host_fingerprint", "code_hash", "source")  # never pooled, never compared across (source: the
# user's own loop, observed, is not the lab's)
_IGNORED = {"tag"}  # a label, not a setting


def compare_runs(df: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Fastest first: fields, n, median, ci_lo, ci_hi, cv, noisy, speedup / speedup_lo / speedup_hi / difference
    over the slowest config (stats.compare: "B faster" means this config is faster), run_ids."""
    done = df[df["status"] == RunStatus.DONE] if "status" in df.columns else df
    done = done.dropna(subset=["epoch_s"]) if "epoch_s" in done.columns else done.iloc[0:0]
    if done.empty:
        raise ValueError("compare: none of these runs finished with an epoch time (status 'done')")
    fields = list(by) if by else _differing(done)
    unknown = [f for f in fields if f not in done.columns]
    if unknown:
        raise ValueError(f"compare: by: '{unknown[0]}' is not a column of the runs table")
    keys = fields + [c for c in _SEPARATE if c in done.columns and c not in fields]
    keyed = done.assign(**{k: done[k].astype(object).where(done[k].notna(), None) for k in keys})
    table = stats.summarize_configs(keyed, keys)
    groups = {_key(k): g for k, g in keyed.groupby(keys, dropna=False, sort=False)}
    ref_key = _key(tuple(table.iloc[-1][keys]))
    rows = []
    for _, row in table.iterrows():
        key = _key(tuple(row[keys]))
        mine = groups[key]
        comparable = all(_same(a, b) for a, b, k in zip(key, ref_key, keys) if k in _SEPARATE)
        c = stats.compare(groups[ref_key]["epoch_s"], mine["epoch_s"]) if comparable else {}
        rows.append(
            {
                "speedup": c.get("speedup"),
                "speedup_lo": c.get("speedup_lo"),
                "speedup_hi": c.get("speedup_hi"),
                "difference": c.get("difference", "other host or code: not compared"),
                "run_ids": sorted(mine["run_id"]) if "run_id" in mine.columns else [],
            }
        )
    return pd.concat([table, pd.DataFrame(rows)], axis=1)


def _differing(df: pd.DataFrame) -> list[str]:
    names = [f.name for f in config_fields() if f.name in df.columns and f.name not in _IGNORED]
    out = [n for n in names if df[n].astype(str).nunique() > 1]
    return out or [n for n in ("loader",) if n in df.columns]


def _key(values: tuple) -> tuple:
    return tuple(None if pd.isna(v) else v for v in values) if values else values


def _same(a: object, b: object) -> bool:
    return (a is None and b is None) or a == b
