"""Warm start: a sweep's runs forked from a parent that has already imported torch and the engine.

A cold run pays the interpreter's start, `import torch` and the engine's imports (seconds) before its first
batch. A sweep (and the job worker) keeps one WarmParent (engine/run/_warm_server.py), which imports them once and
forks a child per run. The child is what a cold child is: its own session (kill_group(pid) kills it and its
loader workers), stdout and stderr to <run_dir>/stderr.log, stdin /dev/null, the launcher's environment, the
checkout as its folder, engine.run.runner's main. launch() stays in charge: pid file, tailing, cancel, kills, ingest.

    with WarmParent() as warm:
        launch(cfg, warm=warm)      # forked warm; cold (with a log line) whenever warm cannot be had

Sweeps, tunes and single runs in one process (a notebook's, a test worker's) borrow one shared parent instead
(`with borrowed() as warm:`), kept between them, so the process imports torch once, not once per call. It exits
by itself after SHARED_IDLE_S without a request, and with the process (its stdin closes). A borrower gets its own
parent, ended with its block, where the shared one is in use (another thread's sweep) or a load-time variable
changed since it started; an exception in a block ends the shared one (a run may be left in flight).

Cold instead, each with one log line: LOADERLAB_WARM=0; the parent failed to start or died; it refused to
fork (it must be single-threaded, with CUDA uninitialised: checked before every fork); or a variable read when
libraries load (LOAD_TIME: OMP_*, MKL_*, LD_*, PYTHON*, ...) differs from the one the parent started with.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from engine.paths import ROOT

__all__ = ["LOAD_TIME", "SHARED_IDLE_S", "WarmChild", "WarmParent", "borrowed", "run_env", "shared_pid", "warm_enabled"]

log = logging.getLogger(__name__)

LOAD_TIME = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "LD_", "PYTHON", "TORCH_", "MALLOC_")
# NOTE: the shared parent holds torch's imports (a few hundred MB) while a notebook sits idle: it exits by its own
# clock after this long without a request; a borrower replaces one idle for half of it, before it can go mid-fork
SHARED_IDLE_S = 300.0


def warm_enabled() -> bool:
    return os.environ.get("LOADERLAB_WARM", "1").strip().lower() not in ("0", "false", "no", "off")


def run_env() -> dict[str, str]:
    """A run child's environment, cold or warm: ours, with the checkout first on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _load_time(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(LOAD_TIME)}


class WarmChild:
    """A forked run, with the part of Popen's interface launch() uses: pid, poll(), wait(), returncode."""

    def __init__(self, parent: "WarmParent", pid: int):
        self.parent, self.pid = parent, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._take(self.parent._read(timeout=0))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"warm run {self.pid}", timeout)
            self._take(self.parent._read(timeout=left))
        return self.returncode

    def _take(self, msg: dict[str, Any] | None) -> None:
        if msg is None:
            return
        if "exit" in msg:
            self.returncode = msg["exit"]
        else:  # the parent died: its child (ours) lives on unwatched; end it, as launch() would have
            log.warning("warm parent died during run pid %d; the run is killed, later runs start cold", self.pid)
            for kill in (os.killpg, os.kill):
                try:
                    kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            self.returncode = -signal.SIGKILL
        self.parent._busy.release()


