"""Preflight, the launchers' side: try a config's plugins on one small batch, in a child process under a time
limit, before a run is launched.

    extra_meta = preflight(cfg)               # {"code_hash": "..."} for a plugin run, {} for built-ins
    metas = preflight_all(sweep.configs())    # one child checks every config not checked yet

Built-in configs return at once and start nothing. A config that names a plugin is checked by
`python -m engine.run._plugin_check` (engine/run/_plugin_check.py), which builds the dataset and model with torch.
Each call into the user's code gets the time limit (LOADERLAB_PREFLIGHT_TIMEOUT_S, default 60 s; the CLI's
--preflight-timeout sets it); past it the child is killed and a ConfigError names the plugin and what it was
doing. A plugin that exits the process (sys.exit, os._exit, a crash) is that plugin's ConfigError too.

NOTE: a child process, not a thread with join(timeout): Python cannot stop a thread, so a factory that sleeps
forever would leave a stuck thread (and whatever it holds, torch's threads, GPU memory) in a long-lived launcher
(the job worker, the dashboard, a notebook) for good, and a CLI could only leave by os._exit. A process is
killed with its whole group, and the user's module never runs in the launcher: its sys.exit, its globals and
its imports stay out of it. The price is the child's start (torch's import, which the CLI's process leaves
out); a launcher keeps the checks that passed,
keyed by config and by the stamp of the source files hashed, so a sweep or a worker pays it once per code change.

This module is the launchers' (CLI, sweeps, the job worker, Ray, the notebook) and sits above the run side:
nothing the run side imports imports it, so the import graph stays acyclic.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from engine.errors import ConfigError, printable
from engine.paths import ROOT
from engine.plugins import specs_of
from engine.plugins.hashing import stamp
from engine.run.warm import run_env

__all__ = ["DEFAULT_TIMEOUT_S", "TIMEOUT_ENV", "preflight", "preflight_all", "set_time_limit", "time_limit"]

TIMEOUT_ENV = "LOADERLAB_PREFLIGHT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
_MAX_TIMEOUT_S = 86_400.0
_START_S = 300.0  # the child's own start (the interpreter, torch, the engine): never the plugin's time
# Fields that change how batches are delivered or measured, not what a batch or the model is.
_DELIVERY = (
    "loader",
    "workers",
    "prefetch_depth",
    "start_method",
    "persistent_workers",
    "pin_memory",
    "worker_timeout_s",
    "epochs",
    "warmup_epochs",
    "device",
    "threads",
    "tag",
    "bound",
    "sample_hz",
    "trace",
)
_PASSED: dict[str, tuple[list[str], list[Any], dict[str, Any]]] = {}  # passed here: key -> (roots, stamp, meta)


def time_limit() -> float:
    """Seconds each call into a plugin may take during preflight: $LOADERLAB_PREFLIGHT_TIMEOUT_S, else 60."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    return _seconds(raw, TIMEOUT_ENV) if raw else DEFAULT_TIMEOUT_S


def set_time_limit(value: str | float) -> float:
    """The CLI's --preflight-timeout: validated, then set for this process and the processes it starts."""
    seconds = _seconds(value, "preflight_timeout")
    os.environ[TIMEOUT_ENV] = repr(seconds)  # NOTE: the environment, so every launcher below (sweep, tune) sees it
    return seconds


