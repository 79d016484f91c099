"""Plotly figures as pure functions of DataFrames, so they are testable without Streamlit.

Inputs are the frames the store returns: `explore_summary` (one row per group with median, lo, hi,
n and run_ids), `get_epochs`, `get_steps`, or any query result. Every figure that shows runs carries
their ids in `custom_data`, so a click or a box selection in the dashboard hands back run ids.

    fig = metric_chart(summary, x="loader", metric="epoch_s", color="workers")
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from engine.config import config_fields

__all__ = [
    "METRIC_LABELS",
    "auto_chart",
    "compare_chart",
    "epoch_breakdown_chart",
    "epoch_chart",
    "metric_chart",
    "prediction_chart",
    "step_timeline_chart",
]

METRIC_LABELS = {
    "epoch_s": "epoch time (s)",
    "samples_per_s": "samples/s",
    "data_wait_share": "data-wait share",
    "gpu_idle_share": "GPU idle share",
    "gpu_idle_data_share": "GPU idle share: waiting on data",
    "gpu_idle_copy_share": "GPU idle share: waiting on copies",
    "gpu_idle_other_share": "GPU idle share: other host time",
    "mean_gpu_util": "GPU utilisation (NVML, %)",
    "startup_s": "start-up to first batch (s)",
}
_PHASES = {"data_wait_s": "data wait", "h2d_s": "copy to device", "compute_s": "compute"}
_NONE = "(none)"
_VERDICT = ("bound_s", "efficiency", "verdict")  # shown wherever epoch time is
_HOVER_IDS = 3  # ids written into the hover box; the rest are counted


def _empty(title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title,
        xaxis_visible=False,
        yaxis_visible=False,
        annotations=[{"text": "no data", "showarrow": False, "font": {"size": 16}}],
    )
    return fig


def _hover_ids(ids: str, n: int) -> str:
    parts = [p for p in str(ids or "").split(",") if p]
    more = n - len(parts[:_HOVER_IDS])
    return ", ".join(parts[:_HOVER_IDS]) + (f" (+{more} more)" if more > 0 else "")


def _interval_text(df: pd.DataFrame) -> list[str]:
    """The hover's interval: "lo – hi", or the store's note ("no interval: 3 runs") where there is none."""
    notes = df["interval_note"] if "interval_note" in df else pd.Series([None] * len(df), index=df.index)
    return [
        str(note)
        if isinstance(note, str) and note
        else (f"{lo:.4g} – {hi:.4g}" if pd.notna(lo) and pd.notna(hi) else f"no interval: {n} runs")
        for note, lo, hi, n in zip(notes, df["lo"], df["hi"], df["n"])
    ]


def _configs_text(n_configs: int, differs: str | None) -> str:
    """ "1" for a point of one config; "4, POOLED: differ in mode, n_models" for a point that pools several."""
    if pd.isna(n_configs) or int(n_configs) <= 1:
        return "1"
    return f"{int(n_configs)}, POOLED: differ in {differs or '?'}"


def _readable_y(fig: go.Figure, values: pd.Series, log_y: bool = False) -> None:
    """Axis numbers to 3 significant figures; and where the values barely differ (one point, or repeats equal to
    6 digits), a range of +-10 % around them, not an axis from 1.417472 to 1.417478."""
    fig.update_yaxes(tickformat=".3~g")
    v = pd.to_numeric(values, errors="coerce").dropna()
    if log_y or v.empty:
        return
    lo, hi = float(v.min()), float(v.max())
    if hi - lo <= 1e-3 * max(abs(hi), abs(lo), 1e-12):
        mid = (hi + lo) / 2
        pad = abs(mid) * 0.1 or 1.0
        fig.update_yaxes(range=[mid - pad, mid + pad])


def _is_count(col: pd.Series) -> bool:
    """Integer settings (workers, depth, threads, batch size): categories on an axis, never 0.5 or 1.5."""
    return pd.api.types.is_integer_dtype(col) or (
        pd.api.types.is_float_dtype(col) and col.dropna().map(float.is_integer).all()
    )


def metric_chart(
    summary: pd.DataFrame,
    *,
    x: str,
    metric: str = "epoch_s",
    color: str | None = None,
    facet: str | None = None,
    log_y: bool = False,
) -> go.Figure:
    """Median of `metric` per group with error bars (`lo`..`hi`) where a group has repeats.

    `summary` columns: x, [color], [facet], median, lo, hi, n, run_ids (comma-separated), and where
    present interval_note, n_configs and differs (the hover then says how many configs a point pools).
    A numeric x is drawn as lines between points; a categorical one as points. Integer settings (worker
    counts) are categories, and colours at one x are drawn side by side, so their error bars never overlap.
    `log_y`: a log axis, where one slow outlier does not flatten the rest.
    """
    label = METRIC_LABELS.get(metric, metric)
    if summary.empty:
        return _empty(f"{label} by {x}")
    df = summary.copy()
    for col in {c for c in (color, facet) if c}:
        df[col] = df[col].astype("string").fillna(_NONE)  # discrete colours and facets, even for numbers
    numeric_x = pd.api.types.is_numeric_dtype(df[x]) and not pd.api.types.is_bool_dtype(df[x])
    df = df.sort_values([c for c in (facet, color, x) if c])  # NOTE: numbers sorted as numbers: 2, 4, 16
    if numeric_x and _is_count(df[x]):
        numeric_x = False
        df[x] = df[x].map(lambda v: _NONE if pd.isna(v) else str(int(v))).astype("string")
        order = sorted(df[x].unique(), key=lambda v: (v == _NONE, int(v) if v != _NONE else 0))
    elif not numeric_x:
        df[x] = df[x].astype("string").fillna(_NONE)
        order = sorted(df[x].unique())
    df["err_plus"] = (df["hi"] - df["median"]).clip(lower=0).fillna(0)
    df["err_minus"] = (df["median"] - df["lo"]).clip(lower=0).fillna(0)
    df["runs"] = [_hover_ids(ids, n) for ids, n in zip(df["run_ids"], df["n"])]
    df["interval"] = _interval_text(df)
    pooled = "n_configs" in df
    if pooled:
        df["configs"] = [_configs_text(k, d) for k, d in zip(df["n_configs"], df.get("differs", [""] * len(df)))]
    title = f"{label} by {x}" + (f", colour {color}" if color else "") + (f", per {facet}" if facet else "")
    kwargs: dict[str, Any] = dict(
        x=x,
        y="median",
        color=color,
        facet_col=facet,
        error_y="err_plus",
        error_y_minus="err_minus",
        custom_data=["run_ids"],
        labels={"median": f"median {label}", "runs": "run ids"},
        hover_data={
            "n": True,
            "interval": True,
            **({"configs": True} if pooled else {}),
            "runs": True,
            "err_plus": False,
            "err_minus": False,
            **{c: ":.3f" if c != "verdict" else True for c in _VERDICT if c in df},
        },
        title=title,
    )
    if facet:
        kwargs["facet_col_wrap"] = 3
    if "source" in df and (df["source"] == "observed").any():  # the user's own loop, marked apart from the lab's
        kwargs["symbol"] = "source"
    if numeric_x:
        fig = px.line(df, markers=True, **kwargs)
    else:
        fig = px.scatter(df, **kwargs)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=order)
        if color:
            fig.update_layout(scattermode="group", scattergap=0.5)  # colours side by side at one x
    fig.update_traces(marker={"size": 10})
    fig.update_layout(clickmode="event+select", legend_title_text=color or "")
    if log_y:
        fig.update_yaxes(type="log")
    _readable_y(fig, pd.concat([df["median"], df["lo"], df["hi"]]), log_y)
    return fig


def prediction_chart(runs: pd.DataFrame) -> go.Figure:
    """Each predicted run's predicted epoch against its measured median steady epoch, coloured by what the
    prediction came from (prior: made before the run; own: fitted on its own probe), with y = x for reference:
    a point above the line was predicted slower than it ran. `runs`: explore_predictions' columns."""
    title = "Predicted vs measured epoch time"
    if runs.empty:
        return _empty(title)
    df = runs.copy()
    df["predicted_from"] = df["predicted_from"].astype("string").fillna(_NONE)
    setting = [
        c for c in ("workload", "model", "loader", "workers", "prefetch_depth", "threads", "batch_size") if c in df
    ]
    fig = px.scatter(
        df,
        x="epoch_s",
        y="predicted_epoch_s",
        color="predicted_from",
        custom_data=["run_id"],
        hover_data={"run_id": True, "predicted_limit": True, **{c: True for c in setting}},
        labels={
            "epoch_s": "measured epoch (s, median steady)",
            "predicted_epoch_s": "predicted epoch (s)",
            "predicted_from": "predicted from",
        },
        category_orders={"predicted_from": ["prior", "own"]},
        title=title,
    )
    top = float(max(df["epoch_s"].max(), df["predicted_epoch_s"].max())) * 1.05
    fig.add_trace(
        go.Scatter(
            x=[0, top],
            y=[0, top],
            mode="lines",
            name="predicted = measured",
            line={"dash": "dot", "color": "grey"},
            hoverinfo="skip",
        )
    )
    fig.update_traces(marker={"size": 9}, selector={"mode": "markers"})
    fig.update_layout(clickmode="event+select")
    return fig


