"""What a user or a URL said, shown as text: never as Markdown, HTML or a chart's markup.

Streamlit renders Markdown in st.warning/error/info/success, st.caption, st.markdown, st.toast, headings, widget
labels, help tooltips and radio captions; Plotly renders a subset of HTML (`<a href>`, `<b>`) in a chart's labels.
So a share link `/explore?x=[Session expired](https://evil.example/login)` would show a working link inside the
app's own warning, and `![p](http://host/p.png)` would make every viewer's browser fetch that address. Every
place that echoes user input (URL values, run ids, tags, notes, plugin names, error messages that quote input,
SQL errors) passes it through one of these first:

    st.warning(f"Ignored URL parameter x={plain(repr(raw))}: not one of the choices")
    st.error(plain(error))                       # a whole message that quotes input
    fig = api.auto_chart(chart_safe(df))          # strings in a Plotly chart's ticks, legend, hover and titles

The browser test tests/browser/test_markup.py checks the result in a real chromium: no link, no image, no request.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re
from typing import Any, Iterable

import pandas as pd

__all__ = ["chart_safe", "plain", "readable", "sig", "when"]

_WJ = "\u2060"  # WORD JOINER: zero width, invisible, not a line-break opportunity
# CommonMark renders a backslash-escaped ASCII punctuation character as itself: links, images, emphasis, code,
# HTML, entities, headings, lists, tables, strikethrough, $math$ and :colour[directives] all start with one.
_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")
# NOTE: Streamlit's Markdown also rewrites the text *after* parsing, where escapes no longer count: GFM's literal
# autolinks (http://…, www.…, a@b.c), :emoji: / :material_icon: / :streamlit: shortcodes, and "->"-style arrows.
# An invisible word joiner inside each such pattern keeps the text as typed (only a copy carries the joiner).
_AFTER_PARSE = [
    (re.compile(r"(?<=:)(?=[\w+/-])"), _WJ),  # :shortcode:, http://
    (re.compile(r"(?i)(?<=www)(?=\.)"), _WJ),  # www.example.org
    (re.compile(r"(?<=@)(?=\w)"), _WJ),  # an e-mail address
    (re.compile(r"(?<!\S)(<->|->|<-|--|>=|<=|~=)(?!\S)"), None),  # arrows, dashes and ≥ between spaces
]


def _break(match: re.Match) -> str:
    token = match.group(0)
    return token[0] + _WJ + token[1:]


def plain(value: Any) -> str:
    """Markdown source that any Streamlit element shows as exactly `str(value)`: no link, image, emphasis, HTML,
    icon or emoji. Line breaks stay line breaks (hard breaks inside one paragraph, so no block can start)."""
    text = str(value)
    for pattern, joiner in _AFTER_PARSE:
        text = pattern.sub(joiner, text) if joiner else pattern.sub(_break, text)
    lines = [_PUNCT.sub(r"\\\1", line.strip()) for line in text.splitlines()] or [""]
    return "\\\n".join(lines)


def chart_safe(df: pd.DataFrame, columns: Iterable[str | None] | None = None) -> pd.DataFrame:
    """A copy of df whose text (the given columns, default all; and the column names, which become axis titles)
    Plotly shows as typed: `<`, `>` and `&` become entities, so `<a href=...>` in a tag is no link in the chart."""
    names = [c for c in (df.columns if columns is None else columns) if c is not None and c in df.columns]
    out = df.copy()
    for c in names:
        if not (pd.api.types.is_numeric_dtype(out[c]) or pd.api.types.is_datetime64_any_dtype(out[c])):
            out[c] = out[c].map(lambda v: html.escape(v, quote=False) if isinstance(v, str) else v)
    if columns is None:
        out.columns = [html.escape(c, quote=False) if isinstance(c, str) else c for c in out.columns]
    return out


# ---------------------------------------------------------------------------- numbers as a person reads them


def sig(value: Any, unit: str = "", digits: int = 3, missing: str = "not measured") -> str:
    """`value` to `digits` significant figures, never in e-notation between 1e-4 and 1e9 and with thousands
    separated: 0.0428, 1.42, 17,600. A missing value (None, NaN) reads `missing`: give the reason."""
    if value is None or value is pd.NA or isinstance(value, str):
        return missing if value is None or value is pd.NA else value
    x = float(value)
    if math.isnan(x):
        return missing
    if x == 0 or not 1e-4 <= abs(x) < 1e9:
        text = f"{x:.{digits}g}"
    else:
        decimals = digits - 1 - math.floor(math.log10(abs(x)))  # negative: round to tens, hundreds, ...
        text = f"{round(x, decimals):,.{max(0, decimals)}f}"
    return f"{text}{unit}"


def when(value: Any) -> str:
    """A stored timestamp (naive UTC, the store's convention) to the second with its zone: 2026-11-25 22:13:40 UTC."""
    if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return "not recorded"
    ts = pd.Timestamp(value)
    ts = ts.tz_localize(dt.timezone.utc) if ts.tzinfo is None else ts.tz_convert(dt.timezone.utc)
    return ts.strftime("%Y-%m-%d %H:%M:%S UTC")


def readable(df: pd.DataFrame, reasons: dict[str, str] | None = None) -> pd.DataFrame:
    """A copy of df for display: floats to 3 significant figures, timestamps to the second with their zone, and a
    missing value as its reason (`reasons[column]`, else "not measured"): never "None", "nan" or a bare dash."""
    out = df.copy()
    reasons = reasons or {}
    for c in out.columns:
        col = out[c]
        why = reasons.get(c, "not measured")
        if pd.api.types.is_datetime64_any_dtype(col):
            out[c] = [when(v) if pd.notna(v) else why for v in col]
        elif pd.api.types.is_float_dtype(col):
            out[c] = [sig(v, missing=why) for v in col]
        elif col.dtype == object and col.map(lambda v: isinstance(v, (float, dt.datetime))).any():
            out[c] = [
                sig(v, missing=why)
                if isinstance(v, float) or v is None
                else when(v)
                if isinstance(v, dt.datetime)
                else v
                for v in col
            ]
    return out
