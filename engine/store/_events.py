"""RunLog events -> Arrow tables and run-level summary figures, for ingest. Pure functions, no DuckDB.

Values are coerced column by column (a malformed value becomes NULL rather than failing the whole
run), epochs are deduplicated on (model_idx, rank, epoch) and steps on their step number, last one wins.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from engine.measure import epoch_walls, median_epoch_s, samples_per_s, span_s, wait_percentiles
from engine.runlog import EPOCH_FIELDS, STEP_FIELDS
from engine.store.tables import column_types

__all__ = [
    "calibrations_table",
    "coerce",
    "epochs_table",
    "gpu_idle_summary",
    "samples_table",
    "steps_table",
    "summarize",
    "unique_epochs",
]

_KEYS = ("model_idx", "rank", "epoch")
SAMPLE_FIELDS = ("t", "cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes")


def _float(v: Any) -> float | None:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _int(v: Any) -> int | None:
    f = _float(v)
    return int(f) if f is not None and abs(f) < 2**63 else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else (bool(v) if isinstance(v, (int, float)) else None)


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


_CONVERT: dict[str, tuple[Callable[[Any], Any], pa.DataType]] = {
    "DOUBLE": (_float, pa.float64()),
    "BIGINT": (_int, pa.int64()),
    "INTEGER": (_int, pa.int32()),
    "BOOLEAN": (_bool, pa.bool_()),
    "VARCHAR": (_str, pa.string()),
}


def coerce(value: Any, sql_type: str) -> Any:
    """A Python value fit for a column of this SQL type, or None."""
    return _CONVERT.get(sql_type.split()[0], (_str, None))[0](value)


def _dict_table(run_id: str, table: str, names: tuple[str, ...], rows: list[dict[str, Any]]) -> pa.Table:
    """Columns from dict rows (a missing key is NULL), coerced to the store's types."""
    return _columns_table(run_id, table, names, [[r.get(name) for r in rows] for name in names])


def _row_table(run_id: str, table: str, names: tuple[str, ...], rows: list[list[Any]]) -> pa.Table:
    """Columns from rows in `names` order (a short row padded with NULL, a long one cut), coerced to the store's
    types."""
    if rows and len({len(r) for r in rows}) == 1 and len(rows[0]) >= len(names):
        raw = [list(col) for col in zip(*rows)][: len(names)]  # NOTE: transposed in C; steps are most rows
    else:
        raw = [[r[i] if i < len(r) else None for r in rows] for i in range(len(names))]
    return _columns_table(run_id, table, names, raw)


def _columns_table(run_id: str, table: str, names: tuple[str, ...], raw: list[list]) -> pa.Table:
    types = column_types(table)  # the store's DDL says each column's type
    cols: dict[str, pa.Array] = {"run_id": pa.array([run_id] * len(raw[0]) if raw else [], pa.string())}
    for name, values in zip(names, raw):
        cols[name] = _column(values, *_CONVERT[types[name]])
    return pa.table(cols)