def epoch_chart(epochs: pd.DataFrame, *, compact: bool = False) -> go.Figure:
    """Wall time per epoch, one line per model/rank; warm-up epochs are drawn as open markers.

    epochs: get_epochs' rows, or a running job's epoch events (engine.jobs.job_progress). compact: the
    Launch page's live card, short and without title or legend."""
    if epochs.empty:
        return _empty("epoch time")
    df = epochs.sort_values("epoch").copy()
    df["series"] = "model " + df["model_idx"].astype(str) + " · rank " + df["rank"].astype(str)
    df["phase"] = df["warmup"].map({True: "warm-up", False: "measured"}).fillna("measured")
    fig = px.line(
        df,
        x="epoch",
        y="wall_s",
        color="series" if df["series"].nunique() > 1 else None,
        markers=True,
        symbol="phase",
        symbol_map={"warm-up": "circle-open", "measured": "circle"},
        hover_data=["samples_per_s", "ttfb_s"],
        labels={"wall_s": "epoch time (s)"},
        title=None if compact else "epoch time",
    )
    fig.update_xaxes(dtick=1)
    _readable_y(fig, df["wall_s"])
    if compact:
        fig.update_layout(height=220, margin=dict(l=0, r=0, t=10, b=0), showlegend=False)
    return fig


