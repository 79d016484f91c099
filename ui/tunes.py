"""A script's tune (`engine tune -- python train.py`) on the dashboard: chosen in Explore (?tune=<id>, in the URL
and share links like the rest of Explore's state), it shows the answer (the speedup with its interval, the tuned
DataLoader's file:line, the diff as code) and its candidates ranked by seconds per batch; a trial's run page says
which tune it belongs to and links there.

Everything the user's script or command put in the store (the command, the diff, errors, settings) is shown as
text: through plain() in Markdown, or as code.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any
from urllib.parse import quote

import pandas as pd
import streamlit as st

from engine import api
from ui.cache import cached
from ui.text import plain, sig, when
from ui.words import plural

__all__ = ["TUNE_ID", "explore_link", "section", "trial_of"]

TUNE_ID = re.compile(r"tune-[0-9a-f]{12}")
_KEY = "explore.tune"
# stats.compare's words with A = the script's own setting, B = the answer's
_VERDICT = {"B faster": "faster", "A faster": "slower", "no clear difference": "no clear difference"}


def _command(tune: dict[str, Any]) -> str:
    try:
        argv = json.loads(tune.get("command") or "[]")
    except ValueError:
        return str(tune.get("command"))
    return shlex.join(map(str, argv)) if isinstance(argv, list) else str(argv)


def _label(tune: dict[str, Any]) -> str:
    """'2026-11-28 02:00 · python train.py · tune-0123456789ab' (a selectbox option: text as is)."""
    day = when(tune.get("created_at"))[:16]
    command = _command(tune)
    return f"{day} · {command if len(command) <= 60 else command[:59] + '…'} · {tune['tune_id']}"


def explore_link(tune_id: str) -> str:
    """The address of the tune's view in Explore, shareable as any Explore URL."""
    return f"/explore?tune={quote(tune_id, safe='')}"


def section(tunes: list[dict[str, Any]]) -> None:
    """The 'Script tunes' chooser (newest first) and the chosen tune's view; nothing when none is stored."""
    if not tunes:
        return
    by_id = {t["tune_id"]: t for t in tunes}
    st.subheader("Script tunes", anchor=False)
    st.selectbox(
        "Script tune",
        ["", *by_id],
        key=_KEY,
        format_func=lambda i: _label(by_id[i]) if i else f"(none: {plural(len(tunes), 'tune')} stored)",
        help="a tune of your own script: python -m engine tune -- python train.py",
    )
    chosen = by_id.get(st.session_state.get(_KEY) or "")
    if chosen is not None:
        _view(chosen)
    st.divider()


def _speedup(tune: dict[str, Any]) -> str:
    speedup, lo, hi = tune.get("speedup"), tune.get("speedup_lo"), tune.get("speedup_hi")
    if speedup is None:
        return "no speedup measured"
    if lo is None or hi is None:
        return f"{sig(speedup, '×')} by the medians; no 95 % interval"
    return f"{sig(speedup, '×')} (95% CI {sig(lo)}-{sig(hi, '×')})"


def _view(tune: dict[str, Any]) -> None:
    tune_id = tune["tune_id"]
    ranking = cached(api.tune_ranking, tune_id)
    st.markdown(plain(f"Tune {tune_id} of the DataLoader at {tune.get('site')}, {when(tune.get('created_at'))}"))
    st.code(_command(tune), language="bash")
    spent = [
        f"spent {sig(tune.get('spent_s'), ' s')}" if tune.get("spent_s") is not None else None,
        f"of a {sig(tune.get('budget_s'), ' s')} budget" if tune.get("budget_s") is not None else None,
        f"stopped: {tune['stop_reason']}" if tune.get("stop_reason") else None,
    ]
    st.caption(plain(" ".join(p for p in spent if p)))
    best = tune.get("best_config_idx")
    best = None if best == 0 else best  # the script's own setting again: no change to make
    with st.container(key="explore_tune_answer"):
        if best is None:
            st.markdown(
                plain(
                    f"No change to make to the DataLoader at {tune.get('site')}: no candidate beat the "
                    "script's own setting, or none finished."
                )
            )
        else:
            row = ranking[ranking["config_idx"] == best]
            setting = row["setting"].iloc[0] if len(row) else f"candidate {best}"
            verdict = f": {_VERDICT.get(tune['difference'], tune['difference'])}" if tune.get("difference") else ""
            st.markdown(
                plain(
                    f"The answer: {setting} at {tune.get('site')}, {_speedup(tune)} against the script's "
                    f"own setting{verdict}."
                )
            )
        if tune.get("diff"):
            st.caption(plain(f"The change to make to {tune.get('site')}:"))
            st.code(tune["diff"], language="diff")  # the user's source: code, never Markdown
        else:
            st.caption("No diff: the script's own DataLoader call stands.")
    _trials(ranking)
    if tune.get("answer"):
        with st.expander("The answer as the command printed it", expanded=False):
            st.code(tune["answer"], language=None)


