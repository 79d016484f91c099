"""The advisor panel: the best measured config for a workload and model, its speedup over sync (or over the
user's own setup, said once in "Your current setup") with an interval, the verdict, and one-click sweeps: the
neighbours most worth trying next, and the confirmation of the best against your setup.

It follows Explore: the workloads and models it offers are the pipelines Explore ranks, the headline's first by
default, and every filter (host, tag, dates) narrows the runs it ranks as it narrows Explore's, so the two name the
same config. Its words are text that wraps (never a code block cut off on the right), and a config with
too few runs for an interval is "fastest so far, unproven", never "best" (engine.advice.advisor.best_word)."""

from __future__ import annotations

import tomllib
from typing import Any

import pandas as pd
import streamlit as st

from engine import api
from ui.cache import cached
from ui.errors import shown
from ui.text import plain

__all__ = ["panel"]


def _pick(label: str, choices: list[str], key: str, col: Any, follow: bool) -> str:
    if follow or st.session_state.get(key) not in choices:
        st.session_state[key] = choices[0]  # Explore's view changed: follow its headline
    return col.selectbox(label, choices, key=key)


def panel(options: dict[str, Any], filters: dict[str, Any] | None = None, ranking: pd.DataFrame | None = None) -> None:
    """The panel under Explore. `filters`: Explore's (lists, empty for all); `ranking`: Explore's (api.explore_ranking
    under those filters), whose pipelines are the ones offered, the headline's first by default."""
    filters = filters or {}
    pipelines = (
        [] if ranking is None or ranking.empty else list(dict.fromkeys(zip(ranking["workload"], ranking["model"])))
    )
    with st.expander("Advisor: what is fastest here, and what to try next", expanded=True):
        if not pipelines:
            st.info("No finished runs in view: queue a sweep on the Launch page, or widen Explore's filters.")
            return
        follow = st.session_state.get("_advisor.view") != pipelines
        st.session_state["_advisor.view"] = pipelines
        cols = st.columns(2)
        workload = _pick("Workload", list(dict.fromkeys(w for w, _ in pipelines)), "advisor.workload", cols[0], follow)
        model = _pick("Model", [m for w, m in pipelines if w == workload], "advisor.model", cols[1], follow)
        typed = st.text_input(
            "Your current setup (optional)",
            key="advisor.baseline",
            placeholder=api.BASELINE_EXAMPLE,
            help="What your DataLoader uses today, as FIELD=VALUE pairs of loader settings: the "
            "best is compared with it instead of sync",
        )
        cap_text = st.text_input(
            "Memory cap (optional)",
            key="advisor.max_memory",
            placeholder="8G",
            help="no config whose runs peaked above this (PSS of the whole process tree) is the best",
        )
        baseline = cap = None
        with shown("Your current setup"):
            baseline = api.parse_baseline(typed)  # only loader settings pass: never a module path
        with shown("Memory cap"):
            cap = api.parse_size(cap_text) or 0
        if baseline is None or cap is None:
            return
        with shown("The advisor could not read the store"):
            # once per store version, not per rerun
            tags = list(filters.get("tag") or []) or None
            # NOTE: host "any" with Explore's own filters: the runs Explore's headline ranks, so both name one config
            same = {k: v for k, v in filters.items() if k not in ("workload", "model") and v}
            advice = cached(
                api.advise,
                workload,
                model,
                host="any",
                baseline=baseline or None,
                max_memory=cap or None,
                filters=same or None,
            )
            if tags:
                st.caption(f"Runs tagged {plain(', '.join(tags))} only, as Explore's tag filter.")
            # NOTE: one Markdown paragraph of plain() text: it wraps, and a tag or a note stays text
            st.markdown(plain(api.render_advice(advice, cli=False)))
            if advice.base_config:  # the answer as code, with st.code's copy button
                st.code(api.snippet({**advice.base_config, **advice.best}, "the best measured here"), language="python")
            if advice.warning:
                st.warning(plain(advice.warning))
            if advice.suggestions and st.button("Queue the suggested sweep", key="advisor.queue"):
                sweep = api.SweepConfig.from_dict(tomllib.loads(advice.next_sweep_toml()))
                jobs = api.submit_sweep(sweep, origin="browser")  # a stored plugin spec: only if registered
                api.ensure_worker()
                st.success(f"Queued {len(jobs)} runs; watch them on the Launch page.")
            if advice.needs_confirmation and st.button(
                f"Queue the confirmation: your setup vs the best, {api.CONFIRM_REPEATS} runs each",
                key="advisor.confirm",
            ):
                jobs = api.submit_sweep(
                    api.SweepConfig.from_dict(tomllib.loads(advice.confirm_sweep_toml())), origin="browser"
                )
                api.ensure_worker()
                st.success(f"Queued {len(jobs)} runs; when they are done the advisor shows the interval.")
