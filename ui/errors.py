"""Show failures as a clear st.error instead of a traceback, and keep the rest of the page alive.

with shown("Could not read the store"):
    df = cached(api.search_runs, "")
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import streamlit as st

from ui.text import plain

__all__ = ["shown"]

log = logging.getLogger(__name__)


@contextmanager
def shown(what: str) -> Iterator[None]:
    """Run a block; an exception becomes `st.error("<what>: <message>")` (the traceback goes to the log). The
    message is shown as text: it often quotes what the user typed or the URL said.

    Streamlit's own rerun/stop signals are BaseExceptions and pass through untouched."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - the user sees the message; the log keeps the traceback
        log.warning("%s", what, exc_info=True)
        st.error(f"{what}: {plain(e)}")