def _median(row: pd.Series) -> str:
    if row["finished"]:
        return sig(row["median_s"], " s")
    return "failed" if row["failed"] else "not tried"


def _trials(ranking: pd.DataFrame) -> None:
    """The candidates ranked by median seconds per batch; failed ones below with their first error."""
    if ranking.empty:
        st.info("No trial of this tune is stored.")
        return
    untried = ranking[(ranking["trials"] == 0)]
    ranking = ranking[ranking["trials"] > 0]
    table = pd.DataFrame(
        {
            "rank": ranking["rank"],
            "setting": ranking["setting"],
            "trials": ranking["trials"],
            "median s/batch": [_median(r) for _, r in ranking.iterrows()],
            "95 % interval": ranking["interval"],
            "peak memory": [sig(v / 2**20, " MiB", missing="not measured") for v in ranking["peak_bytes"]],
            "GPU idle": [f"{v:.0%}" if v == v else "not measured (CPU)" for v in ranking["gpu_idle_share"]],
            "first error": [e or "none" for e in ranking["first_error"]],
            "call": ranking["call"],
        }
    )
    # NOTE: st.table renders Markdown: every cell (settings and errors are the user's) goes through plain()
    st.table(table.set_index("rank").map(plain).rename(columns=plain), border="horizontal")
    st.caption(
        "Ranked by the median seconds per batch of each candidate's finished trials (the tuned loader's batches "
        "after its first). A candidate with fewer than 6 finished trials has no 95 % interval; one whose every "
        "trial failed is listed below the others with its first error."
    )
    if len(untried):  # NOTE: most of a search's space is never run (the prediction ranks it below): one line, not rows
        with st.expander(
            f"{len(untried)} candidate(s) not tried: the prediction ranked them below the first rung, "
            "or the budget ended first",
            expanded=False,
        ):
            st.text("\n".join(untried["setting"]))


def trial_of(run: dict[str, Any]) -> None:
    """On a run page: 'trial k of tune <id>' with its setting, and the link to the tune in Explore. Nothing for a run
    that is no script tune's trial."""
    tune_id = str(run.get("sweep_id") or "")
    if not TUNE_ID.fullmatch(tune_id):
        return
    trials = cached(api.tune_trials, tune_id)
    mine = trials[trials["run_id"] == run["run_id"]]
    if mine.empty:
        return
    row = mine.iloc[0]
    stored = bool(cached(api.tune_answers, None, tune_id))
    nth = f", this setting's trial {int(row['repeat_idx']) + 1}" if pd.notna(row["repeat_idx"]) else ""
    st.info(
        plain(
            f"Trial {int(row['trial'])} of tune {tune_id} ({plural(len(trials), 'trial')}): {row['setting']}{nth}"
            + (
                "."
                if stored
                else "; the tune's answer is not stored: it is still running, or it was stopped before it answered."
            )
        ),
        icon=":material/tune:",
    )
    if stored:  # Explore lists stored tunes only: a link to another would land on a warning
        st.markdown(f"[Open tune {plain(tune_id)} in Explore]({explore_link(tune_id)})")
