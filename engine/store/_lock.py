"""The sidecar locks beside the store: shared for readers, exclusive for writers, waited on with backoff.

Two files, so that a steady stream of readers cannot starve a writer:
  `<db>.lock.queue`  writers hold it exclusively for their whole operation; readers take it shared only
                     for the instant of entering, so a waiting writer stops new readers from entering;
  `<db>.lock`        readers hold it shared, writers exclusively (with their pid written in it).
NOTE: flock (not fcntl/lockf) because flock locks belong to the open file, not the process: two threads
of one process (Streamlit) lock independently, and closing one descriptor never drops another's lock.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

from engine.errors import StoreBusy

__all__ = ["SidecarLock", "backoff", "proc_lock_holders"]

log = logging.getLogger(__name__)


def backoff(deadline: float, cap: float = 0.5):
    """Yield once per attempt: at once, then after sleeps of 5 ms doubling to `cap`, until the deadline."""
    delay = 0.005
    while True:
        yield
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(delay, left))
        delay = min(delay * 2, cap)


class SidecarLock:
    """`with SidecarLock(db_path, exclusive=True, deadline=...)`: held for the body, released on exit."""

    def __init__(self, db: Path, *, exclusive: bool, deadline: float):
        self.path = db.with_name(db.name + ".lock")
        self.queue_path = db.with_name(db.name + ".lock.queue")
        self.exclusive = exclusive
        self.deadline = deadline
        self._fds: list[int] = []

    def __enter__(self) -> "SidecarLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
        try:
            queue = self._take(self.queue_path, mode)
            main = self._take(self.path, mode)
        except BaseException:
            self.close()
            raise
        if not self.exclusive:
            self._release(queue)  # entered: let a writer queue up behind the readers inside
        else:
            os.ftruncate(main, 0)
            os.pwrite(main, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        while self._fds:
            self._release(self._fds[-1])

    def _release(self, fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        self._fds.remove(fd)

    def _take(self, path: Path, mode: int) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        self._fds.append(fd)
        for _ in backoff(self.deadline, cap=0.1):  # short cap: no writer sleeps long past its turn
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                continue
        holders = _holders(fd) or _recorded_pid(self.path)
        os.close(fd)
        self._fds.remove(fd)
        raise StoreBusy(self._busy_message(holders))

    def _busy_message(self, holders: list[int]) -> str:
        want = "write to" if self.exclusive else "read"
        if os.getpid() in holders:
            who = f"this process (pid {os.getpid()}) already holds it: a connect() nested inside another"
        elif holders:
            who = "LoaderLab process " + ", ".join(f"pid {p}" for p in holders) + " holds it"
        else:
            who = "another LoaderLab process holds it"
        return (
            f"could not {want} the store {self.path.with_suffix('')}: {who} ({self.path}). "
            "Wait for that operation to finish or stop that process, then retry."
        )


def _holders(fd: int) -> list[int]:
    """Pids holding a flock on this file; [] where /proc/locks is unavailable."""
    return proc_lock_holders(os.fstat(fd).st_ino, "FLOCK")


def proc_lock_holders(inode: int, kind: str) -> list[int]:
    """Pids holding a lock of this kind ("FLOCK": ours, "POSIX": DuckDB's) on the file with this inode, from
    /proc/locks (Linux); [] where that is unavailable."""
    suffix = f":{inode}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return []
    pids = set()
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 6 or parts[1] != kind:
            continue  # "->" marks a waiter, not a holder
        if parts[5].endswith(suffix) and parts[4].isdigit():
            pids.add(int(parts[4]))
    return sorted(pids)


def _recorded_pid(path: Path) -> list[int]:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return []
    return [int(text)] if text.isdigit() else []
