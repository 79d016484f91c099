"""RunLog: the append-only record a run writes instead of touching DuckDB.

Layout: `<runs_root>/<run_id>/events.jsonl` plus a `heartbeat` file whose mtime the run refreshes, and a
`store` file naming the one store this RunLog belongs to (its resolved path, written before the run starts):
only that store ingests it, so runs of two stores in one folder never land in each other (claim, owner).
`launcher.lock` is locked by the process that launched the run until it has tried to store it (launching): until
then a finished RunLog is not waiting for anyone else. Each line is one JSON event, written whole and flushed +
fsynced, so a kill loses at most the epoch in flight; a torn last line (a death mid-write) is ignored by the reader.

Events (every event has "type" and "t", a unix timestamp):
  start        run_id, config (RunConfig dict), host (fingerprint dict), pid
  epoch        model_idx, rank, epoch, warmup, wall_s, samples, samples_per_s, ttfb_s,
               data_wait_s, h2d_s, compute_s, n_steps, t_start, t_end, loss, allreduce_s (ddp),
               gpu_idle_s, gpu_idle_data_s, gpu_idle_copy_s, gpu_idle_other_s, copy_wait_s (GPU clock; null on CPU),
               steps: [[step, data_wait_s, h2d_s, compute_s, total_s], ...]
  startup      startup_s, startup_imports_s, startup_cuda_s, startup_build_s, startup_first_batch_s: where the
               time from launch() to the first batch went (engine/measure/startup.py); written with the first epoch
  calibration  kind ("loader" | "compute"), seconds, ttfb_s, cached (bool)
  prediction   predicted_epoch_s, predicted_from ("prior": before the first epoch, from a probe already cached;
               "own": after the calibration, from the run's own probe), predicted_limit, predicted_terms,
               probe_age_s (engine/predict/forecast.py)
  samples      rows: [[t, cpu_percent, rss_bytes, gpu_util, gpu_mem_bytes], ...]   (batched)
  summary      free-form dict of run-level figures (bound_s, efficiency, verdict, peak_rss, calibration_s, ...)
  end          status ("done" | "failed" | "cancelled" | "killed": engine.status.RunStatus), error (str | None: one
               line), traceback (a failed run's full traceback, when the run itself caught the error)
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from engine.errors import disk_full
from engine.status import RunStatus

__all__ = [
    "EPOCH_FIELDS",
    "GPU_EPOCH_FIELDS",
    "LAUNCHER_LOCK",
    "STEP_FIELDS",
    "STORE_FILE",
    "RunLog",
    "claim",
    "dead_end",
    "end_dead_run",
    "end_traceback",
    "first_event",
    "heartbeat_age",
    "held_by_launcher",
    "iter_events",
    "launching",
    "owner",
    "read_events",
    "read_span",
    "tail_events",
]

STEP_FIELDS = ("step", "data_wait_s", "h2d_s", "compute_s", "total_s")
# what the compute stream lost per epoch, and why (engine/measure/timers.py, idle.py): None where not measured
GPU_EPOCH_FIELDS = ("gpu_idle_s", "gpu_idle_data_s", "gpu_idle_copy_s", "gpu_idle_other_s", "copy_wait_s")
EPOCH_FIELDS = (
    "model_idx",
    "rank",
    "epoch",
    "warmup",
    "wall_s",
    "samples",
    "samples_per_s",
    "ttfb_s",
    "data_wait_s",
    "h2d_s",
    "compute_s",
    "n_steps",
    "t_start",
    "t_end",
    "loss",
    "allreduce_s",
    *GPU_EPOCH_FIELDS,
)
log = logging.getLogger(__name__)

STORE_FILE = "store"  # <run_dir>/store: the resolved path of the store the RunLog belongs to
LAUNCHER_LOCK = "launcher.lock"  # <run_dir>/launcher.lock: flocked by the launcher until it has tried to store the run


def claim(run_dir: str | Path, store: str | Path) -> None:
    """Name the store this RunLog belongs to (atomically: a reader sees no name or the whole one)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{STORE_FILE}.{os.getpid()}"
    tmp.write_text(str(store), encoding="utf-8")
    os.replace(tmp, run_dir / STORE_FILE)


