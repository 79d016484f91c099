"""Explore page widgets: chart settings and filters bound to the URL, the chart, its selection, share links.

Every setting is a widget keyed "explore.<param>", filled from and written back to the URL by ui.state.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pandas as pd
import streamlit as st

from engine import api
from ui.cache import cached, data_token
from ui.state import Param
from ui.text import chart_safe, plain, readable, sig

__all__ = ["answer", "chart", "controls", "predictions", "selected_runs", "spec", "state"]

PAGE = "explore"
_MAX_FACETS = 12
# the metrics as the engine's charts name them; then the error bars and the empty choice
_LABELS = {**api.METRIC_LABELS, "ci": "95% CI of the median", "quantiles": "2.5–97.5% of runs", "": "(none)"}


_VERDICT_HELP = (
    "commonest verdict among the group's runs: "
    + "; ".join(f"{k}: {v}" for k, v in api.VERDICTS.items())
    + " (the run page gives the counts)"
)


_PREDICTED_HELP = (
    "median predicted epoch of the group's runs (engine/predict/model.py): compare with the measured median"
)
_FROM_HELP = (
    "commonest source of the group's predictions: prior = predicted before the run from an earlier probe "
    "(held out); own = fitted on the run's own probe, after it (not a held-out prediction)"
)


def spec(options: dict[str, Any], tune_ids: list[str] | tuple[str, ...] = ()) -> dict[str, Param]:
    """The page's URL parameters; filter values must be among the store's values, a script tune (`tune`, ui/tunes.py)
    among the stored tunes.

    NOTE: with several pipelines (workload + model) stored, the default view is the newest run's pipeline, never
    all of them pooled into one point per loader; `?workload=&model=` (cleared filters) shows them all."""
    axes = list(api.explore_axes())
    latest = options.get("latest_pipeline") or []
    pinned = dict(zip(("workload", "model"), latest)) if options.get("n_pipelines", 0) > 1 and len(latest) == 2 else {}
    pinned = {f: v for f, v in pinned.items() if v in (options.get(f) or [])}  # an observed run's model is no choice
    return {
        "metric": Param("epoch_s", choices=list(api.EXPLORE_METRICS)),
        "x": Param("loader", choices=axes),
        # NOTE: threads by default: on a small CPU box the intra-op threads are the first lever (the demo's first
        # chart shows it), and a store that never varied them shows one colour
        "color": Param("threads", choices=["", *axes]),
        "facet": Param("", choices=["", *axes]),
        "interval": Param("ci", choices=["ci", "quantiles"]),
        "scale": Param("linear", choices=["linear", "log"]),
        "vs": Param("", "text"),
        **{
            f: Param([pinned[f]] if f in pinned else [], "many", choices=list(options.get(f, [])))
            for f in api.EXPLORE_FILTERS
        },
        "date_from": Param("", "date"),
        "date_to": Param("", "date"),
        "sel": Param([], "ids"),
        "tune": Param("", choices=["", *tune_ids]),
    }


def _k(name: str) -> str:
    return f"{PAGE}.{name}"


def controls(sp: dict[str, Param]) -> None:
    """Chart settings on one row, filters on the next; values come from session state set by bind()."""
    fmt = lambda v: _LABELS.get(v, v)  # noqa: E731
    cols = st.columns(6)
    for col, name, label in zip(
        cols,
        ("metric", "x", "color", "facet", "interval", "scale"),
        ("Metric", "x axis", "Colour", "Facet", "Error bars", "y scale"),
    ):
        col.selectbox(
            label,
            sp[name].allowed(),
            key=_k(name),
            format_func=fmt,
            help="log: one slow outlier no longer flattens the others" if name == "scale" else None,
        )
    cols = st.columns(6)
    for col, name in zip(cols, api.EXPLORE_FILTERS):
        col.multiselect(name.capitalize(), sp[name].allowed(), key=_k(name), placeholder="all")
    cols[4].date_input("From", key=_k("date_from"), format="YYYY-MM-DD")
    cols[5].date_input("To", key=_k("date_to"), format="YYYY-MM-DD")


def state() -> dict[str, Any]:
    """The current widget values as query arguments for explore_summary."""
    ss = st.session_state
    filters = {f: ss.get(_k(f)) or [] for f in api.EXPLORE_FILTERS}
    for name in ("date_from", "date_to"):
        day = ss.get(_k(name))
        filters[name] = day.isoformat() if day else ""
    return {
        "x": ss[_k("x")],
        "metric": ss[_k("metric")],
        "color": ss[_k("color")] or None,
        "facet": ss[_k("facet")] or None,
        "interval": ss[_k("interval")],
        "filters": filters,
        "log": ss.get(_k("scale")) == "log",
    }


_SHOWN_PIPELINES = 4  # rankings shown at once; more pipelines in view get a line saying how to narrow the view


def answer(args: dict[str, Any]) -> pd.DataFrame:
    """Which config in view is fastest and by how much: per pipeline, the configs ranked by median epoch time, with
    the speedup over sync (or the config picked in "Speedup over") and its interval, and the call in words.
    The fastest config is named first, in the container keyed "explore.fastest" (where its code goes). The runs
    ranked are the advisor's (engine.analysis.answer), so the Advisor below names the same config."""
    ranking = cached(api.explore_ranking, filters=args["filters"], reference=st.session_state.get(_k("vs")) or None)
    if ranking.empty:
        return ranking
    mine = None if st.session_state.get(_k("vs")) else _your_setup(ranking)
    if mine:  # the Advisor's "Your current setup", measured: what every speedup is against, as the Advisor's is
        ranking = cached(api.explore_ranking, filters=args["filters"], reference=mine)
    st.session_state["_explore.yours"] = mine
    pipelines = ranking[["workload", "model"]].drop_duplicates()
    if len(pipelines) > 1:
        st.warning(
            f"This view holds {len(pipelines)} pipelines (workload + model); each is ranked on its own, "
            "never pooled. Pick one workload and one model in the filters to chart one.",
            icon=":material/call_split:",
        )
    groups = ranking.groupby(["workload", "model"], sort=False, dropna=False)
    for i, ((workload, model), rank) in enumerate(groups):
        if i < _SHOWN_PIPELINES:
            _one_ranking(rank, str(workload), str(model), i)
    return ranking


