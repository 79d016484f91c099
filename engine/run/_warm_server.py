"""The warm parent: `python -m engine.run._warm_server`, started and spoken to by engine.run.warm.WarmParent.

It imports torch and the engine's run-side modules once, then forks one child per run on request. Protocol:
JSON lines on its stdin/stdout, one run in flight at a time:
    -> {"op": "fork", "run_dir": "...", "env": {...}}   <- {"pid": 123} ... when it exits: {"exit": -9}
    -> {"op": "fork", ..., "call": {"module": "...", "argv": [...], "stdin": "...", "stdout": "..."}}
       a module's main(argv) in place of a run's (tune's probe: engine/predict/_probe_child.py), stdin and stdout
       from and to those files, stderr to <run_dir>/stderr.log; the same replies
    -> {"op": "status"}                                 <- {"threads": 1, "cuda_initialized": false, ...}
With --idle-s=N it exits after N seconds without a request (a process's shared parent: engine/run/warm.py).
Before every fork it checks it is single-threaded with CUDA uninitialised, else it refuses (the run starts cold).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import sys
import threading
import time
import traceback
from pathlib import Path
from collections.abc import Iterator
from typing import Any, BinaryIO

from engine.paths import ROOT
from engine.run.runner import exit_child, main

__all__ = ["PRELOAD", "parent_state", "serve"]

# what a run child imports: numpy (its BLAS pool is the baseline of threads allowed), torch, torch._dynamo (torch
# imports it lazily at a run's first optimizer step: seconds, sympy included), the engine's run-side modules
PRELOAD = (
    "numpy",
    "torch",
    "torch._dynamo",
    "torch.profiler",
    "engine.run.runner",
    "engine.devices",
    "engine.calibrate.bound",
    "engine.measure.host",
    "engine.measure.sampler",
    "engine.modes",
    "engine.registry",
    "engine.plugins",
)
_BASELINE: dict[str, int] = {}  # native threads once numpy is loaded: its BLAS pool, made at load time


def parent_state() -> dict[str, Any]:
    """What makes forking safe, as this process sees it (asked before every fork, and by the tests)."""
    # NOTE: imported here, not at the top: serve() imports torch itself, timed, and takes the thread baseline
    # in between (PRELOAD); by the time this runs torch is loaded and this is a dict lookup
    import torch  # noqa: PLC0415

    return {
        "pid": os.getpid(),
        "threads": _threads(),
        "baseline_threads": _BASELINE.get("threads", 1),
        "python_threads": threading.active_count(),
        "cuda_initialized": torch.cuda.is_initialized(),
        "torch_loaded": "torch" in sys.modules,
    }


def _threads() -> int:
    task = Path("/proc/self/task")  # native threads too (OpenMP, BLAS), which threading does not list
    return len(os.listdir(task)) if task.exists() else threading.active_count()


def _refusal(state: dict[str, Any]) -> str | None:
    if state["cuda_initialized"]:
        return "CUDA is initialised in the warm parent"
    # NOTE: numpy's OpenBLAS starts its pool when it loads (the baseline); OpenBLAS stops it around fork
    # (pthread_atfork), as with DataLoader's fork workers. Any thread beyond that baseline (an OpenMP pool
    # started by an op, a Python thread) could hold a lock the child inherits held: refuse.
    if state["python_threads"] > 1 or state["threads"] > state["baseline_threads"]:
        return f"the warm parent has {state['threads']} threads, {state['baseline_threads']} after its imports"
    return None


def _child(
    run_dir: str, env: dict[str, str], ready_w: int, proto: BinaryIO, call: dict[str, Any] | None = None
) -> None:
    """In the forked child: become a cold child's equal, then run (or `call`'s module). Never returns."""
    rc = 1
    try:
        os.setsid()  # before the launcher learns the pid: kill_group(pid) must always find the group
        os.write(ready_w, b"1")
        os.close(ready_w)
        proto.close()  # the launcher must see EOF when the parent dies, not wait on this copy
        err = os.open(Path(run_dir) / "stderr.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if call is None:
            fds = ((os.open(os.devnull, os.O_RDONLY), 0), (err, 1), (err, 2))
        else:
            out = os.open(call["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            fds = ((os.open(call["stdin"], os.O_RDONLY), 0), (out, 1), (err, 2))
        for fd, to in fds:
            os.dup2(fd, to)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(ROOT)  # the checkout, as a cold child's cwd
        if call is None:
            sys.argv = [sys.argv[0], run_dir]
            rc = main([run_dir])
        else:
            sys.argv = [call["module"], *call["argv"]]
            # NOTE: fresh objects on the new fds: the parent's sys.stdin read its protocol, its sys.stdout may hold
            # a stray import's print
            sys.stdin, sys.stdout = open(0, closefd=False), open(1, "w", closefd=False)  # noqa: SIM115
            rc = importlib.import_module(call["module"]).main(list(call["argv"]))
    except SystemExit as e:
        rc = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in stderr.log like a cold child's traceback
        traceback.print_exc()
    finally:
        exit_child(rc)


def _fork(req: dict[str, Any], proto: BinaryIO) -> None:
    refusal = _refusal(parent_state())
    if refusal:
        _reply(proto, refused=refusal)
        return
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        _child(req["run_dir"], req["env"], ready_w, proto, req.get("call"))
    os.close(ready_w)
    os.read(ready_r, 1)  # the child is in its own session (or already dead: EOF)
    os.close(ready_r)
    _reply(proto, pid=pid)
    _, status = os.waitpid(pid, 0)
    _reply(proto, exit=os.waitstatus_to_exitcode(status))


def _reply(proto: BinaryIO, **msg: Any) -> None:
    proto.write(json.dumps(msg).encode() + b"\n")  # one write under PIPE_BUF: the reader sees whole lines


def _requests(idle_s: float | None) -> Iterator[bytes]:
    """Lines from stdin until it closes, or until idle_s passes with no line (None: wait for ever)."""
    # NOTE: read on the raw fd, not sys.stdin's buffer, so that select() sees every byte not yet handed out
    fd, pending = sys.stdin.fileno(), b""
    while True:
        while b"\n" not in pending:
            if idle_s is not None and not select.select([fd], [], [], idle_s)[0]:
                return
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        yield line


def serve(idle_s: float | None = None) -> None:
    """The warm parent's loop; it ends when the launcher closes its stdin (or dies), or after idle_s without a
    request."""
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a stray print from an import must not land in the protocol
    t0, error = time.perf_counter(), None
    try:
        for name in PRELOAD:
            importlib.import_module(name)
            _BASELINE.setdefault("threads", _threads())  # after numpy: its BLAS pool, and no more after
    except Exception as e:  # noqa: BLE001 - the launcher logs it and starts its runs cold
        error = f"{type(e).__name__}: {e}"
    _reply(proto, ready=error is None, error=error, preload_s=round(time.perf_counter() - t0, 3))
    for line in _requests(idle_s):
        req = json.loads(line)
        if req.get("op") == "fork":
            _fork(req, proto)
        else:
            _reply(proto, **parent_state())


if __name__ == "__main__":
    idle = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--idle-s=")]
    serve(float(idle[0]) if idle else None)
