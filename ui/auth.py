"""Access token for a dashboard served beyond this machine (`make share`).

With $LOADERLAB_TOKEN set, every page and every share link needs the token first: in the URL once
(`?token=...`, then dropped from the address bar) or typed into the prompt. Until then the script
stops before any page, store read or share link runs. Without $LOADERLAB_TOKEN (the default,
bound to 127.0.0.1) nothing is asked.
"""

from __future__ import annotations

import hmac
import os

import streamlit as st

__all__ = ["require_token"]


def _ok(candidate: str | None, token: str) -> bool:
    return bool(candidate) and hmac.compare_digest(str(candidate).encode(), token.encode())


def require_token() -> None:
    token = os.environ.get("LOADERLAB_TOKEN", "")
    if not token or st.session_state.get("_loaderlab_authed"):
        return
    given = st.query_params.get("token")
    if _ok(given, token):
        st.session_state["_loaderlab_authed"] = True
        del st.query_params["token"]  # keep the token out of share links and browser history
        return
    st.title("LoaderLab")
    st.info("This dashboard is shared with an access token. Ask whoever runs it for the token.")
    typed = st.text_input("Access token", type="password", key="_loaderlab_token")
    if typed and _ok(typed, token):
        st.session_state["_loaderlab_authed"] = True
        st.rerun()
    if typed or given:
        st.error("That token is not right.")
    st.stop()
