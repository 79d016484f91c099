"""The Launch page's jobs panel: a fragment that refreshes every 2 s.

The queue is read once per refresh as groups (engine.jobs.job_groups): a sweep's jobs are one group, a lone run
or a Ray sweep is one. The cards and the table both draw those groups, so they never disagree. An active group
gets a card: a run with its epochs, ETA, growing chart (from its RunLog), Cancel and a link to its page; a sweep
with n of N runs, an ETA that says what it rests on, and Cancel all; a group that has ended keeps its card
(among the newest): a sweep with "Open in Explore", filtered to its runs; a run (cancelled, say) with its status and
the link to its page, where its kept epochs are. Links open in the same tab (st.page_link).

    jobs_panel()
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from engine import api
from ui.errors import shown
from ui.live import duration_text
from ui.text import plain
from ui.words import MISSING, plural

__all__ = ["REFRESH_S", "explore_params", "jobs_panel"]

REFRESH_S = 2.0
MAX_CARDS = 5  # groups shown as cards; the table lists them all
_RECENT_CARDS = 2  # ended groups among the newest keep their card: a sweep's "Open in Explore", a run's link
_RUNS_PAGE, _EXPLORE_PAGE = "pages/runs.py", "pages/explore.py"


def _cancel(job_ids: list[str]) -> None:
    """Button callback: runs before the rerun, so the card already shows the new status."""
    try:
        api.cancel_jobs(job_ids)
    except Exception as e:  # noqa: BLE001 - shown by jobs_panel on this rerun
        st.session_state["launch.cancel_error"] = f"Could not cancel: {plain(e)}"


def explore_params(group: Any) -> dict[str, str]:
    """Explore's URL parameters for a sweep's runs: its own sweep when Explore filters by sweep, else its pipeline
    (workload and model); x and colour are its first two axes."""
    first, varied = group.config(), group.varied()
    params = (
        {"sweep_id": group.key}
        if "sweep_id" in api.EXPLORE_FILTERS
        else {k: str(first[k]) for k in ("workload", "model") if k not in varied}
    )
    axes = [a for a in varied if a in api.explore_axes()]
    params.update(dict(zip(("x", "color"), axes)))
    return params


def _run_card(group: Any) -> None:
    job = group.jobs[0]
    p = api.job_progress(job["job_id"], row=job)  # the row this refresh read: card and table agree
    state = "cancelling" if p["cancel_requested"] else group.status
    st.markdown(f"**{plain(state)}** · {plain(group.label)}")
    if p["kind"] == api.RAY_SWEEP:
        if group.status == api.RunStatus.RUNNING:
            counts = ", ".join(f"{n} {s}" for s, n in sorted(p["run_counts"].items()))
            st.progress(
                min(1.0, p["runs_done"] / max(1, p["runs_total"])),
                text=f"{p['runs_done']}/{plural(p['runs_total'], 'run')} landed"
                f"{f' ({counts})' if counts else ''} · ETA {duration_text(p['eta_s'])}",
            )
        st.caption(f"sweep {plain(p['sweep_id'])}")
    elif group.status == api.RunStatus.RUNNING:
        st.progress(
            min(1.0, p["epochs_done"] / max(1, p["epochs_total"])),
            text=f"epoch {p['epochs_done']} of {p['epochs_total']} · ETA {duration_text(p['eta_s'])}",
        )
        if p["epochs"]:
            st.plotly_chart(
                api.epoch_chart(pd.DataFrame(p["epochs"]), compact=True), key=f"launch.chart.{job['job_id']}"
            )
    # NOTE: a horizontal container sizes each to its content and wraps: columns cut the button to "C.." (issue 28)
    row = st.container(horizontal=True, vertical_alignment="center")
    if group.active_ids:
        row.button(
            "Cancel",
            key=f"launch.cancel.{job['job_id']}",
            disabled=p["cancel_requested"],
            on_click=_cancel,
            args=([job["job_id"]],),
        )
    if job.get("run_id"):
        row.page_link(
            _RUNS_PAGE,
            label=f"run {job['run_id']}",
            query_params={"run": job["run_id"]},
            icon=":material/open_in_browser:",
        )
    if group.status == api.RunStatus.CANCELLED:
        st.caption(
            "Cancelled: its finished epochs are kept, on its run page."
            if job.get("run_id")
            else "Cancelled before it started: nothing ran."
        )


def _sweep_card(group: Any) -> None:
    counts = group.counts
    st.markdown(f"**{plain(group.status)}** · {plain(group.label)}")
    said = ", ".join(f"{counts[s]} {s}" for s in api.RunStatus if counts.get(s))
    eta = f" · ETA {duration_text(group.eta_s)} ({plain(group.eta_basis)})" if group.active_ids else ""
    st.progress(
        group.ended / max(1, group.total), text=f"{group.ended} of {plural(group.total, 'run')} ended ({said}){eta}"
    )
    st.caption(f"sweep {plain(group.key)}")
    if group.active_ids:
        st.button(
            "Cancel all",
            key=f"launch.cancel_all.{group.key}",
            on_click=_cancel,
            args=(group.active_ids,),
            help="cancels its queued runs, then the running one (its finished epochs are kept)",
        )
    elif counts.get(api.RunStatus.DONE):
        st.page_link(
            _EXPLORE_PAGE, label="Open in Explore", query_params=explore_params(group), icon=":material/insights:"
        )


def _table(groups: list[Any]) -> pd.DataFrame:
    """One row per group, from the same groups the cards draw."""
    return pd.DataFrame(
        {
            "status": [g.status for g in groups],
            "what": [g.label for g in groups],
            "runs": [f"{g.ended} of {g.total}" if g.kind == "sweep" else "" for g in groups],
            "run": [f"/runs?run={g.run_ids[0]}" if g.kind == "run" and g.run_ids else None for g in groups],
            "queued at (UTC)": [g.created_at for g in groups],
            "error": [next((j["error"] for j in g.jobs if j.get("error")), "") for g in groups],
        }
    )


@st.fragment(run_every=REFRESH_S)
def jobs_panel(limit: int = 30) -> None:
    """The queue as groups, newest first: cards for the active ones (and recently ended sweeps), then a table."""
    if "launch.cancel_error" in st.session_state:
        st.error(st.session_state.pop("launch.cancel_error"))
    with shown("Could not read the job queue"):
        groups = api.job_groups(limit=limit)
        if not groups:
            st.caption("No jobs yet: queue a run or a sweep.")
            return
        if not api.worker_alive() and any(g.status == api.RunStatus.QUEUED for g in groups):
            st.warning("No job worker is running, so queued jobs wait. Start one: `python -m engine worker`.")
        active = sorted((g for g in groups if g.active_ids), key=lambda g: g.status != api.RunStatus.RUNNING)
        recent = [g for g in groups[:_RECENT_CARDS] if not g.active_ids]
        for group in (active + recent)[:MAX_CARDS]:
            with st.container(border=True, key=f"launch.card.{group.key}"):
                (_sweep_card if group.kind == "sweep" else _run_card)(group)
        st.dataframe(
            _table(groups),
            hide_index=True,
            key="launch.jobs",
            placeholder=MISSING,
            column_config={
                "what": st.column_config.TextColumn("what", width="large"),
                "run": st.column_config.LinkColumn("run", display_text=r"/runs\?run=(.*)"),
                "queued at (UTC)": st.column_config.DatetimeColumn("queued at (UTC)", format="YYYY-MM-DD HH:mm:ss"),
            },
        )