def _seconds(value: str | float, field: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 < seconds <= _MAX_TIMEOUT_S:  # NaN fails this too
        raise ConfigError(
            field, f"expected seconds above 0 and at most {_MAX_TIMEOUT_S:.0f}, got {printable(str(value))[:40]!r}"
        )
    return seconds


def preflight(cfg: Any, cwd: str | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """Try cfg's plugins on one small batch; returns {"code_hash": ...} or {}. A bad plugin raises a one-line
    ConfigError naming its field; one that hangs, exits or crashes names the plugin and what it was doing."""
    return preflight_all([cfg], cwd, timeout_s)[0]


def preflight_all(configs: list[Any], cwd: str | None = None, timeout_s: float | None = None) -> list[dict[str, Any]]:
    """preflight() for many configs (a sweep's), in one child for all those not checked already in this process.

    cwd: the folder the user's modules are imported from (the launcher's, or a job's submitter's)."""
    cwd = cwd or os.getcwd()
    out: list[dict[str, Any] | None] = [None] * len(configs)
    todo: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        if not specs_of(cfg):
            out[i] = {}  # built-ins only: nothing to try
            continue
        key = _key(cfg, cwd)
        passed = _PASSED.get(key)
        if passed is not None and passed[1] == stamp(passed[0]):  # the same files as they were then
            out[i] = dict(passed[2])
        else:
            todo.setdefault(key, []).append(i)
    if todo:
        found = _check([configs[idx[0]] for idx in todo.values()], cwd, timeout_s or time_limit())
        for (key, idx), (meta, roots, stamped) in zip(todo.items(), found):
            _PASSED[key] = (roots, stamped, meta)
            for i in idx:
                out[i] = dict(meta)
    return [o if o is not None else {} for o in out]


def _key(cfg: Any, cwd: str) -> str:
    """What a check depends on besides the code: the fields that shape a batch and the model, whether the
    dataset is pickled for its workers, and where the user's modules are found."""
    pickled = cfg.loader == "processes" and cfg.start_method != "fork"  # the one delivery setting checked
    fields = {k: v for k, v in cfg.to_dict().items() if k not in _DELIVERY}
    return json.dumps([fields, pickled, cwd, os.environ.get("PYTHONPATH", "")], sort_keys=True)


# ---------------------------------------------------------------------------- the child

_Found = tuple[dict[str, Any], list[str], list[Any]]  # (meta, roots, stamp) of a config that passed


def _check(configs: list[Any], cwd: str, limit: float) -> list[_Found]:
    """Run the checks in `python -m engine.run._plugin_check`; (meta, roots, stamp) per config, or the first error
    raised. roots and stamp: the source files hashed, as the child saw them (engine.plugins.hashing)."""
    request = json.dumps({"configs": [c.to_dict() for c in configs], "cwd": cwd}).encode()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.run._plugin_check"],
            cwd=ROOT,
            env=run_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
        assert proc.stdin is not None  # a pipe, as asked
        try:
            proc.stdin.write(request)
            proc.stdin.close()
            return _follow(proc, len(configs), limit, err)
        except BrokenPipeError:
            return _follow(proc, len(configs), limit, err)
        finally:
            _kill(proc)  # done, failed or timed out: nothing it started outlives the check


def _follow(proc: subprocess.Popen[bytes], n: int, limit: float, err: Any) -> list[_Found]:
    """Read the child's messages; each phase (one call into the user's code) must end within `limit` seconds."""
    found: list[_Found] = []
    phase: dict[str, Any] = {}  # the call in progress, as the child reported it
    deadline, buf, started = time.monotonic() + max(_START_S, limit), b"", False
    assert proc.stdout is not None  # a pipe, as asked
    fd = proc.stdout.fileno()
    while len(found) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            if time.monotonic() >= deadline:
                raise _timed_out(phase, limit, started)
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise _ended(phase, proc, err)
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "error" in msg:
                raise ConfigError(msg["error"]["field"], msg["error"]["message"])
            if "crash" in msg:
                raise _ended(phase, proc, err, msg["crash"])
            if "done" in msg:
                found.append((msg["meta"], msg["roots"], msg["stamp"]))
                phase = {}
            elif "phase" in msg:
                phase = msg
            started = True
            deadline = time.monotonic() + limit  # each message starts the next call's time
    return found


def _who(phase: dict[str, Any]) -> str:
    return f"plugin '{phase['spec']}' ({phase['kind']})" if phase.get("spec") else "preflight's own code"


def _timed_out(phase: dict[str, Any], limit: float, started: bool) -> ConfigError:
    if not started:
        return ConfigError(
            "preflight_timeout",
            f"the preflight process did not start within {max(_START_S, limit):g}"
            " s (it imports torch); the machine may be overloaded: try again",
        )
    if not phase:
        return ConfigError(
            "preflight_timeout",
            f"preflight's own checks did not finish within {limit:g} s; the "
            "machine may be overloaded: raise --preflight-timeout or try again",
        )
    fix = "the factory" if phase["kind"].endswith("factory") else f"the {phase['kind']}"
    return ConfigError(
        phase["field"],
        f"{_who(phase)} did not return within {limit:g} s while preflight "
        f"{phase['phase']}; raise --preflight-timeout (or {TIMEOUT_ENV}) or fix {fix}",
    )


def _ended(phase: dict[str, Any], proc: subprocess.Popen, err: Any, crash: str | None = None) -> ConfigError:
    """The child ended (or broke) before its answer: blame the call in progress, quoting the last line it wrote."""
    if crash is None:
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        how = (
            "was killed"
            if code is None
            else f"ended with signal {-code}"
            if code < 0
            else f"ended with exit status {code}"
        )
    else:
        how = f"failed ({crash})"
    err.seek(0)
    tail = [line for line in err.read()[-4000:].decode(errors="replace").splitlines() if line.strip()][-1:]
    said = f"; its last output: {printable(tail[0].strip())[:200]}" if tail and crash is None else ""
    if not phase:
        return ConfigError("preflight", f"the preflight process {how} before it checked a plugin{said}")
    return ConfigError(
        phase["field"],
        f"the preflight process {how} while {_who(phase)} was called (preflight "
        f"{phase['phase']}){said}; a plugin must return or raise, never end the "
        "process",
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if proc.stdout is not None:  # a pipe, as _check asked
        proc.stdout.close()
