"""The launch page's target picker, queue buttons and live jobs panel (a fragment that refreshes every 2 s).

The target is "This machine" (one job per run, run one at a time by the worker) or "Ray cluster" (the
whole sweep, or the single run, as ONE job that the worker drives through the Ray executor). The Ray
address comes from $LOADERLAB_RAY_ADDRESS, overridable under Settings; empty means a local Ray instance.

Progress of a running job comes from its RunLog (engine.jobs.job_progress), not the store, so the
per-epoch chart (engine.analysis.charts.epoch_chart, compact) grows while the run is going; a Ray job's progress
is its runs landed in the store.
Each job with a run links to `/runs?run=<run_id>`.

    target = target_picker()                            # the "Target" radio and the "Settings" expander
    queue_run(form, target); queue_sweep(sweep, target)  # "Queue run" / "Queue sweep"
    jobs_panel()                                        # status, growing chart, ETA, Cancel per active job
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pandas as pd
import streamlit as st

from engine import api
from ui.errors import shown
from ui.text import plain

__all__ = ["REFRESH_S", "TARGETS", "Target", "duration_text", "jobs_panel", "queue_run", "queue_sweep", "target_picker"]

REFRESH_S = 2.0
MAX_CARDS = 5  # active jobs shown with progress and a Cancel button; the table lists the rest
TARGETS = ("This machine", "Ray cluster")


@dataclass
class Target:
    ray: bool = False
    address: str = ""  # the Ray address; "" is a local Ray instance

    @property
    def where(self) -> str:
        return f"the Ray cluster at {plain(self.address)}" if self.address else "a local Ray instance"


def target_picker() -> Target:
    """The "Target" radio and the "Settings" expander with the Ray address. Without Ray installed the radio
    is disabled on "This machine" (Streamlit cannot disable one option) with a caption on how to install it."""
    ss, available = st.session_state, api.ray_available()
    # NOTE: Streamlit forgets the state of widgets another page did not draw: restore them from shadows
    ss.setdefault("launch.ray_address", ss.get("launch._ray_address", api.default_ray_address()))
    ss.setdefault("launch.target", ss.get("launch._target", TARGETS[0]))
    if not available:
        ss["launch.target"] = TARGETS[0]
    address = str(ss["launch.ray_address"]).strip()
    ray_caption = Target(True, address).where if available else f"not installed: `{api.INSTALL_HINT}`"
    choice = st.radio("Target", TARGETS, key="launch.target", horizontal=True, disabled=not available,
                      captions=["one run at a time, here", ray_caption],
                      help="Ray: the sweep runs as one job, each run with its device (or CPU node) to itself")
    if not available:
        st.caption(f"Ray is not installed here, so only this machine can run jobs: `{api.INSTALL_HINT}`")
    with st.expander("Settings"):
        address = st.text_input("Ray address", key="launch.ray_address",
                                help=f"auto, host:port or ray://host:port; empty: a local Ray instance (127.0.0.1). "
                                     f"Default: ${api.RAY_ADDRESS_ENV}").strip()
    ss["launch._ray_address"], ss["launch._target"] = address, choice
    return Target(ray=choice == TARGETS[1], address=address)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def _remember(job_ids: list[str]) -> None:
    st.session_state["launch.queued"] = job_ids


def queue_run(form: Any, target: Target | None = None) -> None:
    """The "Queue run" button: queues the form's config; nothing is queued while the form shows an error."""
    if st.button("Queue run", type="primary", key="launch.queue_run"):
        if form.cfg is None:
            st.error(f"Nothing queued: fix **{plain(form.error.field)}** first ({plain(form.error.message)}).")
        else:
            with shown("Could not queue the run"):
                _remember([api.submit_ray_sweep(form.cfg, address=target.address, origin="browser")
                           if target and target.ray else api.submit(form.cfg, origin="browser")])


