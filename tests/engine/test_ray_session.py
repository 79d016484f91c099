"""Leftovers of a recorded local Ray session: only processes of a session whose owner died are stopped.

Real processes stand in for Ray's: one names the session folder on its command line (as raylet does), one
only holds a log file open under it (as Ray's agents do, whose titles Ray rewrites), one belongs to a
session whose name merely starts the same way, and one to a session whose owner is alive. No Ray needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

from engine.sweeps.ray._session import reap_leftovers, sessions_dir

SLEEPER = (
    "import sys, time; f = open(sys.argv[1], 'a') if sys.argv[1:] and sys.argv[2:] == ['open'] else None; "
    "time.sleep(120)"
)


def _sleeper(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SLEEPER, *args])


def _record(db: Path, name: str, owner: psutil.Process, session_dir: Path) -> Path:
    path = sessions_dir(db) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "owner_pid": owner.pid,
                "owner_started": owner.create_time(),
                "session_dir": str(session_dir),
                "gcs_address": "127.0.0.1:1",
            }
        )
    )
    return path


def _running(p: subprocess.Popen) -> bool:
    return p.poll() is None


def test_only_a_dead_owners_session_is_stopped(tmp_path):
    db = tmp_path / "loaderlab.duckdb"
    dead_dir, alive_dir = tmp_path / "session_1_1874", tmp_path / "session_2_99"
    (dead_dir / "logs").mkdir(parents=True)
    (alive_dir / "logs").mkdir(parents=True)
    gone = _sleeper()  # the owner: recorded while alive, then killed as a worker would be
    gone_proc = psutil.Process(gone.pid)
    procs = {
        "named": _sleeper(f"--log_dir={dead_dir}/logs"),
        "holds a log": _sleeper(str(dead_dir / "logs" / "agent.log"), "open"),
        "similar name": _sleeper(f"--session-dir={tmp_path / 'session_1_18743'}"),
        "live owner's": _sleeper(f"--log_dir={alive_dir}/logs"),
    }
    gone.kill()
    gone.wait()
    time.sleep(0.5)  # the sleepers have opened their files
    try:
        dead_record = _record(db, "dead", gone_proc, dead_dir)
        live_record = _record(db, "live", psutil.Process(), alive_dir)  # this test process owns it: alive
        said = reap_leftovers(db)
        assert len(said) == 1 and said[0].startswith(
            f"Ray session {dead_dir.name} of dead pid {gone.pid}: cleaned up, not reattached"
        ), said
        for name in ("named", "holds a log"):
            assert procs[name].wait(10) is not None, f"{name} process of the dead session still runs"
            assert str(procs[name].pid) in said[0]
        assert _running(procs["similar name"]) and _running(procs["live owner's"])
        assert not dead_record.exists() and live_record.exists()
        assert reap_leftovers(db) == []  # nothing more to do; the live owner's session is still left alone
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
