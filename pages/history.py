"""History: SQL over every stored run (read-only, sandboxed), saved queries, the schema, charts and downloads."""

import streamlit as st

from ui import history, pending, state
from ui.auth import require_token
from ui.errors import shown
from ui.text import plain

require_token()  # a page opened directly (deep link) is guarded too, not only through app.py

st.title("History")
pending.banner()  # runs waiting to be stored, and who holds the store
st.caption("Query the whole store in SQL. Only one read-only statement runs; nothing you type can change the store.")

with shown("Could not read the store"):
    for w in state.bind("history", history.SPEC):
        st.warning(plain(w))  # they quote the URL: text, never Markdown
    history.saved()
    history.console()
    history.schema()
    history.result(st.session_state.get("history.sql") or "")
    state.publish("history", history.SPEC)
