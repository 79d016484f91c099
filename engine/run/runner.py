"""One run in its own subprocess, recorded in a RunLog, then ingested into the store.

Why a subprocess: a clean CUDA context, memory that can be measured, and a run that can be killed
(its process group holds the loader workers too). The child never opens DuckDB; the parent ingests.

    result = launch(cfg, db="data/loaderlab.duckdb")      # parent side: spawn, watch, ingest
    python -m engine.run.runner data/runs/<run_id>            # child side: what launch() spawns
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

from engine.config import RunConfig
from engine.errors import ConfigError, disk_full, user_error
from engine.paths import ROOT, Db, db_path, runs_dir
from engine.plugins import is_spec
from engine.run.hostfit import check_host
from engine.run.preflight import preflight
from engine.run.warm import run_env
from engine.runlog import RunLog, claim, dead_end, end_dead_run, iter_events, launching, tail_events
from engine.status import RunStatus

__all__ = ["EXIT_DISK_FULL", "REJECTED", "RunResult", "execute", "exit_child", "kill_group", "launch", "new_run_id"]

log = logging.getLogger(__name__)
_TRACEBACK_CHARS = 50_000  # the end of a failed run's traceback kept in its RunLog (the innermost error is last)
EXIT_DISK_FULL = 28  # (errno ENOSPC) the run failed and its RunLog had no room to say so: the exit status says it

REJECTED = "rejected.json"  # a config the child refused: {"field", "message"}; launch() raises it as a ConfigError


@dataclass
class RunResult:
    run_id: str
    status: str
    error: str | None
    run_dir: Path
    stored: bool = True  # False: another session held the store; the RunLog waits for the next ingest
    held_by: str | None = None  # who held it, e.g. "pid 1234 (python3)"
    warm: bool = False  # forked from a warm parent (engine.run.warm), not started cold


def new_run_id() -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


# ---------------------------------------------------------------------------- child side


def execute(run_dir: Path) -> int:
    """Run the config in run_dir/config.json, writing events. Returns the exit status: 0 done, 1 failed,
    EXIT_DISK_FULL when the disk is too full for the RunLog to take even the `end` event (the parent records it)."""
    try:
        return _execute(run_dir)
    except OSError as e:
        if disk_full(e) is None:
            raise
        log.error("run failed: %s", disk_full(e))
        return EXIT_DISK_FULL


def _execute(run_dir: Path) -> int:
    # NOTE: imported here: torch and the run side are imported only in the child; the launchers import this
    # module for launch() (CLI, dashboard's job worker, notebook) and must not load them
    from engine import calibrate, devices, loaders, modes, registry, workloads  # noqa: PLC0415
    from engine.measure import host, pools, sampler  # noqa: PLC0415
    from engine.predict import forecast  # noqa: PLC0415
    from engine.modes.ddp import torchrun_env  # noqa: PLC0415

    imported_at = time.time()  # the end of start-up's first phase (engine/measure/startup.py)
    meta = json.loads((run_dir / "meta.json").read_text())
    if meta.get("cwd"):
        # NOTE: the launcher's folder first, as `python -m` there puts it: a user's module named like a top-level
        # module of this checkout (app, ui, tests) is theirs, as in the preflight child. The engine is
        # imported by now, so its own modules cannot be shadowed.
        if meta["cwd"] in sys.path:
            sys.path.remove(meta["cwd"])
        sys.path.insert(0, meta["cwd"])
    try:  # the schema again, and the machine's checks (engine.registry.check, torch's to make): before any RunLog
        cfg = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
        registry.check(cfg)
        # memory again, now with the model's weights (the launcher may not have imported torch to count them);
        # oversubscription was the launcher's to refuse or insist on
        check_host(cfg, oversubscribe=True)
    except ConfigError as e:
        (run_dir / REJECTED).write_text(json.dumps({"field": e.field, "message": e.message}))
        return 2
    device = devices.resolve(cfg.device)
    default_threads = devices.threads()  # torch's own, before the run's: the probe measures at both
    devices.set_threads(cfg.threads)  # before fingerprint(): the thread settings that took effect are part of it
    spec = modes.MODES[cfg.mode]
    with RunLog(run_dir) as runlog:
        try:
            stream: dict[str, Any] = {}
            # a plugin's factory runs here first
            stored, items = _stored_config(cfg, device, workloads.build_dataset, stream)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded as the run's failure, as below
            runlog.write(
                "start",
                run_id=run_dir.name,
                config=cfg.effective(device=str(device)),
                host=host.fingerprint(),
                pid=os.getpid(),
                device=str(device),
                **meta,
            )
            return _failed(runlog, e)
        if cfg.mode == "ddp" and (joined := torchrun_env()) is not None:
            stored["world_size"] = joined[1]  # torchrun's WORLD_SIZE is what ran, whatever world_size said
        runlog.write(
            "start",
            run_id=run_dir.name,
            config=stored,
            host=host.fingerprint(),
            pid=os.getpid(),
            device=str(device),
            **meta,
        )
        ctx = modes.RunContext(cfg=cfg, log=runlog, device=device)
        ctx.summary.update(stream)
        calibrations = run_dir.parent.parent / "calibrations"  # beside the bound's (engine/calibrate/bound.py)
        # NOTE: written before the first epoch, so a prior prediction is honestly made before the run
        predicted = _predict(forecast.prior, cfg, device, calibrations) if forecast.covered(cfg) else None
        if predicted:
            runlog.write("prediction", **predicted)
        heart = _Heartbeat(runlog)
        gpu = device.index or 0 if device.type == "cuda" else None
        try:
            # NOTE: a mode that trains in its own processes leaves CUDA to them: a context here would only hold memory
            cuda_s = None if spec.own_processes else devices.init_cuda(device)
            ctx.startup = {"launched_at": meta.get("launched_at"), "imported_at": imported_at, "cuda_s": cuda_s}
            with heart, sampler.Sampler(runlog, cfg.sample_hz, gpu) as s:
                ctx.sampler = s
                spec.run(ctx)
            ctx.summary.update(s.summary())
            # no probe before the run: its own, after it, and before the verdict, which reads it as a prior run's
            # would (NOTE: the verdict needs the probe's pools: without it, a pool loaded in every worker and never
            # called, such as numpy's OpenBLAS, counts as runnable threads: a false hidden-threads)
            own = (
                _predict(forecast.own, cfg, device, calibrations, default_threads)
                if predicted is None and forecast.covered(cfg)
                else None
            )
            # NOTE: the probe, through forecast's own path: its GIL share of the load, and whether the pools it saw
            # loaded worked (idle ones add no runnable thread)
            found: Mapping[str, Any] | None = (
                (
                    forecast.predict.load_probe(
                        forecast.predict.probe_path(calibrations, cfg, host.fingerprint()["machine"], device.type)
                    )
                    or {}
                )
                if predicted or own
                else None
            )
            # the pools the loaders saw where items load (engine/measure/pools.py), and the plugin's lock
            record = pools.pools_record(
                {"training": pools.hidden_pools(), **loaders.seen_pools()}, cfg.loader, cfg.workers
            )
            ctx.summary.update(pools.idle_pools_add_none(record, found), **items)
            if found is not None:
                ctx.summary["probe_gil_share"] = found.get("gil_share")
            if cfg.bound:
                t = time.perf_counter()
                ctx.summary.update(_calibrate(calibrate.calibrate, ctx, run_dir, spec.bound))
                ctx.summary["calibration_s"] = time.perf_counter() - t
            if own:
                runlog.write("prediction", **own)
            runlog.write("summary", **ctx.summary)
            runlog.write("end", status=RunStatus.DONE, error=None)
            return 0
        except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure is recorded with its message, then reported
            return _failed(runlog, e)


def _failed(runlog: RunLog, e: BaseException) -> int:
    """Record the run as failed with the error on one line, whichever loader carried it (a worker's arrives wrapped
    in the worker's whole traceback), and the traceback itself in the RunLog, for the run page. A SystemExit from
    the user's code (a dataset, model, collate or loss calling sys.exit) is a failure too, never a run that
    silently vanished."""
    log.error("run failed", exc_info=e)
    if isinstance(e, SystemExit):
        error = (
            f"the run's code called sys.exit({e.code!r}) (a plugin's dataset, model, collate or loss?); a "
            "plugin must return or raise an exception, never exit the process"
        )
    else:
        error = user_error(e)
    runlog.write(
        "end",
        status=RunStatus.FAILED,
        error=error,
        traceback="".join(traceback.format_exception(e))[-_TRACEBACK_CHARS:],
    )
    return 1


def _stored_config(
    cfg: RunConfig, device: Any, build_dataset: Callable[[RunConfig], Any], stream: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What ran: fields the mode and loader ignore normalised, the device it resolved to; a folder's real image
    and class counts. For a plugin's dataset, whether its items load one at a time (engine/workloads/plugin.py):
    items_serialised, items_note. A stream's split and what it means for the batches go into `stream` (the run's
    summary)."""
    out, items = cfg.effective(device=str(device)), {}
    if cfg.workload == "folder" or is_spec(cfg.workload):  # a user's dataset may hold other counts than asked
        dataset = build_dataset(cfg)  # NOTE: lists the files once; the mode lists them again (cheap)
        # NOTE: classes nobody declared stay auto (0): the model's head decided them, and 0 reruns the same way
        if getattr(dataset, "is_stream", False):
            stream.update(stream_split=dataset.split, stream_note=_stream_note(cfg, dataset))
        out.update(
            n_samples=_samples(dataset, cfg),
            num_classes=dataset.num_classes if getattr(dataset, "classes_known", True) else 0,
        )
        if hasattr(dataset, "items_serialised"):
            items = {"items_serialised": dataset.items_serialised, "items_note": dataset.serial_note}
    return out, items


def _samples(dataset: Any, cfg: RunConfig) -> int:
    """The dataset's samples per epoch; a stream without a length keeps the config's figure (its note says so)."""
    return (dataset.total or cfg.n_samples) if getattr(dataset, "is_stream", False) else len(dataset)


def _stream_note(cfg: RunConfig, dataset: Any) -> str:
    workers = cfg.workers if cfg.loader in ("threads", "processes") else 1
    world = cfg.world_size if cfg.mode == "ddp" else 1
    notes = [dataset.for_rank(0, world).order_note(workers)]
    if dataset.total is None:
        notes.append("the stream has no length: epochs end where it stops, n_samples is not its size")
    if cfg.loader == "threads" and dataset.split == "self":
        notes.append("a stream that splits itself is read by one thread (get_worker_info() is None in threads)")
    return "; ".join(n for n in notes if n)


def _calibrate(calibrate: Callable[..., dict[str, Any]], ctx: Any, run_dir: Path, hook: Any) -> dict[str, Any]:
    """The bound's passes; their failure (e.g. out of memory) leaves the run `done`, with `bound_error`."""
    try:
        return calibrate(ctx, run_dir, hook)
    except Exception as e:  # noqa: BLE001 - the run's own figures stand; the bound is an extra
        log.warning("lower-bound calibration failed", exc_info=True)
        return {"bound_error": f"{type(e).__name__}: {e}"[:500]}


def _predict(how: Callable[..., Mapping[str, Any] | None], *args: Any) -> dict[str, Any] | None:
    """A prediction's fields; its failure (a probe out of memory, say) leaves the run as it is, unpredicted."""
    try:
        fields = how(*args)
        return dict(fields) if fields is not None else None
    except Exception:  # noqa: BLE001 - the run's own figures stand; the prediction is an extra
        log.warning("predicting the epoch failed", exc_info=True)
        return None


class _Heartbeat:
    """Touches the heartbeat every second so a hung or dead run is noticed (docs/design.md: stale runs)."""

    def __init__(self, runlog: RunLog, period_s: float = 1.0):
        self.runlog, self.period = runlog, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loaderlab-heartbeat", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.runlog.beat()

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------- parent side


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Kill a run's whole process group: the run and its loader workers."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def launch(
    cfg: RunConfig,
    *,
    db: Db = None,
    meta: dict[str, Any] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    cancel: threading.Event | None = None,
    cancel_reason: str | Callable[[], str] = "cancelled by the user; finished epochs kept",
    poll_s: float = 0.25,
    exit_grace_s: float = 10.0,
    warm: Any = None,
    oversubscribe: bool | None = None,
) -> RunResult:
    """Run cfg in a subprocess, stream its events to on_event, ingest it, and return how it ended.

    A config the child refuses (the machine's checks, engine.registry.check, made where torch is) raises its ConfigError
    here, with nothing stored and the run's folder removed, as if the launcher had checked it.
    Ctrl-C or `cancel` kills the whole process group; finished epochs are kept and the run is
    marked cancelled with `cancel_reason`. A child that wrote its `end` event but has not exited
    after exit_grace_s (a worker it cannot reap) is killed: the run is over either way. `warm`, an
    engine.run.warm.WarmParent, forks the child from a parent that has imported torch already (else: cold).
    A config this host cannot fit is refused first (engine.run.hostfit; `oversubscribe` None: the environment's).
    """
    check_host(cfg, oversubscribe=oversubscribe)  # a ConfigError before any RunLog; its warnings are the caller's
    meta = dict(meta or {})
    meta.setdefault("launched_at", time.time())  # start-up's phases are counted from here (engine/measure/startup.py)
    meta.setdefault("cwd", os.getcwd())  # the child runs in the checkout; a user's module may be here (plugins)
    meta.update(preflight(cfg, cwd=meta.get("cwd")))  # a bad plugin fails here, before any RunLog: its code_hash
    run_id = meta.pop("run_id", None) or new_run_id()
    run_dir = runs_dir(db) / run_id
    claim(run_dir, db_path(db))  # first: the RunLog is this store's alone, whatever else shares its runs/
    # NOTE: held until the run is stored or left waiting: meanwhile its RunLog is this process's to store, and
    # pending_summary() does not count it as waiting (engine.runlog.launching)
    with launching(run_dir):
        (run_dir / "config.json").write_text(cfg.to_json())
        (run_dir / "meta.json").write_text(json.dumps(meta))
        proc = _start(run_dir, warm)
        (run_dir / "pid").write_text(str(proc.pid))
        offset, ending, ended_at = 0, None, None
        try:
            while True:
                done = proc.poll() is not None
                events, offset = tail_events(run_dir, offset)
                for event in events:
                    if event.get("type") == "end":
                        ended_at = time.monotonic()
                    if on_event:
                        on_event(event)
                if done or (ended_at is not None and time.monotonic() - ended_at > exit_grace_s):
                    break
                if cancel is not None and cancel.is_set():
                    ending = (RunStatus.CANCELLED, cancel_reason() if callable(cancel_reason) else cancel_reason)
                    break
                _nap(proc, poll_s)
        except KeyboardInterrupt:
            ending = (RunStatus.CANCELLED, "interrupted (Ctrl-C); finished epochs kept")
            raise
        finally:
            kill_group(proc.pid)  # the run is over or abandoned: no orphaned loader workers either way
            proc.wait()
            rejected = _rejected(run_dir)
            if rejected is None:
                (status, error), unlogged = _close_log(run_dir, proc.returncode, ending)
                stored, held_by = _store(run_dir, db, unlogged)
    if rejected is not None:
        raise rejected
    return RunResult(run_id, status, error, run_dir, stored, held_by, warm=not isinstance(proc, subprocess.Popen))


