"""Runs: every stored run in a searchable, sortable table; one run in detail (?run=<id>); 2–4 runs
side by side (?compare=a,b); tags, notes, soft delete and purge."""

import streamlit as st

from ui import pending, run_detail, runs, state
from ui.auth import require_token
from ui.errors import shown
from ui.text import plain

require_token()  # a page opened directly (deep link) is guarded too, not only through app.py

st.title("Runs")
pending.banner()  # runs waiting to be stored, and who holds the store

with shown("Could not read the store"):
    for w in state.bind("runs", runs.SPEC):
        st.warning(plain(w))  # they quote the URL: text, never Markdown
    ss = st.session_state
    if ss.get("runs.compare"):
        picked = run_detail.check_ids(ss["runs.compare"], lo=2, hi=4)
        if picked:
            run_detail.compare(picked)
        st.divider()
    elif ss.get("runs.run"):
        picked = run_detail.check_ids(ss["runs.run"])
        if picked:
            run_detail.detail(picked[0])
        st.divider()

    selected = runs.table()
    runs.open_picked(selected)
    runs.actions(selected)
    state.publish("runs", runs.SPEC)
