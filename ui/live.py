"""The launch page's target picker and queue buttons (the jobs panel beside them is ui/jobs_panel.py).

The target is "This machine" (one job per run, run one at a time by the worker) or "Ray cluster" (the
whole sweep, or the single run, as ONE job that the worker drives through the Ray executor). The Ray
address comes from $LOADERLAB_RAY_ADDRESS, changed in the box under the radio once Ray is picked; empty
means a local Ray instance.

    target = target_picker()                            # the "Target" radio, and the Ray address when Ray is picked
    queue_run(form, target); queue_sweep(sweep, target)  # "Queue run" / "Queue sweep": refused while a field is
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import streamlit as st

from engine import api
from ui import cache
from ui.errors import shown
from ui.form_labels import label, refusal
from ui.text import plain
from ui.words import plural

__all__ = ["TARGETS", "Target", "duration_text", "queue_run", "queue_sweep", "target_picker"]

TARGETS = ("This machine", "Ray cluster")


@dataclass
class Target:
    ray: bool = False
    address: str = ""  # the Ray address; "" is a local Ray instance

    @property
    def where(self) -> str:
        return f"the Ray cluster at {plain(self.address)}" if self.address else "a local Ray instance"


def target_picker() -> Target:
    """The "Target" radio, and under it the Ray address while Ray is picked. Without Ray installed the radio
    is disabled on "This machine" (Streamlit cannot disable one option) with a caption on how to install it."""
    ss, available = st.session_state, api.ray_available()
    # NOTE: Streamlit forgets the state of widgets another page did not draw: restore them from shadows
    ss.setdefault("launch.ray_address", ss.get("launch._ray_address", api.default_ray_address()))
    ss.setdefault("launch.target", ss.get("launch._target", TARGETS[0]))
    if not available:
        ss["launch.target"] = TARGETS[0]
    address = str(ss["launch.ray_address"]).strip()
    ray_caption = Target(True, address).where if available else f"not installed: `{api.INSTALL_HINT}`"
    choice = st.radio(
        "Target",
        TARGETS,
        key="launch.target",
        horizontal=True,
        disabled=not available,
        captions=["one run at a time, here", ray_caption],
        help="Ray: the sweep runs as one job, each run with its device (or CPU node) to itself",
    )
    if not available:
        st.caption(f"Ray is not installed here, so only this machine can run jobs: `{api.INSTALL_HINT}`")
    if choice == TARGETS[1]:  # NOTE: where the cluster is matters only once it is the target
        address = st.text_input(
            "Ray address",
            key="launch.ray_address",
            help=f"auto, host:port or ray://host:port; empty: a local Ray instance (127.0.0.1). "
            f"Default: ${api.RAY_ADDRESS_ENV}",
        ).strip()
    ss["launch._ray_address"], ss["launch._target"] = address, choice
    return Target(ray=choice == TARGETS[1], address=address)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def _remember(text: str, toast: str) -> None:
    """Said under the button just clicked, and as a toast (the button may sit at the bottom of the window); the next
    rerun (any change to the form) clears both, so an old "Queued" never stays beside a new state of the queue."""
    st.success(plain(text), icon=":material/check_circle:")
    st.toast(toast, icon=":material/check_circle:")  # our own words, no input in them


def _refused(errors: list[Any]) -> str:
    names = ", ".join(dict.fromkeys(f"**{plain(label(e.field))}**" for e in errors))
    return f"Nothing queued: fix {names} first ({plain(refusal(errors[0].message))})."


def queue_run(form: Any, target: Target | None = None) -> None:
    """The "Queue run" button: queues the form's config; nothing is queued while the form refuses a field."""
    if st.button("Queue run", type="primary", key="launch.queue_run"):
        if form.cfg is None:
            st.error(_refused(form.errors))
            return
        with shown("Could not queue the run"):
            job_id = (
                api.submit_ray_sweep(form.cfg, address=target.address, origin="browser")
                if target and target.ray
                else api.submit(form.cfg, origin="browser", oversubscribe=form.oversubscribe)
            )
            _remember(f"Queued 1 job: {job_id}", "Run queued: it shows under Jobs")


@st.cache_data(max_entries=64, ttl=300, show_spinner=False)
def _estimate(token: str, configs_json: str) -> dict[str, Any]:
    """estimate_duration, once per (store state, plan): the Launch page reruns on every keystroke, and the estimate
    reads the store's runs and jobs (the jobs bump no data version, so the key is any write: cache.store_token)."""
    return api.estimate_duration([api.RunConfig.from_dict(d) for d in json.loads(configs_json)])


def queue_sweep(result: Any, target: Target | None = None, oversubscribe: bool = False) -> None:
    """The sweep summary (runs = distinct configs × repeats, estimated duration) and "Queue sweep"."""
    ray = target is not None and target.ray
    if result.sweep is not None:
        with shown("Could not estimate the duration"):
            est = _estimate(
                cache.store_token(),
                json.dumps([cfg.to_dict() for _, cfg in result.sweep.plan()], sort_keys=True, default=str),
            )
            spread = f"{duration_text(est['low_s'])} to {duration_text(est['high_s'])}"
            where = f" · as one Ray job on {target.where}" if ray else " · one run at a time"
            st.markdown(
                f"**{plural(result.n_runs, 'run')}** = {plural(result.n_configs, 'distinct config')} × "
                f"{plural(result.sweep.repeats, 'repeat')} · about **{duration_text(est['seconds'])}** "
                f"({spread}; {plain(est['basis'])}){where}"
            )
    if st.button("Queue sweep", key="launch.queue_sweep"):
        if result.sweep is None:
            st.error(_refused([result.error]))
            return
        with shown("Could not queue the sweep"):
            if ray:
                job_id = api.submit_ray_sweep(result.sweep, address=target.address, origin="browser")
                _remember(f"Queued the sweep as 1 Ray job: {job_id}", "Sweep queued as one Ray job, under Jobs")
            else:
                ids = api.submit_sweep(result.sweep, origin="browser", oversubscribe=oversubscribe)
                _remember(
                    f"Queued a sweep of {plural(len(ids), 'run')}: it shows as one card in Jobs",
                    "Sweep queued: it shows as one card under Jobs",
                )