def _rejected(run_dir: Path) -> ConfigError | None:
    """The child's refusal of the config, if it refused it (then the folder holds no RunLog and goes)."""
    path = run_dir / REJECTED
    if not path.is_file() or (run_dir / "events.jsonl").exists():
        return None
    why = json.loads(path.read_text())
    shutil.rmtree(run_dir, ignore_errors=True)
    return ConfigError(str(why["field"]), str(why["message"]))


def _nap(proc: Any, poll_s: float) -> None:
    """Wait up to poll_s, but wake when the child exits: a run's end is not left waiting for the next poll."""
    try:
        proc.wait(timeout=poll_s)
    except subprocess.TimeoutExpired:
        pass


def _start(run_dir: Path, warm: Any) -> Any:
    """The child: forked by the warm parent when there is one that can, else `python -m engine.run.runner` (cold)."""
    env = run_env()
    (run_dir / "stderr.log").write_bytes(b"")
    child = warm.start(run_dir, env) if warm is not None else None
    if child is not None:
        return child
    with open(run_dir / "stderr.log", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "engine.run.runner", str(run_dir)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            start_new_session=True,
        )


def _store(run_dir: Path, db: Db, unlogged: list[dict[str, Any]]) -> tuple[bool, str | None]:
    """Ingest the finished RunLog (plus the events it had no room for), unless the store is held: then it waits,
    safe, for the next ingest."""
    # NOTE: imported here: the run child imports this module too, and duckdb, pandas and pyarrow must not
    # join the process tree whose memory and start-up the run measures
    from engine.store import StoreBusy, ingest_run  # noqa: PLC0415

    try:
        ingest_run(run_dir, db=db, extra_events=unlogged)
    except StoreBusy as e:  # a user's notebook on the file: the run is not lost, and never waits for it
        log.info("run %s not stored yet: %s", run_dir.name, e)
        return False, getattr(e, "holder", None)
    return True, None