def _your_setup(ranking: pd.DataFrame) -> str | None:
    """The label of the first pipeline's config that is the setup typed in the Advisor (its fields equal; torch's
    default threads preferred), or None: none typed, none valid, or not measured."""
    try:
        given = api.parse_baseline(st.session_state.get("advisor.baseline") or "")
    except api.ConfigError:
        return None
    if not given:
        return None
    top = ranking.iloc[0]
    first = ranking[(ranking["workload"] == top["workload"]) & (ranking["model"] == top["model"])]
    found = [
        (json.loads(k).get("threads") not in (0, None), c)
        for k, c in zip(first["knobs"], first["config"])
        if all(str(json.loads(k).get(f)) == str(v) for f, v in given.items())
    ]
    return min(found)[1] if found else None


def _fastest_code(run_id: str) -> None:
    """The fastest config's loader as code to paste (its newest run's setting), in st.code with its copy button."""
    run = cached(api.get_run, run_id) if run_id else None
    if run and run["config"].get("loader") in api.SNIPPETS:
        with st.expander("The code: this loader, built from your `dataset`", expanded=False):
            st.code(api.snippet(run["config"], api.run_title(run)), language="python")


def _one_ranking(rank: pd.DataFrame, workload: str, model: str, i: int) -> None:
    refs = rank[rank["call"] == "reference"]
    top, ref = rank.iloc[0], (refs.iloc[0] if len(refs) else rank.iloc[-1])
    with st.container(key=f"explore_fastest_{i}"):
        st.subheader(plain(f"Fastest for {workload} + {model}"), anchor=False)
        st.markdown(plain(_fastest_sentence(top, ref, len(rank))))
        _fastest_code(str(top["run_ids"]).split(",")[0])  # the answer as code, under the sentence naming it
    labels = ["", *rank["config"]]
    if len(rank) > 1 and i == 0:  # one reference for the page: the first pipeline's configs
        whose = "your setup" if st.session_state.get("_explore.yours") else "the default"
        if st.session_state.get(_k("vs")) not in labels:
            st.session_state[_k("vs")] = ""
        st.selectbox(
            "Speedup over",
            labels,
            key=_k("vs"),
            format_func=lambda v: v or f"{whose}: {ref['config']}",
            help="the config each speedup is measured against: your setup, if you measured it",
        )
    table = pd.DataFrame(
        {
            "rank": rank["rank"],
            "config": rank["config"],
            "runs": rank["n"],
            "median epoch": [sig(v, " s") for v in rank["median"]],
            "95 % interval": rank["interval"],
            f"speedup over {ref['config']}": [_speedup(r) for _, r in rank.iterrows()],
            "call": rank["call"],
        }
    )
    left_out = int(rank["left_out"].iloc[0]) if "left_out" in rank else 0
    # NOTE: st.table, not st.dataframe: a short leaderboard whose text wraps and can be read (and tested) as text;
    # it renders Markdown, so every cell goes through plain()
    st.table(table.set_index("rank").map(plain).rename(columns=plain), border="horizontal")
    st.caption(
        "Ranked by median epoch time over each config's runs. The call: faster when the speedup's whole 95 % "
        "interval is above 1; not slower when it starts above 0.95; not yet distinguishable while it spans 1; "
        "a config with fewer than 6 runs has no interval yet, so it is unproven however fast it looks."
        + (
            f" {left_out} other run{'' if left_out == 1 else 's'} of this pipeline (another mode, data size, "
            "machine or plugin code) are charted below but not ranked here, as the Advisor does."
            if left_out
            else ""
        )
    )


