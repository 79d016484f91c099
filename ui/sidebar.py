"""The sidebar on every page: which store, and how many runs it holds, kept current while jobs run.

The count is a fragment that refreshes on its own every REFRESH_S, so it moves with the Launch page's sweep card
(which refreshes every 2 s) instead of waiting for the next click; the read is cached on the store's data version
(ui.cache), so a refresh that finds nothing new costs one stat of a sidecar file.

    with st.sidebar:
        store_status()
"""

from __future__ import annotations

import streamlit as st

from engine import api
from ui.cache import cached
from ui.text import plain
from ui.words import plural

__all__ = ["REFRESH_S", "store_status"]

REFRESH_S = 3.0


@st.fragment(run_every=REFRESH_S)
def store_status() -> None:
    st.caption(f"Store: {plain(api.db_path())}")
    try:
        counts = cached(api.count_runs)
        st.caption(f"{plural(sum(counts.values()), 'run')} ({counts.get(api.RunStatus.DONE, 0)} done)")
    except Exception as e:  # noqa: BLE001 - the sidebar must never stop a page from rendering
        st.caption(f"Store unreadable: {plain(e)}")
