"""A run of the user's own loop (source 'observed') on its run page: what was observed, what the lab's fields could
not hold, and what the lab would try next (engine/advice/_baseline_run.py)."""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from engine import api
from ui.text import plain

__all__ = ["observed"]


def observed(run: dict[str, Any]) -> None:
    """Nothing for the lab's own runs."""
    if run.get("source") != "observed":
        return
    try:
        settings = json.loads(run.get("observed_settings") or "{}")
    except ValueError:
        settings = {}
    st.info(plain(f"Observed: your own training loop, the loader made at {run.get('observed_stream')}. It never pools "
                  f"with the lab's runs of the same settings (loader={run.get('loader')}, workers={run.get('workers')}"
                  f", batch_size={run.get('batch_size')}): the loops differ."))
    if settings.get("unmapped"):
        st.caption(plain("Kept as read, which the lab's runs do not reproduce: " + "; ".join(settings["unmapped"])))
    st.caption("What the lab would try next: predict ranks every setting for your dataset and model beside this "
               "observed epoch, and tune measures the best against it with a 95% interval. Name your dataset and "
               "model as module:callable:")
    st.code(api.observed_next_steps(run), language=None)