def _speedup(row: pd.Series) -> str:
    if row["call"] == "reference":
        return "1× (reference)"
    if pd.isna(row["speedup_lo"]):
        return f"{sig(row['speedup'], '×')} by the medians; no interval: {_runs(row['n'])} here"
    if not row.get("distinguishable", True):
        return f"not yet distinguishable (95% CI {sig(row['speedup_lo'])}-{sig(row['speedup_hi'], '×')} spans 1)"
    return f"{sig(row['speedup'], '×')} (95% CI {sig(row['speedup_lo'])}-{sig(row['speedup_hi'], '×')})"


def _runs(n: Any) -> str:
    return f"{int(n)} run{'' if int(n) == 1 else 's'}"


def _fastest_sentence(top: pd.Series, ref: pd.Series, n_configs: int = 2) -> str:
    """'threads, workers=2 is fastest: 0.412 s an epoch (95 % CI ...), 1.62× faster than sync (95 % CI ...).'"""
    word = api.best_word(int(top["n"]))
    head = (
        f"{top['config']} is the fastest" if word == "best" else f"{top['config']} is the {word}"
    ) + f": {sig(top['median'], ' s')} an epoch ({top['interval']})"
    if n_configs == 1:
        return head + "; it is the only config in view."
    if top["call"] == "reference":
        return head + "; it is the reference the others are measured against."
    if not top.get("distinguishable", True) and pd.notna(top["speedup_lo"]):
        return (
            f"{head}; not yet distinguishable from {ref['config']} ({_runs(top['n'])} and {_runs(ref['n'])}: the "
            f"speedup's 95 % CI {sig(top['speedup_lo'])}-{sig(top['speedup_hi'], '×')} spans 1)."
        )
    return f"{head}, {_speedup(top)} over {ref['config']}: {top['call']}."


