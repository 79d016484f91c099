"""The banner over every page when finished runs wait to be stored: "N runs waiting to be stored (the
store is held by pid …)". Every page calls banner() under its title.

Runs go ahead while a program outside LoaderLab (a user's duckdb shell) holds the store; their
RunLogs wait on disk and the next writer stores them: a CLI command, the job worker, or the banner itself
once the holder has closed the store. Without this banner those runs would just be
missing from the charts, with no word why.
"""

from __future__ import annotations

import logging
from typing import Any

import streamlit as st

from engine import api
from ui.text import plain

__all__ = ["banner", "message"]

log = logging.getLogger(__name__)


@st.cache_data(ttl=5, show_spinner=False)  # NOTE: it stats every run folder; 20 sessions share one look per 5 s
def _summary(path: str) -> dict[str, Any]:
    return dict(api.pending_summary(path))


def message(summary: dict[str, Any]) -> str | None:
    """The banner's text for a pending_summary(), or None when nothing waits."""
    count = int(summary.get("count") or 0)
    if count <= 0:
        return None
    runs = "1 run" if count == 1 else f"{count} runs"
    holder = summary.get("holder")
    if holder:
        return (
            f"{runs} waiting to be stored (the store is held by {holder}). Close that program's connection "
            "to the store; nothing is lost meanwhile."
        )
    return f"{runs} waiting to be stored (the next write stores them)."


def banner() -> None:
    """st.warning with message(); silent when nothing waits or the summary cannot be read. Runs that wait while
    nobody holds the store any more are stored here and now, as every CLI command does."""
    try:
        path = str(api.db_path())
        summary = _summary(path)
        if summary.get("count") and not summary.get("holder"):
            summary = _store_waiting(path, summary)
        text = message(summary)
    except Exception:  # noqa: BLE001 - a hint must never stop a page from rendering
        log.debug("pending summary unavailable", exc_info=True)
        return
    if text:
        st.warning(plain(text), icon=":material/hourglass_top:")  # the holder's command line is text


def _store_waiting(path: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Ingest the waiting RunLogs (idempotent: sessions that race store each run once); the new summary."""
    try:
        stored = api.ingest_pending(db=path, outside_wait_s=0.5)
    except Exception:  # noqa: BLE001 - held again, or unreadable: the banner says they wait, and they do
        log.info("waiting runs not stored yet", exc_info=True)
        return summary
    if stored:
        log.info("stored %d waiting run(s)", len(stored))
    _summary.clear()
    return _summary(path)
