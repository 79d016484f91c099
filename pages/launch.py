"""Launch: pick a preset or fill the form generated from RunConfig, queue a run or a sweep, watch jobs live.

Jobs go into the store's queue and a worker process runs them (started here if none is alive), so
closing the tab or restarting the dashboard does not stop them. The target is this machine or a Ray
cluster (its address under the target once picked, default $LOADERLAB_RAY_ADDRESS; empty: a local Ray instance).
"""

import streamlit as st

from engine import api
from ui import jobs_panel, live, pending
from ui.auth import require_token
from ui.errors import shown
from ui.form import preset_picker, run_form, sweep_builder

require_token()  # a page opened directly (deep link) is guarded too, not only through app.py

st.title("Launch")
pending.banner()  # runs waiting to be stored, and who holds the store
with shown("Could not start the job worker"):
    api.ensure_worker()

form_col, jobs_col = st.columns([3, 2], gap="large")
with form_col:
    target = live.target_picker()
    preset_picker("run")
    form = run_form("run")
    live.queue_run(form, target)
    st.subheader("Sweep")
    st.caption("Vary any fields of the run above; each distinct config runs Repeats times, in a seeded random order.")
    live.queue_sweep(sweep_builder("sweep", form), target, oversubscribe=form.oversubscribe)
with jobs_col:
    st.subheader("Jobs")
    jobs_panel.jobs_panel()