@contextmanager
def launching(run_dir: str | Path) -> Iterator[None]:
    """Hold the run's launcher lock for the block: the launcher stores the run itself, so it is not waiting.

    NOTE: flock, released by the kernel when this process dies, so a dead launcher never leaves a run looking
    taken care of; the descriptor is not inherited by the run child (Python opens it non-inheritable).
    """
    fd = os.open(Path(run_dir) / LAUNCHER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def held_by_launcher(run_dir: str | Path) -> bool:
    """Whether a live launcher still holds the run (it will store it, or say that it waits): never blocks."""
    try:
        fd = os.open(Path(run_dir) / LAUNCHER_LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def owner(run_dir: str | Path) -> str | None:
    """The store a RunLog names; None for one written before RunLogs named their store, "" when the name cannot
    be read (such a RunLog belongs to no store until it can)."""
    try:
        return (Path(run_dir) / STORE_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""


class RunLog:
    """Writer. Thread-safe: dual-thread modes and the sampler thread write through one instance."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "events.jsonl"
        self._lock = threading.Lock()
        # NOTE: unbuffered: each event is one write() of a whole line, so a write that fails (a full disk) leaves
        # no half-line in a buffer to be flushed later, at close or glued to the next event
        self._fh = open(self.path, "ab", buffering=0)
        if self._fh.tell() and _torn(self.path):
            # NOTE: a writer died mid-line (the parent writes the `end` after a killed child): start a fresh
            # line, else the next event would be glued to the torn one and lost with it
            self._append(b"\n")

    def write(self, type_: str, **payload: Any) -> None:
        line = json.dumps({"type": type_, "t": time.time(), **payload}, separators=(",", ":"), default=_default)
        with self._lock:
            self._append(line.encode() + b"\n")
        self.beat()

    def _append(self, data: bytes) -> None:
        """Write and fsync; an OSError names this log's file (a full disk then says where it is full)."""
        try:
            while data:
                data = data[self._fh.write(data) :]
            os.fsync(self._fh.fileno())
        except OSError as e:
            if e.filename is not None:
                raise
            raise OSError(e.errno, e.strerror, str(self.path)) from None

    def beat(self) -> None:
        (self.dir / "heartbeat").touch()

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dead_end(cause: str, *, killed: bool) -> tuple[RunStatus, str]:
    """(status, error) of a run whose process is gone without writing its own `end`: the one rule that the runner,
    the store (a stale heartbeat) and the job worker's recovery follow. `killed` when something killed it (a signal,
    silence, its worker's death), `failed` when it exited on its own before finishing; its finished epochs are kept
    either way, and the error says so."""
    return (RunStatus.KILLED if killed else RunStatus.FAILED), f"{cause}; finished epochs kept"


def end_dead_run(
    run_dir: str | Path, status: str, error: str | None, events: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Append the `end` a run could not write itself, and its `start` if it died before that, from the files its
    launcher wrote (config.json, meta.json), so it is stored as killed or failed with the reason, not lost.

    `events`: the log's events when the caller has read them already. Returns the events the RunLog could not take
    (its disk is full): the caller hands those to the store directly.
    """
    run_dir = Path(run_dir)
    seen: Iterable[dict[str, Any]] = iter_events(run_dir) if events is None else events
    missing: list[dict[str, Any]] = [{"type": "end", "t": time.time(), "status": status, "error": error}]
    if not any(e.get("type") == "start" for e in seen):
        # NOTE: it died before its start event (killed while importing, or a crash at start-up)
        meta = json.loads((run_dir / "meta.json").read_text())
        missing.insert(
            0,
            {
                "type": "start",
                "t": time.time(),
                "run_id": run_dir.name,
                "config": json.loads((run_dir / "config.json").read_text()),
                "host": {},
                "pid": None,
                **{k: v for k, v in meta.items() if k != "run_id"},
            },
        )
    try:
        with RunLog(run_dir) as runlog:
            for event in missing:
                runlog.write(event["type"], **{k: v for k, v in event.items() if k not in ("type", "t")})
    except OSError as e:
        if disk_full(e) is None:
            raise
        log.warning(
            "run %s: its RunLog cannot take its end (%s); the store gets it directly", run_dir.name, disk_full(e)
        )
        return missing
    return []


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    return list(iter_events(run_dir))


def iter_events(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    path = Path(run_dir) / "events.jsonl"
    if not path.is_file():  # NOTE: not exists(): a device (/dev/full, /dev/zero) would be read without end
        return
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.endswith("\n"):
                return  # torn final line: the writer died mid-write
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def heartbeat_age(run_dir: str | Path) -> float | None:
    """Seconds since the run last wrote or beat; None if it never started."""
    for name in ("heartbeat", "events.jsonl"):
        p = Path(run_dir) / name
        if p.exists():
            return max(0.0, time.time() - p.stat().st_mtime)
    return None


def _torn(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def read_span(path: str | Path, start: int, stop: int) -> tuple[list[dict[str, Any]], int]:
    """Events on the whole lines within bytes [start, stop), and the offset just past the last of them.

    Ingest reads from the offset the store holds up to the size it saw, so a line being written now
    (no newline yet) is left for the next ingest rather than half-read.
    """
    with open(path, "rb") as fh:
        fh.seek(start)
        chunk = fh.read(max(0, stop - start))
    end = chunk.rfind(b"\n") + 1
    events = []
    for line in chunk[:end].splitlines():
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(event, dict):
            events.append(event)
    return events, start + end


def first_event(path: str | Path) -> dict[str, Any] | None:
    """The first whole event of a log (the `start` event), read without reading the rest."""
    try:
        with open(path, "rb") as fh:
            line = fh.readline()
    except OSError:
        return None
    try:
        event = json.loads(line) if line.endswith(b"\n") else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return event if isinstance(event, dict) else None


def end_traceback(run_dir: str | os.PathLike, tail_bytes: int = 256 * 1024) -> str | None:
    """The traceback of a failed run, from its `end` event (the log's last lines, read without reading the rest);
    None when there is none, or no RunLog (a run imported from another machine)."""
    path = Path(run_dir) / "events.jsonl"
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - tail_bytes))
            lines = fh.read(tail_bytes).splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(event, dict) and event.get("type") == "end":
            return event.get("traceback") or None
    return None


def tail_events(run_dir: str | Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Whole events written since byte `offset`, and the offset to resume from (for live progress)."""
    path = Path(run_dir) / "events.jsonl"
    if not path.is_file():
        return [], offset
    with open(path, "rb") as fh:
        fh.seek(offset)
        chunk = fh.read()
    end = chunk.rfind(b"\n") + 1
    events = []
    for line in chunk[:end].splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events, offset + end
