"""Runs page widgets: the searchable, sortable runs table and what can be done to the runs picked in it.

The table's search, status filter and "show deleted" live in the URL (keys "runs.<param>"), as do
`run` (the detail view) and `compare` (2–4 ids), which ui.run_detail draws.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine import api
from ui import cache
from ui.cache import cached
from ui.state import Param
from ui.words import MISSING, plural

__all__ = ["SPEC", "actions", "open_picked", "readable_table", "table"]

STATUSES = [str(s) for s in api.RunStatus]  # queued, running, done, failed, cancelled, killed
SPEC = {
    "q": Param("", "text"),
    "status": Param([], "many", choices=STATUSES),
    "deleted": Param("no", choices=["no", "yes"]),
    "run": Param("", "text"),  # checked by ui.run_detail, which says what is wrong with a bad id
    "compare": Param("", "text"),
    "epoch": Param("", "text"),
}


def readable_table(df: pd.DataFrame) -> pd.DataFrame:
    """The table as a user reads it: a lab run's source says "lab" (stored as NULL), an observed run's model says
    "your model" (the lab never built it); any other empty cell shows MISSING through the table's placeholder."""
    df = df.copy()
    if "source" in df:
        df["source"] = df["source"].fillna("lab")
    if "model" in df and "source" in df:
        df.loc[df["model"].isna() & (df["source"] == "observed"), "model"] = "your model"
    return df


def table() -> list[str]:
    """Search box, filters and the table; returns the ids of the rows the user selected."""
    c1, c2, c3 = st.columns([3, 2, 1])
    c1.text_input("Search", key="runs.q", placeholder="id, tag, note, workload, loader, host…")
    c2.multiselect("Status", STATUSES, key="runs.status", placeholder="any")
    c3.selectbox("Show deleted", ["no", "yes"], key="runs.deleted")
    ss = st.session_state
    df = cached(api.search_runs, ss["runs.q"], statuses=ss["runs.status"], include_deleted=ss["runs.deleted"] == "yes")
    if df.empty:
        st.info("No runs match. Queue one on the Launch page, or clear the search.")
        return []
    df = readable_table(df)
    st.caption(
        f"{plural(len(df), 'run')} shown (newest first; click a header to sort; tick one row to open it above, "
        "or several to act on them)"
    )
    event = st.dataframe(
        df,
        key="runs.table",
        hide_index=True,
        on_select="rerun",
        selection_mode="multi-row",
        placeholder=MISSING,
        column_config={
            "created_at": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm:ss"),
            "epoch_s": st.column_config.NumberColumn("epoch (s)", format="%.3f"),
            "samples_per_s": st.column_config.NumberColumn("samples/s", format="%.0f"),
            "data_wait_share": st.column_config.ProgressColumn(
                "data wait", min_value=0.0, max_value=1.0, format="percent"
            ),
            "bound_s": st.column_config.NumberColumn("bound (s)", format="%.3f"),
            "efficiency": st.column_config.NumberColumn("efficiency", format="%.2f"),
        },
    )
    rows = event.selection.rows if event else []
    return [df["run_id"].iloc[i] for i in rows if i < len(df)]


def open_picked(ids: list[str]) -> None:
    """One ticked row opens that run's detail above the table, in this tab.

    NOTE: a link column ("details") opened a new browser tab on every click (issue 28): Streamlit's LinkColumn
    always targets a new tab."""
    if len(ids) == 1 and ids[0] != st.session_state.get("runs.run"):
        st.query_params.pop("compare", None)
        st.query_params.update(run=ids[0])
        st.rerun()


def actions(ids: list[str]) -> None:
    """Buttons for the selected runs: open, compare, delete, restore; and purging deleted runs."""
    c1, c2, c3, c4 = st.columns(4)
    if c1.button("Open", disabled=len(ids) != 1, key="runs.open"):
        st.query_params.update(run=ids[0])
        st.rerun()
    if c2.button("Compare", disabled=not 2 <= len(ids) <= 4, key="runs.compare_btn", help="pick 2 to 4 runs"):
        st.query_params.update(compare=",".join(ids))
        st.rerun()
    if c3.button("Delete", disabled=not ids, key="runs.delete", help="hide from lists and charts until purged"):
        n = api.soft_delete(ids)
        cache.clear()
        st.toast(f"Deleted {plural(n, 'run')} (restore them with Show deleted → Restore, or purge them for good).")
        st.rerun()
    if c4.button("Restore", disabled=not ids, key="runs.restore"):
        api.restore(ids)
        cache.clear()
        st.rerun()
    with st.expander("Purge deleted runs"):
        st.write("Removes soft-deleted runs, their epochs, steps and RunLogs for good.")
        sure = st.checkbox("I understand this cannot be undone", key="runs.purge_sure")
        if st.button("Purge", disabled=not sure, key="runs.purge", type="primary"):
            n = api.purge()
            cache.clear()
            st.success(f"Purged {plural(n, 'run')}.")
