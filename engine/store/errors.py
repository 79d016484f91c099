"""The store's errors. Each message says what happened and what the user can do about it."""

from __future__ import annotations

__all__ = ["StoreBusy", "StoreCorrupt", "StoreError", "StoreHeld", "StoreVersionError"]


class StoreError(RuntimeError):
    """Base class: any problem opening or using the DuckDB store."""


class StoreBusy(StoreError):
    """Another process held the store (or its lock) past the timeout. The message names the holder."""


class StoreHeld(StoreBusy):
    """A program outside LoaderLab (a user's DuckDB shell or notebook) holds the file. `holder`: 'pid 1234 (python3)'.

    Raised after `outside_wait_s`; deferrable work (ingest) leaves the RunLog for the next command that can write.
    """

    def __init__(self, message: str, holder: str | None = None):
        super().__init__(message)
        self.holder = holder


class StoreCorrupt(StoreError):
    """The file is not a readable DuckDB database. It is left untouched; the message says how to recover."""


class StoreVersionError(StoreError):
    """The file was written by a newer LoaderLab schema than this code knows."""