def _close_log(
    run_dir: Path, returncode: int, ending: tuple[str, str | None] | None
) -> tuple[tuple[str, str | None], list[dict[str, Any]]]:
    """Make sure the log ends with an `end` event, written by the parent when the child could not.

    Returns (status, error) and the events the RunLog could not take (its disk is full): the store gets those
    directly, so the run is stored as failed with that reason rather than found later as `killed`."""
    events = list(iter_events(run_dir))
    end = next((e for e in reversed(events) if e["type"] == "end"), None)
    if end is not None:
        return (end["status"], end.get("error")), []
    log_file = run_dir / "events.jsonl"
    if ending is None and returncode == EXIT_DISK_FULL:
        ending = (RunStatus.FAILED, disk_full(OSError(errno.ENOSPC, "No space left on device", str(log_file))))
    if ending is None:
        tail = (run_dir / "stderr.log").read_text(errors="replace").strip().splitlines()[-3:]
        how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
        status, error = dead_end(f"the run process ended with {how} before finishing", killed=returncode < 0)
        ending = (status, error + (f". Last output: {' | '.join(tail)}" if tail else ""))
    return ending, end_dead_run(run_dir, *ending, events=events)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return execute(Path(argv[0]))


def exit_child(code: int) -> None:
    """End a run child, cold or warm-forked, with `code` and no interpreter teardown. Never returns.

    NOTE: teardown is slow with torch loaded (bench/startup.py times it in its "reap" phase), and buys nothing:
    the RunLog is closed and fsynced and the loader workers joined by now."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # stderr.log on a full disk: the exit status still says how the run ended
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_child(main(sys.argv[1:]))