def epoch_breakdown_chart(epochs: pd.DataFrame) -> go.Figure:
    """Stacked seconds per epoch: data wait, copy to device, compute, and the rest of the wall time."""
    if epochs.empty:
        return _empty("where each epoch's time goes")
    df = epochs.groupby("epoch", as_index=False)[["wall_s", *_PHASES]].mean()  # mean over models/ranks
    # NOTE: a phase the run did not time (an observed loop's copy) is NaN: it is no segment at all, never a zero
    # that a stack could draw over, and its time stays in "other", which the title says
    df["other_s"] = (df["wall_s"] - df[list(_PHASES)].sum(axis=1, min_count=1).fillna(0)).clip(lower=0)
    long = df.melt(id_vars="epoch", value_vars=[*_PHASES, "other_s"], var_name="phase", value_name="seconds")
    long["phase"] = long["phase"].map({**_PHASES, "other_s": "other"})
    missing = [name for col, name in _PHASES.items() if df[col].isna().all()]
    long = long.dropna(subset=["seconds"])
    title = "where each epoch's time goes" + (f" ({', '.join(missing)}: not measured, in other)" if missing else "")
    fig = px.bar(
        long,
        x="epoch",
        y="seconds",
        color="phase",
        barmode="stack",
        title=title,
        category_orders={"phase": [*_PHASES.values(), "other"]},
    )
    fig.update_xaxes(dtick=1)
    return fig


