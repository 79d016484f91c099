"""History page widgets: the SQL console, saved queries, the schema browser, results, chart and downloads.

The last query run is in the URL (`?sql=...`), so a link reruns it. Every query goes through the
store's sandbox (`run_query`): anything refused or failing is an st.error and nothing changes.
"""

from __future__ import annotations

import io
from typing import Any

import pandas as pd
import streamlit as st

from engine import api
from ui import cache
from ui.cache import cached
from ui.errors import shown
from ui.state import Param
from ui.text import chart_safe, plain
from ui.words import MISSING

__all__ = ["SPEC", "console", "result", "saved", "schema"]

SPEC = {"sql": Param("", "text")}
_EDITOR = "history.editor"


def _run() -> None:
    st.session_state["history.sql"] = st.session_state.get(_EDITOR, "")


def _load(queries: pd.DataFrame) -> None:
    name = st.session_state.get("history.pick")
    hit = queries[queries["name"] == name]
    if not hit.empty:
        st.session_state[_EDITOR] = st.session_state["history.sql"] = hit["sql"].iloc[0]


def saved() -> None:
    """Pick a saved query (built-ins first) to load and run it; save the editor's query under a name."""
    queries = cached(api.list_saved_queries)
    labels = {n: n + ("" if b else " (yours)") for n, b in zip(queries["name"], queries["builtin"])}
    c1, c2 = st.columns([4, 1])
    c1.selectbox("Saved queries", list(labels), key="history.pick", format_func=labels.__getitem__)
    c2.button("Load and run", key="history.load", on_click=_load, args=(queries,))


def console() -> None:
    ss = st.session_state
    if _EDITOR not in ss or ss.get("_history.synced") != ss.get("history.sql"):  # first visit, or a link's query
        ss[_EDITOR] = ss.get("history.sql") or ss.get(_EDITOR) or "SELECT * FROM runs LIMIT 20"
        ss["_history.synced"] = ss.get("history.sql")
    st.text_area("SQL (one read-only statement; DuckDB dialect)", key=_EDITOR, height=160)
    c1, c2, c3 = st.columns([1, 3, 1])
    c1.button("Run", type="primary", key="history.run", on_click=_run)
    name = c2.text_input("Save as", key="history.name", placeholder="name for this query", label_visibility="collapsed")
    if c3.button("Save query", key="history.save"):
        with shown("Could not save the query"):  # a built-in's name is refused by the engine
            api.save_query(name, st.session_state[_EDITOR])
            cache.clear()
            st.success(f"Saved {plain(repr(name.strip()))}.")


def schema() -> None:
    with st.expander("Schema: tables and columns"):
        tables = cached(api.table_schema)
        rows = [(t, c, typ) for t, cols in tables.items() for c, typ in cols]
        st.dataframe(
            pd.DataFrame(rows, columns=["table", "column", "type"]), hide_index=True, key="history.schema", height=300
        )


def result(sql: str) -> None:
    """Run the query in the sandbox; show the rows, a chart when the shape suggests one, and downloads."""
    if not sql.strip():
        return
    try:
        # it may read the job queue, which bumps no version: keyed on any write to the file
        res, fig, files = _result(cache.store_token(), sql)
    except Exception as e:  # noqa: BLE001 - QueryRejected, or the store being unreadable: show the message
        st.error(f"Query not run: {plain(e)}")
        return
    note = " (only the first rows: add a LIMIT or aggregate)" if res.truncated else ""
    st.caption(f"{len(res.df)} rows in {res.elapsed_s:.3f} s{note}")
    st.dataframe(res.df, hide_index=True, key="history.result", placeholder=MISSING)
    if isinstance(fig, str):
        st.error(f"No chart for this result: {plain(fig)}")
    elif fig is not None:
        st.plotly_chart(fig, key="history.chart")
    c1, c2 = st.columns(2)
    c1.download_button("Download CSV", files["csv"], "query.csv", "text/csv", key="history.csv")
    if isinstance(files["parquet"], str):
        c2.error(f"Parquet download unavailable: {plain(files['parquet'])}")
    else:
        c2.download_button(
            "Download Parquet",
            files["parquet"],
            "query.parquet",
            "application/vnd.apache.parquet",
            key="history.parquet",
        )


@st.cache_data(max_entries=64, show_spinner=False, ttl=300)
def _result(token: str, sql: str) -> tuple[Any, Any, dict[str, Any]]:
    """The query's result, its chart and its files, once per (store state, query): many viewers of one
    shared link cost one query, one figure and one CSV/Parquet encoding, not one per rerun each."""
    res = api.run_query(sql)
    try:
        fig = api.auto_chart(chart_safe(res.df))  # the query (a link's ?sql=) names the labels: text, not HTML
    except Exception as e:  # noqa: BLE001 - a chart is a nicety: say why there is none
        fig = f"{type(e).__name__}: {e}"
    files: dict[str, Any] = {"csv": res.df.to_csv(index=False).encode()}
    try:
        buf = io.BytesIO()
        res.df.to_parquet(buf, index=False)
        files["parquet"] = buf.getvalue()
    except Exception as e:  # noqa: BLE001 - e.g. a column type Parquet cannot hold
        files["parquet"] = f"{type(e).__name__}: {e}"
    return res, fig, files