class WarmParent:
    """One warm parent for a sweep or a job worker; start() forks a run, or returns None: start it cold."""

    _proc: "subprocess.Popen[bytes] | None"
    _dead: str | None  # why runs start cold; None while the parent serves forks
    _ready: dict[str, Any] | None  # its first message, once read
    _env: dict[str, str]  # the environment it started with

    def __init__(self, enabled: bool = True, ready_timeout_s: float = 180.0, idle_s: float | None = None):
        """idle_s: the parent exits by itself after that long without a request (the shared parent's); None: it
        serves until its stdin closes."""
        self.ready_timeout_s, self.idle_s, self._proc, self._dead = ready_timeout_s, idle_s, None, None
        self._heard_at = time.monotonic()  # when its last message was read (or it was started)
        self._busy = threading.Lock()  # one run in flight: a second launch at once starts cold
        if not warm_enabled():
            self._dead = "LOADERLAB_WARM=0"
            log.info("LOADERLAB_WARM=0: runs start cold")
        elif enabled:
            self._env = run_env()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "engine.run._warm_server", *([f"--idle-s={idle_s:g}"] if idle_s else [])],
                cwd=ROOT,
                env=self._env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                bufsize=0,
            )
            self._ready = None
        else:
            self._dead = "not wanted"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, run_dir: Path, env: dict[str, str]) -> WarmChild | None:
        """Fork the run in run_dir with env, or say in one log line why it starts cold and return None."""
        return self._fork(run_dir, env, None)

    def call(self, module: str, argv: list[str], work_dir: Path, env: dict[str, str]) -> WarmChild | None:
        """Fork `python -m module argv...` (its main(argv)): stdin from work_dir/stdin, stdout to work_dir/stdout,
        stderr to work_dir/stderr.log; or say in one log line why it cannot and return None (run it cold)."""
        call = {"module": module, "argv": argv, "stdin": str(work_dir / "stdin"), "stdout": str(work_dir / "stdout")}
        return self._fork(work_dir, env, call)

    def _fork(self, run_dir: Path, env: dict[str, str], call: dict[str, Any] | None) -> WarmChild | None:
        if self._dead or not self._busy.acquire(blocking=False):
            return None
        why = self._unfit(env)
        if why is None:
            self._send(op="fork", run_dir=str(run_dir), env=env, **({"call": call} if call else {}))
            reply = self._read(timeout=60.0)
            if reply is None:  # a late answer would be read as the next one's: stop using it
                self._fail("the warm parent did not answer in 60 s")
                self._live().kill()
                reply = {"eof": True}
            if "pid" in reply:
                return WarmChild(self, reply["pid"])
            why = self._dead if "eof" in reply else f"the warm parent refused: {reply.get('refused')}"
        self._busy.release()
        what = f"{call['module']} in {Path(run_dir).name}" if call else f"run {Path(run_dir).name}"
        log.warning("%s starts cold: %s", what, why)
        return None

    def _unfit(self, env: dict[str, str]) -> str | None:
        if self._ready is None:
            self._ready = self._read(timeout=self.ready_timeout_s) or {"error": "it did not start in time"}
            if not self._ready.get("ready"):
                self._fail(f"the warm parent failed to start: {self._ready.get('error')}")
                return self._dead
            log.info("warm parent pid %d ready (imports took %.1f s)", self.pid, self._ready["preload_s"])
        proc = self._live()
        if proc.poll() is not None:
            self._fail(f"the warm parent exited ({proc.returncode})")
            return self._dead
        changed = sorted({k for k, _ in set(_load_time(env).items()) ^ set(_load_time(self._env).items())})
        return f"{', '.join(changed)} changed since the warm parent started" if changed else None

    def reusable(self, env: dict[str, str]) -> bool:
        """Whether a later sweep may fork from this parent: alive, started under env's load-time variables, and
        quiet for under half its own exit time (so it cannot exit between this check and a fork)."""
        if self._dead or self._proc is None or self._proc.poll() is not None:
            return False
        # NOTE: its idle clock restarts after each reply it sends; the last one we read came no earlier
        if self.idle_s is not None and time.monotonic() - self._heard_at >= self.idle_s / 2:
            return False
        return _load_time(env) == _load_time(self._env)

    def ready(self) -> bool:
        """Wait for the parent's imports (at most ready_timeout_s); whether it now serves forks."""
        if self._dead:
            return False
        with self._busy:
            return self._unfit(self._env) is None

    def status(self) -> dict[str, Any]:
        """The parent's own view: pid, threads, cuda_initialized, torch_loaded (asked while no run is in flight)."""
        with self._busy:
            if self._dead or self._unfit(self._env):
                raise RuntimeError(self._dead or "the warm parent is not usable")
            self._send(op="status")
            return self._read(timeout=30.0) or {}

    def _send(self, **msg: Any) -> None:
        try:
            self._pipe(self._live().stdin).write(json.dumps(msg).encode() + b"\n")
        except OSError:
            pass  # it died: the read that follows sees EOF

    def _read(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message; None when none came within timeout; {"eof": True} when the parent is gone."""
        out = self._pipe(self._live().stdout)
        if timeout is not None and not select.select([out], [], [], timeout)[0]:
            return None
        line = out.readline()  # unbuffered: whole lines, written in one write() each
        if not line:
            self._fail("the warm parent died")
            return {"eof": True}
        self._heard_at = time.monotonic()
        return json.loads(line)

    def _live(self) -> "subprocess.Popen[bytes]":
        """The parent's process: every caller runs only while it serves forks, so it was started."""
        assert self._proc is not None, "the warm parent was never started"
        return self._proc

    @staticmethod
    def _pipe(pipe: IO[bytes] | None) -> IO[bytes]:
        assert pipe is not None, "the warm parent's stdin and stdout are pipes"
        return pipe

    def _fail(self, why: str) -> None:
        if not self._dead:
            log.warning("%s; runs start cold", why)
        self._dead = why

    def close(self) -> None:
        """Stop the parent (it exits when its stdin closes) and reap it: nothing is left behind."""
        if self._proc is None:
            return
        # NOTE: a parent that has not said it is ready is still importing torch and its compiler (seconds of CPU)
        # and has forked nothing: it is killed, not waited for, so a worker that ran no job stops at once
        importing = self._ready is None and not self._dead and not select.select([self._proc.stdout], [], [], 0)[0]
        self._pipe(self._proc.stdin).close()
        if importing:
            self._proc.kill()
        try:
            self._proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._pipe(self._proc.stdout).close()
        self._dead = self._dead or "closed"

    def __enter__(self) -> "WarmParent":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: WarmParent | None = None  # this process's parent, kept between borrowers
_shared_lock = threading.Lock()
_shared_out = False  # lent to a borrower now


@contextmanager
def borrowed(enabled: bool = True) -> Iterator[WarmParent]:
    """A warm parent for one sweep or tune: this process's shared one where it can be had (module docstring).

    enabled=False (a one-run sweep: a parent of its own would cost what a cold start does) lends the shared parent
    where one is running already, and otherwise one that forks nothing, as WarmParent(enabled=False) does."""
    global _shared, _shared_out
    mine = None
    if warm_enabled():
        with _shared_lock:
            # NOTE: lent, or forking a run for someone who holds it without borrowing (the tests' warm_runs): the
            # borrower gets its own, and the shared one is left alone
            if not _shared_out and (_shared is None or not _shared._busy.locked()):
                if _shared is not None and not _shared.reusable(run_env()):
                    _shared.close()
                    _shared = None
                if _shared is None and enabled:
                    _shared = WarmParent(idle_s=SHARED_IDLE_S)
                if _shared is not None:
                    mine, _shared_out = _shared, True
    if mine is None:
        with WarmParent(enabled=enabled) as own:
            yield own
        return
    ok = False
    try:
        yield mine
        ok = True
    finally:
        with _shared_lock:
            _shared_out = False
            if not ok and _shared is mine:  # NOTE: a run may be in flight, its exit unread: end it with the parent
                _shared = None
        if not ok:
            mine.close()


def shared_pid() -> int | None:
    """The shared parent's pid while it runs (the tests' leak checks leave it out, as multiprocessing's helpers)."""
    parent = _shared
    return parent.pid if parent is not None and parent._proc is not None and parent._proc.poll() is None else None


@atexit.register
def _close_shared() -> None:
    global _shared
    with _shared_lock:
        parent, _shared = _shared, None
    if parent is not None:
        parent.close()