def step_timeline_chart(steps: pd.DataFrame, epoch: int | None = None) -> go.Figure:
    """One epoch's steps laid end to end: each step's data wait, copy and compute as segments in time."""
    title = "step timeline" + (f", epoch {epoch}" if epoch is not None else "")
    if steps.empty:
        return _empty(title)
    df = steps.sort_values("step").copy()
    if df[["model_idx", "rank"]].drop_duplicates().shape[0] > 1:
        first = df.iloc[0]
        df = df[(df["model_idx"] == first["model_idx"]) & (df["rank"] == first["rank"])]
        title += f" (model {first['model_idx']}, rank {first['rank']})"
    # NOTE: a step's total may exceed the sum of its parts (loop overhead): the gap shows as white space.
    df["start"] = df["total_s"].cumsum().shift(fill_value=0.0)
    rows = []
    for col, name in _PHASES.items():
        offset = sum(df[c] for c in list(_PHASES)[: list(_PHASES).index(col)]) if col != "data_wait_s" else 0.0
        rows.append(pd.DataFrame({"step": df["step"], "phase": name, "seconds": df[col], "base": df["start"] + offset}))
    long = pd.concat(rows, ignore_index=True)
    fig = px.bar(
        long,
        x="seconds",
        y="phase",
        base="base",
        color="phase",
        orientation="h",
        hover_data=["step"],
        title=title,
        labels={"seconds": "time into the epoch (s)"},
    )
    fig.update_layout(barmode="overlay", showlegend=False)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(_PHASES.values())))
    return fig


def compare_chart(epochs: pd.DataFrame) -> go.Figure:
    """Epoch curves of several runs overlaid (frame with a run_id column), model 0 / rank 0 only."""
    if epochs.empty:
        return _empty("epoch time, compared")
    df = epochs[(epochs["model_idx"] == 0) & (epochs["rank"] == 0)].sort_values(["run_id", "epoch"])
    fig = px.line(
        df,
        x="epoch",
        y="wall_s",
        color="run_id",
        markers=True,
        custom_data=["run_id"],
        labels={"wall_s": "epoch time (s)"},
        title="epoch time, compared",
    )
    fig.update_xaxes(dtick=1)
    return fig


_MAX_COLORS = 12  # a second category with more values than this is no legend a reader can follow


def _settings() -> set[str]:
    """Numeric columns that are settings of a run (workers, batch_size): categories to group by, never summed."""
    return {f.name for f in config_fields()}


def _is_measure(df: pd.DataFrame, c: str, settings: set[str]) -> bool:
    return pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) and c not in settings


def auto_chart(df: pd.DataFrame) -> go.Figure | None:
    """A first look at a query result, or None: a measure (a numeric column that is no run setting, floats first)
    on y; a time column on x as a line, else the first category (text, or a setting such as workers) on x with
    the next one of at most 12 values as the colour. One bar per row where (x, colour) is unique, else every row as
    a point: the chart never adds rows up, and a setting is never a y."""
    if df.empty or len(df.columns) < 2:
        return None
    settings = _settings()
    measures = sorted(
        (c for c in df.columns if _is_measure(df, c, settings)), key=lambda c: not pd.api.types.is_float_dtype(df[c])
    )  # floats (times, shares) first
    times = [c for c in df.columns if pd.api.types.is_datetime64_any_dtype(df[c])]
    categories = [c for c in df.columns if c not in measures and c not in times]
    if not measures:
        return None
    y = measures[0]
    small = df.head(200)  # a mark per row: more than this is unreadable
    colors = [c for c in categories if small[c].nunique(dropna=False) <= _MAX_COLORS]
    if times:
        color = colors[0] if colors else None
        return px.line(
            _as_text(small.sort_values(times[0]), [color]),
            x=times[0],
            y=y,
            color=color,
            markers=True,
            title=f"{y} over {times[0]}",
        )
    if not categories:
        x = measures[1] if len(measures) > 1 else None
        return px.scatter(small, x=x, y=y, title=f"{y} against {x}") if x else None
    x = categories[0]
    color = next((c for c in colors if c != x), None)
    keys = [x] + ([color] if color else [])
    plot = _as_text(small, keys)
    title = f"{y} by {x}" + (f" and {color}" if color else "")
    if plot.duplicated(keys).any():  # several rows per bar would be summed by a stack: show each row instead
        return px.strip(plot, x=x, y=y, color=color, title=title + " (each row a point)")
    return px.bar(plot, x=x, y=y, color=color, barmode="group", title=title)


def _as_text(df: pd.DataFrame, columns: list[str | None]) -> pd.DataFrame:
    """Category columns as text (a setting's 2 and 8 are labels, not a scale), missing values named."""
    return df.assign(**{c: df[c].astype("string").fillna(_NONE) for c in columns if c})
