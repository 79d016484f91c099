"""A run of the user's own loop (source 'observed') on its run page: what was observed, what the lab's fields could
not hold, and what the lab would try next (engine/advice/_baseline_run.py)."""

from __future__ import annotations

import json
import shlex
from typing import Any

import streamlit as st

from ui.text import plain

__all__ = ["next_steps", "observed", "script_of", "why_no_verdict"]


def observed(run: dict[str, Any]) -> None:
    """Nothing for the lab's own runs."""
    if run.get("source") != "observed":
        return
    try:
        settings = json.loads(run.get("observed_settings") or "{}")
    except ValueError:
        settings = {}
    st.info(
        plain(
            f"Observed: your own training loop, the loader made at {run.get('observed_stream')}. It never pools "
            f"with the lab's runs of the same settings (loader={run.get('loader')}, workers={run.get('workers')}"
            f", batch_size={run.get('batch_size')}): the loops differ."
        )
    )
    if settings.get("unmapped"):
        st.caption(plain("Kept as read, which the lab's runs do not reproduce: " + "; ".join(settings["unmapped"])))
    st.caption(
        "What the lab would try next: tune runs your script again at other loader settings and says which "
        "is faster with a 95% interval; observe runs it once more as it is, after a change of yours:"
    )
    st.code(next_steps(run), language="bash")


def script_of(run: dict[str, Any]) -> str | None:
    """The script the observed loader was made in (its observed_stream is `path:line`), when that is a .py file."""
    path = str(run.get("observed_stream") or "").rpartition(":")[0]
    return path if path.endswith(".py") else None


def next_steps(run: dict[str, Any]) -> str:
    """Commands that work as pasted for this run: its script under tune, then under observe. Without a known
    script, the commands for the one the user runs (they name it; nothing to replace)."""
    script = script_of(run)
    if script is None:
        return (
            "# put your training command after --, as you run it\n"
            "python -m engine tune -- python train.py\npython -m engine observe -- python train.py"
        )
    quoted = shlex.quote(script)
    return f"python -m engine tune -- python {quoted}\npython -m engine observe -- python {quoted}"


def why_no_verdict(run: dict[str, Any]) -> str:
    """Why an observed run has no verdict: the lab measured no lower bound for the user's loop."""
    return (
        "none yet: observing your loop measures its epochs, not the lower bound a verdict rests on; tune "
        "(below) compares settings on your loop instead"
    )
