"""The `runs` row of one RunLog: status, host, config columns and summary figures. Pure, no DuckDB."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from engine.analysis.kept import kept_epochs_limit
from engine.runlog import dead_end
from engine.status import ENDED, RunStatus
from engine.store import _events as ev
from engine.store.schema import SUMMARY_COLUMNS, config_columns

__all__ = ["run_row", "utc"]

_STATUSES = (*ENDED, RunStatus.RUNNING)  # what an `end` event may say; anything else is stored as failed


def utc(t: Any) -> datetime | None:
    """A unix time as a naive UTC datetime (the store's TIMESTAMP columns are UTC)."""
    f = ev.coerce(t, "DOUBLE")
    return None if f is None else datetime.fromtimestamp(f, tz=timezone.utc).replace(tzinfo=None)


def _pick(d: dict, *keys: str) -> Any:
    return next((d[k] for k in keys if d.get(k) not in (None, "")), None)


def _host_columns(start: dict) -> dict[str, Any]:
    host = start.get("host")
    host = host if isinstance(host, dict) else {"hostname": host} if host else {}
    both = {**host, **{k: v for k, v in start.items() if k not in ("config", "host")}}
    gpus = host.get("gpus")
    gpu = _pick(host, "gpu_name", "gpu") or (", ".join(map(str, gpus)) if isinstance(gpus, list) and gpus else None)
    cols = {
        "host": _pick(host, "hostname", "host", "node"),
        "cpu_model": _pick(host, "cpu_model", "cpu"),
        "cores": ev.coerce(_pick(host, "cores", "cpu_count", "n_cores", "logical_cores"), "INTEGER"),
        "gpu_name": gpu,
        "torch_version": _pick(both, "torch_version", "torch"),
        "python_version": _pick(both, "python_version", "python"),
        "git_commit": _pick(both, "git_commit", "git"),
    }
    cols = {k: (v if k == "cores" or v is None else str(v)) for k, v in cols.items()}
    identity = json.dumps([cols["host"], cols["cpu_model"], cols["cores"], cols["gpu_name"]])
    cols["host_fingerprint"] = str(
        _pick(host, "fingerprint", "host_fingerprint") or hashlib.sha1(identity.encode()).hexdigest()[:12]
    )
    cols["host_json"] = json.dumps(host, sort_keys=True, default=str)
    return cols


def _config_columns(cfg: dict) -> dict[str, Any]:
    out = {}
    for name, sql_type in config_columns().items():
        value = cfg.get(name)
        if isinstance(value, (list, tuple, dict)):
            out[name] = json.dumps(value)
        else:
            out[name] = ev.coerce(value, sql_type)
    return out


def run_row(
    run_id: str,
    run_dir: Path,
    events: list[dict],
    start: dict,
    epochs: list[dict],
    samples: pa.Table,
    *,
    job_id: str | None,
    sweep_meta: dict[str, Any] | None,
    heartbeat_age: float | None,
    stale_after_s: float | None,
    waits: list[float] | None = None,
) -> dict[str, Any]:
    end = next((e for e in reversed(events) if e.get("type") == "end"), None)
    if end is not None:
        status = end.get("status") if end.get("status") in _STATUSES else RunStatus.FAILED
        error, ended_at = end.get("error"), utc(end.get("t"))
    elif stale_after_s is not None and heartbeat_age is not None and heartbeat_age > stale_after_s:
        status, error = dead_end(f"no heartbeat for {heartbeat_age:.0f}s: the run process died", killed=True)
        ended_at = utc(max(ev.coerce(e.get("t"), "DOUBLE") or 0.0 for e in events))
    else:
        status, error, ended_at = RunStatus.RUNNING, None, None
    given = start.get("config")
    cfg: dict[str, Any] = given if isinstance(given, dict) else {}
    meta = {k: start.get(k) for k in ("sweep_id", "config_idx", "repeat_idx", "job_id")}
    meta.update({k: v for k, v in (sweep_meta or {}).items() if k in meta})
    if job_id is not None:
        meta["job_id"] = job_id
    summary_event: dict[str, Any] = {}
    for e in events:
        # startup, prediction: their fields are run columns too (engine/runlog.py)
        if e.get("type") in ("summary", "startup", "prediction"):
            summary_event.update({k: v for k, v in e.items() if k != "type"})
    # the run's own figures (epoch_s, bound_s, efficiency, verdict: engine/calibrate/bound.py) win over what the store
    # reads from the epochs, which stand only for a run cut short before its summary (the same functions)
    summary = ev.summarize(epochs, samples, waits)
    summary.update({k: ev.coerce(v, SUMMARY_COLUMNS[k]) for k, v in summary_event.items() if k in SUMMARY_COLUMNS})
    if status in (RunStatus.CANCELLED, RunStatus.KILLED) and not summary.get("verdict") and epochs:
        # NOTE: a run stopped before its bound's passes has no verdict from them; what its kept epochs' time split
        # says is stored as its verdict, so the store, the CLI and the run page read one answer
        summary["verdict"], summary["verdict_help"] = kept_epochs_limit(summary)
    return {
        "run_id": run_id,
        "status": status,
        "error": None if error is None else str(error),
        "created_at": utc(start.get("t")),
        "started_at": utc(start.get("t")),
        "ended_at": ended_at,
        "sweep_id": ev.coerce(meta["sweep_id"], "VARCHAR"),
        "config_idx": ev.coerce(meta["config_idx"], "INTEGER"),
        "repeat_idx": ev.coerce(meta["repeat_idx"], "INTEGER"),
        "job_id": ev.coerce(meta["job_id"], "VARCHAR"),
        **_host_columns(start),
        "config_json": json.dumps(cfg, sort_keys=True, default=str),
        "tags": str(cfg.get("tag")) if cfg.get("tag") else None,
        "summary_json": json.dumps(summary_event, sort_keys=True, default=str) if summary_event else None,
        "run_dir": str(run_dir.resolve()),
        "code_hash": ev.coerce(start.get("code_hash"), "VARCHAR"),
        **_config_columns(cfg),
        **{k: summary.get(k) for k in SUMMARY_COLUMNS},
    }
