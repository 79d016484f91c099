"""The advisor panel: the best measured config for a workload and model, its speedup over sync with an
interval, the verdict, and a one-click sweep of the neighbours most worth trying next."""

from __future__ import annotations

import tomllib
from typing import Any

import streamlit as st

from engine import api
from ui.cache import cached
from ui.errors import shown

__all__ = ["panel"]


def panel(options: dict[str, Any]) -> None:
    workloads, models = options.get("workload") or [], options.get("model") or []
    with st.expander("Advisor: what is fastest here, and what to try next", expanded=False):
        if not workloads or not models:
            st.info("No finished runs yet: queue a sweep on the Launch page, or `python -m engine sweep "
                    "examples/loaders.toml`.")
            return
        cols = st.columns(3)
        workload = cols[0].selectbox("Workload", workloads, key="advisor.workload")
        model = cols[1].selectbox("Model", models, key="advisor.model")
        host = cols[2].selectbox("Host", ["this", "any"], key="advisor.host",
                                 help="this: runs measured on this machine only")
        with shown("The advisor could not read the store"):
            advice = cached("advise", workload, model, host=host)  # once per store version, not per rerun
            st.code(advice.render(), language=None)
            if advice.warning:
                st.warning(advice.warning)
            if advice.suggestions and st.button("Queue the suggested sweep", key="advisor.queue"):
                sweep = api.SweepConfig.from_dict(tomllib.loads(advice.next_sweep_toml()))
                jobs = api.submit_sweep(sweep)
                api.ensure_worker()
                st.success(f"Queued {len(jobs)} runs; watch them on the Launch page.")
