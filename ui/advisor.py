"""The advisor panel: the best measured config for a workload and model, its speedup over sync (or over the
user's own setup, said once in "Your current setup") with an interval, the verdict, and one-click sweeps: the
neighbours most worth trying next, and the confirmation of the best against your setup.

It follows Explore's filters: the workloads and models it offers are those in view, and the tag filter narrows
the runs it ranks. Its words are text that wraps (never a code block cut off on the right), and a config with
too few runs for an interval is "fastest so far, unproven", never "best" (engine.advice.advisor.best_word)."""

from __future__ import annotations

import tomllib
from typing import Any

import streamlit as st

from engine import api
from ui.cache import cached
from ui.errors import shown
from ui.text import plain

__all__ = ["panel"]


def _pick(label: str, choices: list[str], key: str, col: Any) -> str:
    if st.session_state.get(key) not in choices:
        st.session_state[key] = choices[0]  # Explore's filter changed: follow it
    return col.selectbox(label, choices, key=key)


def panel(options: dict[str, Any], filters: dict[str, Any] | None = None) -> None:
    """The panel under Explore; `filters`: Explore's (workload, model and tag lists, empty for all)."""
    filters = filters or {}
    workloads = list(filters.get("workload") or options.get("workload") or [])
    models = list(filters.get("model") or options.get("model") or [])
    with st.expander("Advisor: what is fastest here, and what to try next", expanded=True):
        if not workloads or not models:
            st.info("No finished runs yet: queue a sweep on the Launch page.")
            return
        cols = st.columns(3)
        workload = _pick("Workload", workloads, "advisor.workload", cols[0])
        model = _pick("Model", models, "advisor.model", cols[1])
        host = cols[2].selectbox("Host", ["this", "any"], key="advisor.host",
                                 help="this: runs measured on this machine only")
        typed = st.text_input("Your current setup (optional)", key="advisor.baseline", placeholder=api.BASELINE_EXAMPLE,
                              help="What your DataLoader uses today, as FIELD=VALUE pairs of loader settings: the "
                                   "best is compared with it instead of sync")
        cap_text = st.text_input("Memory cap (optional)", key="advisor.max_memory", placeholder="8G",
                                 help="no config whose runs peaked above this (PSS of the whole process tree) is the "
                                      "best")
        baseline = cap = None
        with shown("Your current setup"):
            baseline = api.parse_baseline(typed)   # only loader settings pass: never a module path
        with shown("Memory cap"):
            cap = api.parse_size(cap_text) or 0
        if baseline is None or cap is None:
            return
        with shown("The advisor could not read the store"):
            # once per store version, not per rerun
            tags = list(filters.get("tag") or []) or None
            advice = cached("advise", workload, model, host=host, baseline=baseline or None, max_memory=cap or None,
                            tags=tags)
            if tags:
                st.caption(f"Runs tagged {plain(', '.join(tags))} only, as Explore's tag filter.")
            # NOTE: one Markdown paragraph of plain() text: it wraps, and a tag or a note stays text
            st.markdown(plain(api.render_advice(advice, cli=False)))
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
