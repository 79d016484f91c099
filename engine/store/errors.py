"""The store's errors. Each message says what happened and what the user can do about it."""

from __future__ import annotations

__all__ = ["StoreBusy", "StoreCorrupt", "StoreError", "StoreVersionError"]


class StoreError(RuntimeError):
    """Base class: any problem opening or using the DuckDB store."""


class StoreBusy(StoreError):
    """Another process held the store (or its lock) past the timeout. The message names the holder."""


class StoreCorrupt(StoreError):
    """The file is not a readable DuckDB database. It is left untouched; the message says how to recover."""


class StoreVersionError(StoreError):
    """The file was written by a newer LoaderLab schema than this code knows."""
