"""The first visit: what the demo ran and on what machine (read from the stored demo runs), and three steps to
start with: your pipeline, tune, paste the answer. Open while the store holds only the demo; folded after.

Nothing here names a CLI flag: the browser's user gets the page or the button that does it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from engine import api
from ui.cache import cached
from ui.text import plain, when

__all__ = ["first_steps"]

STEPS = (
    (
        "Your pipeline",
        "On the Launch page, pick the workload and model closest to your training (or your own "
        "dataset and model as a plugin) and queue a run.",
    ),
    (
        "Tune",
        "The Advisor at the bottom of this page proposes the sweep that finds the fastest loader setup for "
        "it: queue it with one click, and watch it on the Launch page.",
    ),
    (
        "Paste the answer",
        "The fastest config is named at the top of this page, with its speedup and interval: "
        "set the same loader, workers and prefetch depth in your training script.",
    ),
)


def demo_line(demo: dict[str, Any]) -> str:
    """What the demo has run so far, from the stored runs and the queue: 'The demo ran 28 runs of jpeg + cnn (...) on
    host (CPU, 2 cores), from 2026-11-25 22:13:40 UTC.' once it is done; 'The demo has run 5 of its 35 runs so far
    (30 still queued or running) ...' while it runs."""
    machine = ", ".join(
        p
        for p in (
            str(demo.get("cpu_model") or ""),
            f"{demo['cores']} cores" if demo.get("cores") else "",
            f"GPU {demo['gpu_name']}" if demo.get("gpu_name") else "no GPU",
        )
        if p
    )
    done, waiting = int(demo.get("done", demo["runs"]) or 0), int(demo.get("waiting") or 0)
    if not demo["runs"]:
        return f"The demo is queued: {_runs(waiting)} waiting for the job worker; its answer comes as they finish."
    what = (
        f"of {demo['workload']} + {demo['model']} ({int(demo['n_samples']):,} samples an epoch; loaders "
        f"{', '.join(map(str, demo['loaders']))}) on {demo['host']} ({machine}), from {when(demo['first'])}"
    )
    if waiting:
        return (
            f"The demo has finished {done} of its {done + waiting} runs so far ({waiting} still queued or "
            f"running) {what}."
        )
    ended = int(demo["runs"]) - done
    return f"The demo ran {_runs(done)} {what}" + (f" ({ended} did not finish)." if ended else ".")


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def answer_line(demo: dict[str, Any]) -> str:
    """What the ranking below is, now: the demo's answer once its runs are done, else an answer so far."""
    pipeline = f"{demo['workload']} + {demo['model']}"
    if not demo.get("runs"):
        return ""
    if demo.get("waiting"):
        return (
            f" The ranking for {pipeline} below is an answer so far, from the finished runs only: it can change "
            "until the last one is done (watch them on the Launch page)."
        )
    return f" The ranking for {pipeline} below is its answer."


def first_steps() -> None:
    """The "Start here" box: open when the store holds nothing but the demo."""
    demo = cached(api.demo_summary)
    n_runs = sum(cached(api.count_runs).values())
    only_demo = n_runs == (demo["runs"] if demo else 0)
    with st.expander(
        "Start here: what this is, and three steps to your fastest loader", expanded=only_demo, icon=":material/school:"
    ):
        st.markdown(
            "LoaderLab measures which data-loading setup trains your model fastest on this machine: "
            "each setting is run several times, and the fastest is named with how sure that is."
        )
        if demo:
            others = n_runs - int(demo["runs"] or 0)
            queued = int(demo.get("queued") or 0) - int(demo.get("waiting") or 0)
            mine = (
                (f" Besides the demo: {_runs(others)} of your own" if others else "")
                + (
                    f"{', and' if others else ' Besides the demo:'} {queued} job{'' if queued == 1 else 's'} of yours "
                    "still queued or running"
                    if queued > 0
                    else ""
                )
                + ("." if others or queued > 0 else "")
            )
            st.markdown(plain(demo_line(demo)) + plain(answer_line(demo)) + plain(mine))
        else:
            st.markdown("No demo in this store: your own runs show here once they finish.")
        cols = st.columns(3)
        for i, (col, (title, text)) in enumerate(zip(cols, STEPS), 1):
            col.markdown(f"**{i}. {title}**")
            col.caption(text)
        cols[0].page_link("pages/launch.py", label="Open the Launch page", icon=":material/rocket_launch:")
