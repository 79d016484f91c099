"""Streamlit helpers shared by the dashboard's pages: cached store reads, URL state and share links,
error display, and each page's widgets. engine/ never imports this package; pages and app.py do.

Importing this package once per server process also makes sure app.py is the router (see below).
"""

from __future__ import annotations


def _route_through_app() -> None:
    """NOTE: with a pages/ folder beside app.py, Streamlit starts each server process in its old
    "pages directory" mode: a deep link opened first (a shared /explore?view=... after a restart) runs
    pages/explore.py alone, without app.py's st.navigation, page config and sidebar, until some session
    has run st.navigation. Every page imports ui, so the first import in a process leaves that mode
    and reruns, and the rerun goes through app.py. Tests (AppTest) always start at app.py: left alone."""
    from streamlit import config
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    if (
        PagesManager.uses_pages_directory
        and get_script_run_ctx() is not None
        and not config.get_option("global.appTest")
    ):
        import streamlit as st

        PagesManager.uses_pages_directory = False
        st.rerun()


_route_through_app()