def chart(args: dict[str, Any]) -> pd.DataFrame:
    """Draw the chart and the table of its groups; a selection updates explore.sel. Returns the summary."""
    summary = cached(
        api.explore_summary,
        args["x"],
        metric=args["metric"],
        color=args["color"],
        facet=args["facet"],
        filters=args["filters"],
        interval=args["interval"],
    )
    if summary.empty:
        st.info("No finished runs match these filters. Queue some on the Launch page, or widen the filters.")
        return summary
    if args["facet"] and summary[args["facet"]].nunique(dropna=False) > _MAX_FACETS:
        keep = summary[args["facet"]].drop_duplicates().head(_MAX_FACETS)
        st.warning(
            f"{plain(args['facet'])} has {summary[args['facet']].nunique(dropna=False)} values; the chart shows "
            f"the first {_MAX_FACETS} as facets (filter, or facet by a field with fewer values)."
        )
        summary = summary[summary[args["facet"]].isin(keep)]
    axes = {args["x"], args["color"], args["facet"]}
    if not axes & {"host", "host_fingerprint"} and (summary["n_hosts"].max() > 1 or summary["n_torch"].max() > 1):
        st.warning(
            "Some points mix runs from several hosts or torch versions, which are not like with like: "
            "colour or facet by host, or filter to one host."
        )
    if summary["noisy"].any():
        st.caption(
            f"{int(summary['noisy'].sum())} group(s) are noisy (coefficient of variation over 10 %): "
            "add repeats or quiet the machine before trusting small differences."
        )
    _pooling_banner(summary)
    # NOTE: tags and other free text become tick labels, legends and facet titles: text, not Plotly's HTML
    safe = chart_safe(summary, [args["x"], args["color"], args["facet"]])
    fig = _figure(data_token(), json.dumps(args, sort_keys=True, default=str), safe)
    event = st.plotly_chart(fig, key=_k("chart"), on_select="rerun", selection_mode=("points", "box", "lasso"))
    picked = sorted(
        {
            i
            for p in (event.selection.points if event else []) or []
            for i in str((p.get("customdata") or [""])[0]).split(",")
            if i
        }
    )
    if picked != st.session_state.get("_explore.picked", []):  # a new click/selection, not a replay
        st.session_state["_explore.picked"] = picked
        st.session_state[_k("sel")] = picked
    table = _table(summary).rename(columns={"median": f"median {_LABELS[args['metric']]}"})
    st.dataframe(
        table,
        hide_index=True,
        key=_k("table"),
        column_config={
            "run_ids": st.column_config.TextColumn("run ids (newest first)", width="large"),
            "efficiency": st.column_config.TextColumn("efficiency", help="lower bound ÷ measured"),
            "bound_s": st.column_config.TextColumn("bound (s)", help="median lower bound of an epoch"),
            "verdict": st.column_config.TextColumn("verdict", help=_VERDICT_HELP),
            "predicted_epoch_s": st.column_config.TextColumn("predicted (s)", help=_PREDICTED_HELP),
            "predicted_from": st.column_config.TextColumn("predicted from", help=_FROM_HELP),
            "cv": st.column_config.TextColumn("CV", help="coefficient of variation across runs"),
            "noisy": st.column_config.CheckboxColumn("noisy", help="CV over 10 %: differences may be noise"),
            "interval": st.column_config.TextColumn(
                "interval", help="the 95 % interval, or why a group has none (n < 6)"
            ),
            "n_configs": st.column_config.NumberColumn("configs", help="distinct configs pooled into this point"),
            "differs": st.column_config.TextColumn("fields that differ", help="settings that vary within the point"),
        },
    )
    return summary


_REASONS = {
    "bound_s": "no bound: measured without it",
    "efficiency": "no bound: measured without it",
    "predicted_epoch_s": "not predicted",
    "cv": "one run: no spread",
}