def _column(values: list, fn: Callable[[Any], Any], typ: pa.DataType) -> pa.Array:
    """Arrow converts well-formed values in C; only a column holding a malformed one is coerced value by value."""
    if typ != pa.string():
        try:
            arr = pa.array(values, typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            pass
        else:
            if pa.types.is_floating(typ) and arr.null_count < len(arr) and not pc.all(pc.is_finite(arr)).as_py():
                arr = pc.if_else(pc.is_finite(arr), arr, pa.scalar(None, typ))  # NaN and inf are NULL, as _float
            return arr
    return pa.array([fn(v) for v in values], typ)


def unique_epochs(events: list[dict]) -> list[dict]:
    """Epoch events, one per (model_idx, rank, epoch), with 0 for a missing model_idx or rank."""
    out: dict[tuple, dict] = {}
    for e in events:
        if e.get("type") == "epoch" and _int(e.get("epoch")) is not None:
            e = {
                **e,
                "model_idx": _int(e.get("model_idx")) or 0,
                "rank": _int(e.get("rank")) or 0,
                "epoch": _int(e.get("epoch")),
                "warmup": bool(e.get("warmup", False)),
            }
            out[tuple(e[k] for k in _KEYS)] = e
    return [out[k] for k in sorted(out)]


def epochs_table(run_id: str, epochs: list[dict]) -> pa.Table:
    return _dict_table(run_id, "epochs", EPOCH_FIELDS, epochs)


def steps_table(run_id: str, epochs: list[dict]) -> pa.Table:
    """One row per (model_idx, rank, epoch, step). Built column by column: a long run has a million steps."""
    names = _KEYS + STEP_FIELDS
    cols: list[list] = [[] for _ in names]
    for e in epochs:
        steps = _unique_steps(e.get("steps") or [])
        for i, k in enumerate(_KEYS):
            cols[i].extend([e[k]] * len(steps))
        if steps and all(len(s) == len(STEP_FIELDS) for s in steps):
            for col, values in zip(cols[len(_KEYS) :], zip(*steps)):
                col.extend(values)
        else:  # short or long rows: pad or cut to the step fields
            for j, col in enumerate(cols[len(_KEYS) :]):
                col.extend(s[j] if j < len(s) else None for s in steps)
    return _columns_table(run_id, "steps", names, cols)


def _unique_steps(steps: list) -> list:
    """Steps in step order, one per step number (the last wins); malformed ones dropped."""
    try:  # NOTE: the common case, checked in two passes over plain ints: already unique and in order
        nums = [s[0] for s in steps]
        if all(type(n) is int for n in nums) and all(a < b for a, b in zip(nums, nums[1:])):
            return steps if all(isinstance(s, (list, tuple)) for s in steps) else _slow_steps(steps)
    except (TypeError, IndexError, KeyError):
        pass
    return _slow_steps(steps)


def _slow_steps(steps: list) -> list:
    out: dict[int, Any] = {}
    for s in steps:
        if isinstance(s, (list, tuple)) and s and (n := _int(s[0])) is not None:
            out[n] = s
    return [out[n] for n in sorted(out)]


def samples_table(run_id: str, events: list[dict]) -> pa.Table:
    rows = [r for e in events if e.get("type") == "samples" for r in e.get("rows") or [] if isinstance(r, list)]
    return _row_table(run_id, "samples", SAMPLE_FIELDS, rows)


def calibrations_table(run_id: str, events: list[dict]) -> pa.Table:
    cals = [e for e in events if e.get("type") == "calibration"]
    return _dict_table(run_id, "calibrations", ("kind", "seconds", "ttfb_s", "cached"), cals)


def summarize(epochs: list[dict], samples: pa.Table, waits: list[float] | None = None) -> dict[str, Any]:
    """Run-level figures over steady-state (non-warm-up) epochs.

    epoch_s: engine.measure.median_epoch_s of the steady epochs, the definition the bound divides by; the run's own
    summary, where it has one, gives the figure stored (engine/store/_runrow.py), so this one stands for a run cut
    short. samples_per_s: all samples / the span from the first start to the last end.
    Shares: each part of the summed data_wait + h2d + compute. n_epochs counts finished epochs, warm-up included.
    `waits`: the steady steps' sorted data waits, when the caller already has them (an incremental ingest reads
    them from the store in SQL instead of a million steps into Python); else they come from the epochs' `steps`.
    """
    out: dict[str, Any] = {"n_epochs": len({e["epoch"] for e in epochs})}
    steady = [e for e in epochs if not e["warmup"]]
    epoch_s = median_epoch_s(steady)
    if epoch_s is not None:
        out["epoch_s"] = epoch_s
        # one definition with Recorder.finish (engine/measure/throughput.py): one span, first start to last end
        times = [{k: _float(e.get(k)) for k in ("samples", "t_start", "t_end")} for e in steady]
        span = span_s(times)
        out["samples_per_s"] = samples_per_s(times, sum(epoch_walls(steady)) if span is None else span)
    ttfbs = [t for t in (_float(e.get("ttfb_s")) for e in steady) if t is not None]
    out["ttfb_s"] = statistics.median(ttfbs) if ttfbs else None
    # NOTE: shares are of the epochs' wall time, so what no timer explains shows up as `other`
    # (loop overhead, optimizer bookkeeping, a loader's end-of-epoch teardown) instead of vanishing.
    parts = {k: sum(_float(e.get(k)) or 0.0 for e in steady) for k in ("data_wait_s", "h2d_s", "compute_s")}
    whole = sum(_float(e.get("wall_s")) or 0.0 for e in steady)
    for k, v in parts.items():
        out[k.removesuffix("_s") + "_share"] = v / whole if whole > 0 else None
    out["other_share"] = max(0.0, 1.0 - sum(parts.values()) / whole) if whole > 0 else None
    # one definition with engine.analysis.stats (engine/measure/waits.py): each epoch's first step is its TTFB, left out
    if waits is None:
        waits = _finite_sorted(
            [
                s[1]
                for e in steady
                for s in e.get("steps") or []
                if isinstance(s, (list, tuple)) and len(s) > 1 and s[0] != 0
            ]
        )
    out.update(wait_percentiles(waits))
    out.update(gpu_idle_summary(steady))
    rss = samples.column("rss_bytes").drop_null().to_pylist()
    cpu = samples.column("cpu_percent").drop_null().to_pylist()
    out["peak_rss_bytes"] = max(rss) if rss else None
    out["mean_cpu_pct"] = statistics.fmean(cpu) if cpu else None
    util = samples.column("gpu_util").drop_null().to_pylist()
    mem = samples.column("gpu_mem_bytes").drop_null().to_pylist()
    out["mean_gpu_util"] = statistics.fmean(util) if util else None  # NVML's, % of the sample period
    out["peak_gpu_mem_bytes"] = max(mem) if mem else None  # NVML's device memory in use, all processes
    return out


def gpu_idle_summary(steady: list[dict]) -> dict[str, float | None]:
    """The run's GPU idle over the steady epochs that measured it: gpu_idle_s and copy_wait_s per epoch (mean),
    and the shares of those epochs' wall time idle for each cause, which add up to gpu_idle_share.

    NOTE: NULL, never 0, when no epoch measured it (a CPU run, a run stored before schema v4): not measured
    is not "the GPU never waited"."""
    measured = [e for e in steady if _float(e.get("gpu_idle_s")) is not None]
    whole = sum(_float(e.get("wall_s")) or 0.0 for e in measured)
    out: dict[str, float | None] = {}
    for key in ("gpu_idle", "gpu_idle_data", "gpu_idle_copy", "gpu_idle_other"):
        values = [v for v in (_float(e.get(f"{key}_s")) for e in measured) if v is not None]
        out[f"{key}_share"] = sum(values) / whole if whole > 0 and len(values) == len(measured) else None
    idle = [v for v in (_float(e.get("gpu_idle_s")) for e in measured) if v is not None]
    out["gpu_idle_s"] = statistics.fmean(idle) if idle else None
    copies = [c for c in (_float(e.get("copy_wait_s")) for e in measured) if c is not None]
    out["copy_wait_s"] = statistics.fmean(copies) if copies else None
    return out


def _finite_sorted(values: list) -> list[float]:
    """The values as floats, malformed and non-finite ones dropped (as _float does), sorted; in C for a
    million steps."""
    arr = _column(values, *_CONVERT["DOUBLE"]).drop_null()
    return arr.sort().to_pylist()
