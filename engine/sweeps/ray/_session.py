"""Local Ray instances this project started, recorded next to the store so a dead owner's leftovers can be stopped.

A local instance (connect_ray with address None) is recorded in `<jobs_dir>/ray-sessions/<owner pid>.json`:
the owner's pid and start time, the session folder and the GCS address. On a normal exit the record goes.
After `kill -9` of its owner (the job worker, or a CLI sweep) Ray's head processes die with it, but the
raylet's agents (DashboardAgent, RuntimeEnvAgent) and busy workers are re-parented and live on. The next
job worker calls reap_leftovers(): for each record whose owner is dead it stops, with SIGTERM then SIGKILL,
every process of that session only (its command line or an open file under the session folder, plus
their descendants), logs what it did, and drops the record. It never reattaches: the driver that placed
the trials died with its owner, so nothing could be resumed through that instance. A cluster the user
started (`ray start`, --address) is never recorded, so never touched.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import psutil

from engine.paths import Db, jobs_dir

__all__ = ["forget_session", "reap_leftovers", "record_session", "session_processes", "sessions_dir"]

log = logging.getLogger(__name__)
TERM_WAIT_S = 3.0  # Ray's agents shut down on SIGTERM only once their raylet answers, which it never will


def sessions_dir(db: Db = None) -> Path:
    return jobs_dir(db) / "ray-sessions"


def record_session(folder: Path, ray: Any) -> Path | None:
    """Write this process's local Ray instance into `folder`; returns the record's path (None if it could not)."""
    node = ray._private.worker._global_node  # NOTE: private but stable in the pinned Ray; where its files live
    me = psutil.Process()
    record = {
        "owner_pid": me.pid,
        "owner_started": me.create_time(),
        "session_dir": node.get_session_dir_path(),
        "gcs_address": node.gcs_address,
    }
    path = folder / f"{me.pid}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)  # a reader never sees half a record
    except OSError as e:  # the sweep still runs; only a kill -9 would then leave Ray's agents behind
        log.warning("could not record Ray session %s in %s: %s", record["session_dir"], folder, e)
        return None
    return path


def forget_session(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _owner_alive(record: dict[str, Any]) -> bool:
    try:
        p = psutil.Process(int(record["owner_pid"]))
        return abs(p.create_time() - float(record["owner_started"])) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def session_processes(session_dir: str) -> list[psutil.Process]:
    """Live processes of one Ray session: those naming or holding a file under its folder, and their descendants."""
    # the folder's name ends at a "/", a space or the end: session_..._1874 is not a prefix match of ..._18743
    folder = session_dir.rstrip("/")
    named, mark, me, found = re.compile(re.escape(folder) + r"(?=/|\s|$)"), folder + "/", os.getpid(), {}
    for p in psutil.process_iter():
        try:
            if p.pid == me or p.status() == psutil.STATUS_ZOMBIE:
                continue
            # NOTE: Ray rewrites its workers' and agents' command lines (ray::IDLE), so open files count too
            if named.search(" ".join(p.cmdline())) or any(f.path.startswith(mark) for f in p.open_files()):
                found[p.pid] = p
                found.update((c.pid, c) for c in p.children(recursive=True))
        except psutil.Error:
            continue
    return [p for pid, p in found.items() if pid != me]


def _stop(procs: list[psutil.Process]) -> None:
    for sig in ("terminate", "kill"):
        for p in procs:
            try:
                getattr(p, sig)()
            except psutil.Error:
                pass
        _, procs = psutil.wait_procs(procs, timeout=TERM_WAIT_S)
        procs = [p for p in procs if _live(p)]
        if not procs:
            return


def _live(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE  # a re-parented zombie waits for init, it runs nothing
    except psutil.Error:
        return False


def reap_leftovers(db: Db = None) -> list[str]:
    """Stop what is left of local Ray instances whose owner died; one logged line per session, also returned."""
    said = []
    for path in sorted(sessions_dir(db).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            session_dir = str(record["session_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)  # unreadable: nothing could be matched by it
            continue
        if _owner_alive(record):
            continue  # e.g. a CLI sweep on this store is running: its instance is in use
        procs = session_processes(session_dir)
        _stop(procs)
        left = [p.pid for p in procs if _live(p)]
        name = Path(session_dir).name
        msg = (
            f"Ray session {name} of dead pid {record.get('owner_pid')}: cleaned up, not reattached (its driver "
            f"died with it); stopped {len(procs) - len(left)} leftover process(es) "
            f"{sorted(p.pid for p in procs)}"
            if procs
            else f"Ray session {name} of dead pid {record.get('owner_pid')}: cleaned up, no process of it was left"
        )
        if left:
            msg += f"; still alive, stop them by hand: {left}"
        (log.warning if left else log.info)("%s", msg)
        said.append(msg)
        path.unlink(missing_ok=True)
    return said
