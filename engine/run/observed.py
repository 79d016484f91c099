"""`python -m engine observe [--name NAME] -- python train.py ARGS`: the user's script, unchanged, observed.

The script runs in its own interpreter under engine/observe/_boot.py, with its own stdin, stdout and stderr; each
DataLoader it iterates becomes one run (source 'observed') whose RunLog it writes as it trains. This process
only waits, then ends the RunLogs the script could not end itself (killed, os._exit) and stores them: the script's
process never opens the store. The script's exit status is this command's (a signal: 128 + its number).

    rc = observe(["python", "train.py", "--epochs", "3"], name="baseline", db=None, say=print)
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import uuid
from datetime import datetime
from pathlib import Path
from typing import Callable

from engine.errors import ConfigError, StoreBusy, printable
from engine.measure import efficiency_text
from engine.observe import BOOT, ENV_NAME, ENV_PREFIX, ENV_ROOT, ENV_RUNS, ENV_STORE
from engine.paths import ROOT, Db, db_path, runs_dir
from engine.runlog import RunLog, dead_end, end_dead_run, iter_events, read_events
from engine.store import get_run, ingest_run

__all__ = ["EXAMPLE", "observe", "script_command"]

log = logging.getLogger(__name__)

EXAMPLE = "python -m engine observe -- python train.py ARGS"
_FLAGS_WITH_VALUE = ("-W", "-X")  # the interpreter's options before the script that take a value


def script_command(command: list[str], verb: str = "observe", field: str = "command") -> list[str]:
    """The interpreter command that runs `command`'s script under the observer; bad input is one line naming `field`,
    with an example of `verb` (observe, or tune, which runs the script the same way)."""
    example = EXAMPLE.replace(" observe ", f" {verb} ")
    command = command[1:] if command[:1] == ["--"] else list(command)
    if not command:
        raise ConfigError(field, f"nothing to {verb}; write the script's command after --, e.g. {example}")
    exe = command[0]
    if not Path(exe).name.startswith("python"):
        raise ConfigError(
            field, f"'{printable(exe[:80])}' is not a Python interpreter; {verb} runs a Python script: {example}"
        )
    if shutil.which(exe) is None:
        raise ConfigError(field, f"the interpreter '{printable(exe[:80])}' was not found; give its path or 'python'")
    flags: list[str] = []
    rest = command[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        take = 2 if rest[0] in _FLAGS_WITH_VALUE else 1
        flags, rest = flags + rest[:take], rest[take:]
    if not rest or (rest[0] in ("-m", "-c") and len(rest) < 2):
        raise ConfigError(field, f"no script to run after the interpreter; {example}")
    if rest[0] not in ("-m", "-c") and not Path(rest[0]).is_file():
        raise ConfigError(field, f"the script '{printable(rest[0][:120])}' was not found; check the path")
    return [exe, *flags, str(BOOT), *rest]


def observe(
    command: list[str], *, name: str | None = None, db: Db = None, say: Callable[[str], None] = lambda line: None
) -> int:
    """Run the script observed, store its streams' runs; the script's exit status (module doc)."""
    argv = script_command(command)
    root, prefix = runs_dir(db), f"obs-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        ENV_RUNS: str(root),
        ENV_STORE: str(db_path(db)),
        ENV_PREFIX: prefix,
        ENV_NAME: name or "",
        ENV_ROOT: str(ROOT),
    }
    proc = subprocess.Popen(argv, env=env)
    while True:
        try:
            rc = proc.wait()
            break
        except KeyboardInterrupt:  # NOTE: the script got the same ^C: wait for it to end its runs, then store them
            continue
    for run_dir in sorted(root.glob(f"{prefix}-*")):
        _store(run_dir, rc, db, say)
    return rc if rc >= 0 else 128 - rc


def _store(run_dir: Path, rc: int, db: Db, say: Callable[[str], None]) -> None:
    if not any(e.get("type") == "end" for e in iter_events(run_dir)):
        how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited with status {rc} before ending"
        end_dead_run(run_dir, *dead_end(f"the script was {how}" if rc < 0 else f"the script {how}", killed=rc < 0))
    _why(run_dir)
    try:
        run_id = ingest_run(run_dir, db=db)
    except StoreBusy as e:
        say(f"{run_dir.name}: not stored yet ({e}); the next command that writes stores it")
        return
    run = get_run(run_id, db=db) or {}
    epoch = f"epoch {run['epoch_s']:.3f} s" if run.get("epoch_s") is not None else "no steady epoch"
    share = run.get("data_wait_share")
    wait = f" · data wait {share:.0%}" if share is not None else ""
    say(
        f"{run_id}: {printable(str(run.get('observed_stream')))} · {run.get('n_epochs') or 0} epoch(s) · "
        f"{epoch}{wait} · loader={run.get('loader')}, workers={run.get('workers')} ({run.get('status')})"
    )
    if run.get("verdict") or run.get("bound_s") is not None:
        bound = f"bound {run['bound_s']:.3f} s" if run.get("bound_s") is not None else "no bound"
        say(
            f"  {run.get('verdict') or 'no verdict'} · {bound} · efficiency {efficiency_text(run.get('efficiency'))}"
            f" · {run.get('verdict_help') or ''}"
        )
    elif run.get("bound_note"):
        say(f"  {run['bound_note']}")


def _why(run_dir: Path) -> None:
    """Append the run's bound, efficiency and verdict (engine/run/_observed_why.py) to its RunLog, so they are stored
    with it now or whenever it is stored; a failure to reach them is the run's bound_error, never a lost run."""
    try:
        # NOTE: here, not at the top: it imports torch (engine.calibrate), which the CLI must not load at start
        from engine.run._observed_why import observed_figures  # noqa: PLC0415

        fields = observed_figures(read_events(run_dir))
    except Exception as e:  # noqa: BLE001 - the run's figures are kept whatever the why does
        log.warning("observed run %s: no verdict (%s)", run_dir.name, e)
        fields = {"bound_error": f"{type(e).__name__}: {e}"[:300]}
    with RunLog(run_dir) as runlog:
        runlog.write("summary", **fields)