def _table(summary: pd.DataFrame) -> pd.DataFrame:
    """The groups as a person reads them: 3 significant figures, the interval as one text column ("lo – hi", or
    the reason there is none: "no interval: 5 runs"), never None in a cell."""
    out = summary.copy()
    out.insert(
        out.columns.get_loc("lo"),
        "interval",
        [
            note if isinstance(note, str) and note else f"{sig(lo)} – {sig(hi)}"
            for note, lo, hi in zip(out["interval_note"], out["lo"], out["hi"])
        ],
    )
    out = out.drop(columns=["lo", "hi", "interval_note"])
    out["verdict"] = out["verdict"].fillna("no verdict: no bound")
    out["predicted_from"] = out["predicted_from"].fillna("not predicted")
    if "efficiency" in out:  # above 1 no fraction and no verdict: the bound was measured under other conditions
        above = out["efficiency"] > 1
        out["efficiency"] = [
            api.efficiency_text(v) if pd.notna(v) else _REASONS["efficiency"] for v in out["efficiency"]
        ]
        out.loc[above, "verdict"] = "no verdict: the bound was measured under other conditions"
    return readable(out, _REASONS)


def predictions(args: dict[str, Any]) -> None:
    """Predicted against measured epoch time for the predicted runs among the filtered ones; nothing if none."""
    runs = cached(api.explore_predictions, filters=args["filters"])
    if runs.empty:
        return
    st.subheader("Predicted vs measured")
    held_out = int((runs["predicted_from"] == "prior").sum())
    st.caption(
        f"{len(runs)} predicted run(s), {held_out} predicted before they ran (prior); 'own' predictions "
        "were fitted on the run's own probe after it, so they are no test of the model. On the dotted line "
        "the prediction was exact; above it, the run was faster than predicted."
    )
    safe = chart_safe(runs, ["predicted_from", "predicted_limit", "workload", "model", "loader", "run_id"])
    st.plotly_chart(api.prediction_chart(safe), key=_k("predicted"))


def _pooling_banner(summary: pd.DataFrame) -> None:
    """Say so when a point's median pools distinct configs (issue 11): which points, and the fields to split on."""
    if "n_configs" not in summary:
        return
    pooled = summary[summary["n_configs"] > 1]
    if pooled.empty:
        return
    fields = sorted({f.strip() for d in pooled["differs"].fillna("") for f in d.split(",") if f.strip()})
    st.warning(
        f"{len(pooled)} of {len(summary)} point(s) pool several distinct configs (up to "
        f"{int(pooled['n_configs'].max())} in one point), so their median and interval mix unlike runs. "
        f"Fields that differ within a point: {plain(', '.join(fields) or '?')}. Colour or facet by one of them, "
        "or filter, to get one config per point; the table's 'configs' column says which points pool.",
        icon=":material/call_merge:",
    )


@st.cache_resource(max_entries=64, ttl=300, show_spinner=False)
def _figure(token: str, args_json: str, _summary: pd.DataFrame) -> Any:
    """The chart for (store version, settings), built once and shared by every session: Plotly's figure
    building is most of a faceted view's server time. NOTE: never mutated after this, so sharing is safe."""
    args = json.loads(args_json)
    return api.metric_chart(
        _summary,
        x=args["x"],
        metric=args["metric"],
        color=args["color"],
        facet=args["facet"],
        log_y=bool(args.get("log")),
    )


def selected_runs() -> None:
    """Links to the runs picked in the chart; one run opens directly, 2–4 can be compared."""
    ids = st.session_state.get(_k("sel")) or []
    if not ids:
        st.caption("Click a point or draw a box on the chart to pick runs.")
        return
    if len(ids) == 1 and st.session_state.get("_explore.picked") == ids:
        st.session_state["_explore.picked"] = []  # so coming back does not bounce to the run again
        st.switch_page("pages/runs.py", query_params={"run": ids[0]})
    # the labels are text and the addresses are this app's own pages, whatever the ids hold
    st.markdown(
        f"**Selected runs ({len(ids)})**: "
        + " · ".join(f"[{plain(i)}](/runs?run={quote(i, safe='')})" for i in ids[:50])
    )
    if 2 <= len(ids) <= 4:
        st.markdown(f"[Compare these runs](/runs?compare={quote(','.join(ids), safe=',')})")
    if st.button("Clear selection"):
        st.session_state[_k("sel")] = []
        st.rerun()
