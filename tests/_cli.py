"""The CLI called in the test's own process: `engine.cli.main([...])` with its stdout, stderr and WARNING logs
caught, returned as a subprocess.CompletedProcess (returncode, stdout, stderr) like a real `python -m engine` gives.

For tests of what a command prints or stores: a cold `python -m engine` costs an interpreter and the engine's
imports per call. Tests of start-up, exit at the process level, signals or pipes keep real subprocesses (each
command family keeps at least one: tests/engine/test_cli.py, test_cli_errors.py)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["cli_in_process"]


def cli_in_process(
    *args: str, db: Path | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """main([*args, "--db", db]) run here, in `cwd` and with the variables in `env` set if given; never raises for
    what a process would exit on."""
    from engine.cli import main  # noqa: PLC0415

    argv = [*map(str, args), *(["--db", str(db)] if db is not None else [])]
    out, err = io.StringIO(), io.StringIO()
    # NOTE: main()'s logging.basicConfig is a no-op under pytest (its capture handler is on the root logger), so the
    # WARNING lines a real process prints to stderr are caught here, in main()'s format
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    # NOTE: a command may set what its own process then reads (--oversubscribe sets OVERSUBSCRIBE_ENV; a plugin's
    # folder goes on sys.path): a process would take that to its exit, this one must not take it to the next test
    here, environ, path = os.getcwd(), dict(os.environ), list(sys.path)
    try:
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:  # as a process would exit
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        root.removeHandler(handler)
    return subprocess.CompletedProcess(["engine", *argv], code, out.getvalue(), err.getvalue())
