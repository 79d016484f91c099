"""Explore: epoch time, samples/s or data-wait share against any setting, with filters and share links.

A script's tune (`engine tune -- python train.py`) is chosen under "Script tunes" (?tune=<id>).
Everything on the page is in the URL (ui.state), so a link reproduces the chart; "Copy share link"
stores that state and shows a short `/explore?view=<id>` link.
"""

import streamlit as st

from engine import api
from ui import advisor, explore, first_visit, pending, state, tunes
from ui.auth import require_token
from ui.cache import cached
from ui.errors import shown
from ui.text import plain

require_token()  # a page opened directly (deep link) is guarded too, not only through app.py

st.title("Explore")
pending.banner()  # runs waiting to be stored, and who holds the store
options: dict = {}
args: dict = {}
ranking = None
with shown("Could not read the demo"):
    first_visit.first_steps()

with shown("Could not read the store"):
    options = cached(api.explore_filter_options)
    script_tunes = cached(api.tune_answers)  # newest first
    spec = explore.spec(options, [t["tune_id"] for t in script_tunes])
    saved = state.restore_view("explore")
    warnings = state.bind("explore", spec, params=saved)
    for w in warnings:
        st.warning(plain(w))  # they quote the URL: text, never Markdown

    with shown("Could not show the script tunes"):
        tunes.section(script_tunes)  # a tune of the user's own script: its answer and its ranked trials
    explore.controls(spec)
    args = explore.state()
    with shown("Could not rank the configs"):
        ranking = explore.answer(args)  # the fastest config first: what a visitor came for
    with shown("Could not draw the chart"):
        explore.chart(args)
    with shown("Could not draw the predictions"):
        explore.predictions(args)
    explore.selected_runs()
    params = state.publish("explore", spec)

    if st.button("Copy share link", help="Save this view (settings, filters, selected runs) and get a short link"):
        st.session_state["explore.link"] = (state.share_link("explore", params), params)
    link, linked = st.session_state.get("explore.link", (None, None))
    if link and linked == params:
        st.code(link, language=None)
        st.caption("Anyone with this link and access to this dashboard sees the same chart.")

advisor.panel(options, args.get("filters"), ranking)
