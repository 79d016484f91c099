"""The advisor panel: the best measured config for a workload and model, its speedup over sync (or over the
user's own setup, said once in "Your current setup") with an interval, the verdict, and one-click sweeps: the
neighbours most worth trying next, and the confirmation of the best against your setup."""

from __future__ import annotations

import tomllib
from typing import Any

import streamlit as st

from engine import api
from ui.cache import cached
from ui.errors import shown
from ui.text import plain

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
        typed = st.text_input("Your current setup (optional)", key="advisor.baseline", placeholder=api.BASELINE_EXAMPLE,
                              help="What your DataLoader uses today, as FIELD=VALUE pairs of loader settings: the "
                                   "best is compared with it instead of sync (CLI: --baseline)")
        cap_text = st.text_input("Memory cap (optional)", key="advisor.max_memory", placeholder="8G",
                                 help="no config whose runs peaked above this (PSS of the whole process tree) is the "
                                      "best (CLI: --max-memory)")
        baseline = cap = None
        with shown("Your current setup"):
            baseline = api.parse_baseline(typed)   # only loader settings pass: never a module path
        with shown("Memory cap"):
            cap = api.parse_size(cap_text) or 0
        if baseline is None or cap is None:
            return
        with shown("The advisor could not read the store"):
            # once per store version, not per rerun
            advice = cached("advise", workload, model, host=host, baseline=baseline or None, max_memory=cap or None)
            st.code(api.render_advice(advice), language=None)
            if advice.base_config:  # the answer as code, with st.code's copy button
                st.code(api.snippet({**advice.base_config, **advice.best}, "the best measured here"),
                        language="python")
            if advice.warning:
                st.warning(plain(advice.warning))
            if advice.suggestions and st.button("Queue the suggested sweep", key="advisor.queue"):
                sweep = api.SweepConfig.from_dict(tomllib.loads(advice.next_sweep_toml()))
                jobs = api.submit_sweep(sweep, origin="browser")  # a stored plugin spec: only if registered
                api.ensure_worker()
                st.success(f"Queued {len(jobs)} runs; watch them on the Launch page.")
            if advice.needs_confirmation and st.button("Queue the confirmation: your setup vs the best, "
                                                       f"{api.CONFIRM_REPEATS} runs each", key="advisor.confirm"):
                jobs = api.submit_sweep(api.SweepConfig.from_dict(tomllib.loads(advice.confirm_sweep_toml())),
                                        origin="browser")
                api.ensure_worker()
                st.success(f"Queued {len(jobs)} runs; when they are done the advisor shows the interval.")