def queue_sweep(result: Any, target: Target | None = None) -> None:
    """The sweep summary (runs = distinct configs × repeats, estimated duration) and "Queue sweep"."""
    ray = target is not None and target.ray
    if result.sweep is not None:
        with shown("Could not estimate the duration"):
            est = api.estimate_duration([cfg for _, cfg in result.sweep.plan()])
            basis = (f"from {est['from_history']} similar past run(s)" if est["from_history"]
                     else "no similar past runs: a default per run")
            where = f" one run at a time · as one Ray job on {target.where}" if ray else ""
            st.markdown(f"**{result.n_runs} runs** = {result.n_configs} distinct configs × "
                        f"{result.sweep.repeats} repeats · about **{duration_text(est['seconds'])}** ({basis}){where}")
    if st.button("Queue sweep", key="launch.queue_sweep", disabled=result.sweep is None):
        with shown("Could not queue the sweep"):
            _remember([api.submit_ray_sweep(result.sweep, address=target.address, origin="browser")] if ray
                      else api.submit_sweep(result.sweep, origin="browser"))


def _cancel(job_id: str) -> None:
    """Button callback: runs before the rerun, so the card already shows the new status."""
    try:
        api.cancel(job_id)
    except Exception as e:  # noqa: BLE001 - shown by jobs_panel on this rerun
        st.session_state["launch.cancel_error"] = f"Could not cancel {plain(job_id)}: {plain(e)}"


def _job_card(job: pd.Series) -> None:
    job_id = job["job_id"]
    with st.container(border=True):
        p = api.job_progress(job_id)
        state = "cancelling" if p["cancel_requested"] else p["status"]
        head, button = st.columns([5, 1])
        runs = (f"sweep {plain(p['sweep_id'])}" if p["kind"] == api.RAY_SWEEP
                else f"run [{plain(p['run_id'])}](/runs?run={quote(str(p['run_id']), safe='')})")
        head.markdown(f"{plain(job_id)} · **{plain(state)}** · {plain(job['label'])} · {runs}")
        button.button("Cancel", key=f"launch.cancel.{job_id}", disabled=p["cancel_requested"], on_click=_cancel,
                      args=(job_id,))
        if p["status"] == api.RunStatus.RUNNING and p["kind"] == api.RAY_SWEEP:
            counts = ", ".join(f"{n} {s}" for s, n in sorted(p["run_counts"].items()))
            st.progress(min(1.0, p["runs_done"] / max(1, p["runs_total"])),
                        text=f"{p['runs_done']}/{p['runs_total']} runs landed{f' ({counts})' if counts else ''} "
                             f"· ETA {duration_text(p['eta_s'])}")
        elif p["status"] == api.RunStatus.RUNNING:
            total = max(1, p["epochs_total"])
            st.progress(min(1.0, p["epochs_done"] / total),
                        text=f"epoch {p['epochs_done']}/{p['epochs_total']} · ETA {duration_text(p['eta_s'])}")
            if p["epochs"]:
                st.plotly_chart(api.epoch_chart(pd.DataFrame(p["epochs"]), compact=True), key=f"launch.chart.{job_id}")


@st.fragment(run_every=REFRESH_S)
def jobs_panel(limit: int = 30) -> None:
    """The queue, newest first; active jobs get a card with live progress and a Cancel button."""
    queued = st.session_state.get("launch.queued")
    if queued:
        st.success(f"Queued {len(queued)} job(s): " + plain(", ".join(map(str, queued[:10])))
                   + (" …" if len(queued) > 10 else ""))
    if "launch.cancel_error" in st.session_state:
        st.error(st.session_state.pop("launch.cancel_error"))
    with shown("Could not read the job queue"):
        jobs = api.list_jobs(limit=limit)
        if jobs.empty:
            st.caption("No jobs yet: queue a run or a sweep.")
            return
        if not api.worker_alive() and (jobs["status"] == api.RunStatus.QUEUED).any():
            st.warning("No job worker is running, so queued jobs wait. Start one: `python -m engine worker`.")
        active = jobs[jobs["status"].isin([api.RunStatus.RUNNING, api.RunStatus.QUEUED])].sort_values(
            "status", key=lambda s: s != api.RunStatus.RUNNING)
        for _, job in active.head(MAX_CARDS).iterrows():
            _job_card(job)
        table = jobs.assign(run="/runs?run=" + jobs["run_id"])[
            ["job_id", "status", "label", "run", "created_at", "error"]]
        st.dataframe(table, hide_index=True, key="launch.jobs", column_config={
            "run": st.column_config.LinkColumn("run", display_text=r"/runs\?run=(.*)"),
            "created_at": st.column_config.DatetimeColumn("queued at (UTC)")})
