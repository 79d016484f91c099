"""The errors a user sees, in one module that imports nothing from the engine, so every module can raise them.

Each message says what happened and what the user can do about it. The CLI prints them on one line with
exit status 2; the pages show them with st.error; ConfigError names the field, so forms show it inline.

    raise ConfigError("workers", "loader 'threads' needs workers >= 1")
"""

from __future__ import annotations

import errno
import re

__all__ = [
    "ConfigError",
    "QueryRejected",
    "StoreBusy",
    "StoreCorrupt",
    "StoreError",
    "StoreHeld",
    "StoreVersionError",
    "UsageError",
    "disk_full",
    "printable",
    "user_error",
]

# engine/loaders/processes.py's message for a worker that died under the run
_WORKER_DEATH = re.compile(
    r"processes loader: worker \d+ \(pid \d+\) (was killed by signal \d+( \(\w+\))?|"
    r"exited with status -?\d+|died)"
)
_ORIGINAL = "Original Traceback (most recent call last):"  # how torch's ExceptionWrapper quotes a worker's error


def printable(text: str) -> str:
    """User text may hold newlines or control characters: escape them so an error stays one line."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", str(text))


def disk_full(e: BaseException) -> str | None:
    """'disk full (writing <file>); ...' when `e` is a write that found no space (ENOSPC, or EDQUOT: over quota),
    else None. The reason a run failed is the disk, not the OSError of whichever write noticed it first."""
    if not isinstance(e, OSError) or e.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    where = f"writing {e.filename}" if e.filename else "writing a file"
    return f"disk full ({where}); free space on that disk and run again"


def user_error(e: BaseException) -> str:
    """What went wrong, as 'Type: message' on one line, for the CLI and the runs table (the traceback goes elsewhere).

    A loader worker's error reaches the run as torch's ExceptionWrapper re-raised it: "Caught ValueError in
    DataLoader worker process 0. Original Traceback (most recent call last): ..." with the worker's whole traceback
    in the message, nested once more for each hand-over (torchdata's thread pool, then our producer thread). The
    user's own error is the last exception of the innermost quoted traceback: that is the line shown.
    """
    full = disk_full(e)
    if full:
        return full
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    death = _WORKER_DEATH.search(text)
    if death:  # NOTE: a dead worker is the cause; what its death broke elsewhere (a queue's thread) is a symptom
        return (
            " ".join(text[death.start() : death.end()].split()) + "; check its memory use (the OOM killer sends "
            "SIGKILL), or what killed it"
        )
    if _ORIGINAL in text:
        text = _last_exception(text.rsplit(_ORIGINAL, 1)[1]) or text
    return " ".join(text.split())


def _last_exception(traceback_text: str) -> str | None:
    """The 'Type: message' lines that end a formatted traceback: what follows its last frame and that frame's code."""
    lines = traceback_text.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return None
    i = frames[-1] + 1
    while i < len(lines) and lines[i].startswith("    "):  # the frame's source line and its ^^^^ markers
        i += 1
    return "\n".join(lines[i:]).strip() or None


class ConfigError(ValueError):
    """Bad user input. `field` names the offending field so forms can show the error inline."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class UsageError(Exception):
    """Bad command-line usage: one line, exit status 2."""


class QueryRejected(ValueError):
    """The SQL was refused or failed; the message says why and what to write instead."""


class StoreError(RuntimeError):
    """Base class: any problem opening or using the DuckDB store."""


class StoreBusy(StoreError):
    """Another process held the store (or its lock) past the timeout. The message names the holder."""


class StoreHeld(StoreBusy):
    """A program outside LoaderLab (a user's DuckDB shell or notebook) holds the file. `holder`: 'pid 1234 (python3)'.

    Raised after `outside_wait_s`; deferrable work (ingest) leaves the RunLog for the next command that can write.
    """

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class StoreCorrupt(StoreError):
    """The file is not a readable DuckDB database. It is left untouched; the message says how to recover."""


class StoreVersionError(StoreError):
    """The file was written by a newer LoaderLab schema than this code knows."""
