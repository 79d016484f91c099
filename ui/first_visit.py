"""The first visit: what the demo ran and on what machine (read from the stored demo runs), and three steps to
start with: your pipeline, tune, paste the answer. Open while the store holds only the demo; folded after.

Nothing here names a CLI flag: the browser's user gets the page or the button that does it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from ui.cache import cached
from ui.text import plain, when

__all__ = ["first_steps"]

STEPS = (
    ("Your pipeline", "On the Launch page, pick the workload and model closest to your training (or your own "
                      "dataset and model as a plugin) and queue a run."),
    ("Tune", "The Advisor at the bottom of this page proposes the sweep that finds the fastest loader setup for "
             "it: queue it with one click, and watch it on the Launch page."),
    ("Paste the answer", "The fastest config is named at the top of this page, with its speedup and interval: "
                         "set the same loader, workers and prefetch depth in your training script."),
)


def demo_line(demo: dict[str, Any]) -> str:
    """'The demo ran 28 runs of jpeg + cnn (512 samples; loaders processes, prefetch, sync, threads) on host
    (CPU, 2 cores), from 2026-11-25 22:13:40 UTC.' All from the stored runs."""
    machine = ", ".join(p for p in (str(demo.get("cpu_model") or ""),
                                    f"{demo['cores']} cores" if demo.get("cores") else "",
                                    f"GPU {demo['gpu_name']}" if demo.get("gpu_name") else "no GPU") if p)
    done = demo.get("done", demo["runs"])
    runs = f"{demo['runs']} runs" + ("" if done == demo["runs"] else f" ({done} finished so far)")
    return (f"The demo ran {runs} of {demo['workload']} + {demo['model']} ({int(demo['n_samples']):,} "
            f"samples an epoch; loaders {', '.join(map(str, demo['loaders']))}) on {demo['host']} ({machine}), "
            f"from {when(demo['first'])}.")


def first_steps() -> None:
    """The "Start here" box: open when the store holds nothing but the demo."""
    demo = cached("demo_summary")
    n_runs = sum(cached("count_runs").values())
    only_demo = n_runs == (demo["runs"] if demo else 0)
    with st.expander("Start here: what this is, and three steps to your fastest loader", expanded=only_demo,
                     icon=":material/school:"):
        st.markdown("LoaderLab measures which data-loading setup trains your model fastest on this machine: "
                    "each setting is run several times, and the fastest is named with how sure that is.")
        if demo:
            st.markdown(plain(demo_line(demo)) + " The ranking below is its answer.")
        else:
            st.markdown("No demo in this store: your own runs show here once they finish.")
        cols = st.columns(3)
        for i, (col, (title, text)) in enumerate(zip(cols, STEPS), 1):
            col.markdown(f"**{i}. {title}**")
            col.caption(text)
        cols[0].page_link("pages/launch.py", label="Open the Launch page", icon=":material/rocket_launch:")
