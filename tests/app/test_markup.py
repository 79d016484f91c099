"""Nothing a URL or a user said is rendered as markup (issue 19, section 3): every message that echoes it holds the
text as typed, escaped so that Streamlit's Markdown shows it literally, and a chart's labels hold no Plotly HTML.

A share link is something colleagues click: `/explore?x=[Session expired](https://evil)` must not put a working
link inside the app's own warning. tests/browser/test_markup_in_chromium.py checks the same in a real chromium.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.store import connect
from tests._markup import live_markup, seen
from ui.text import plain

LINK = "[Session expired - click to log in](https://example.org/login)"
IMAGE = "![p](http://127.0.0.1:9/p.png)"
PAYLOADS = [LINK, IMAGE, "__import__", ":red[alert] $x^2$", "<b>bold</b> &amp; :smile: www.example.org"]
ANCHOR = "<a href='https://example.org/chart'>click</a>"


# pieces of Markdown, GFM and Streamlit's own syntax, strung together at random
PIECES = [*"[]()!*_`<>$:~|&#=+-.\\@/ \nabwhtpsx1", "http://", "www.", ":red[", "->", "&amp;", ":smile:", "1. "]
MARKDOWNISH = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.one_of(MARKDOWNISH, st.text()).filter(lambda t: "\u2060" not in t))  # seen() drops joiners
def test_plain_text_reads_as_typed_and_holds_no_markup(text):
    shown = plain(text)
    assert not live_markup(shown), (text, shown)
    assert seen(shown) == "\n".join(line.strip() for line in text.splitlines())


def _messages(at) -> list[str]:
    return [
        str(m.value)
        for kind in ("error", "warning", "info", "success", "caption", "markdown")
        for m in getattr(at, kind)
    ]


def _quoting(at, text: str) -> list[str]:
    """The messages whose visible text quotes `text` (URL values are quoted up to 60 characters)."""
    return [m for m in _messages(at) if text[:60].strip() in seen(m)]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_url_value_on_explore_is_shown_as_text(seeded, open_page, payload):
    at = open_page("explore", x=payload)
    assert not at.exception
    [warning] = _quoting(at, payload)
    assert seen(warning).startswith("Ignored URL parameter x=")
    assert not live_markup(warning), warning


@pytest.mark.parametrize("payload", [LINK, IMAGE])
def test_a_url_parameter_name_is_shown_as_text(seeded, open_page, payload):
    for page in ("explore", "launch"):
        at = open_page(page, **{payload: "1"})
        assert not at.exception
        [warning] = _quoting(at, payload)
        assert not live_markup(warning), (page, warning)


@pytest.mark.parametrize(
    "param, value",
    [
        ("run", LINK),
        ("run", IMAGE),
        ("run", "__import__"),
        ("compare", f"{IMAGE},{LINK}"),
        ("compare", f"__import__,{IMAGE}"),
    ],
)
def test_run_ids_from_the_url_are_shown_as_text(seeded, open_page, param, value):
    at = open_page("runs", **{param: value})
    assert not at.exception
    [error] = at.error
    assert "is not a run id" in seen(error.value) and value.split(",")[0][:60] in seen(error.value)
    assert not live_markup(error.value), error.value


def test_stored_text_on_the_run_page_is_shown_as_text(seeded, open_page):
    """A run's error, host and lower-bound note come from the store, where any user may have put them."""
    db, ids = seeded
    with connect(db, read_only=False) as conn:
        conn.execute(
            "UPDATE runs SET status = 'failed', error = ?, host = ?, bound_note = ? WHERE run_id = ?",
            [LINK, IMAGE, "__import__ :red[x]", ids[0]],
        )
    at = open_page("runs", run=ids[0])
    assert not at.exception
    for text in (LINK, IMAGE, "__import__ :red[x]"):
        quoting = _quoting(at, text)
        assert quoting, (text, _messages(at))
        assert not [m for m in quoting if live_markup(m)], quoting


def test_a_query_error_quoting_the_url_is_shown_as_text(seeded, open_page):
    at = open_page("history", sql=f"SELECT CAST('{IMAGE}' AS INTEGER)")
    assert not at.exception
    [error] = at.error
    assert seen(error.value).startswith("Query not run:") and IMAGE in seen(error.value)
    assert not live_markup(error.value), error.value


def test_a_launch_value_is_shown_as_text_under_its_field(seeded, open_page):
    at = open_page("launch", loader=LINK)
    assert not at.exception
    inline = [e.value for e in at.error if e.value.startswith("**Loader**")]
    assert inline and LINK[:40] in seen(inline[0]), _messages(at)
    assert not live_markup(inline[0].removeprefix("**Loader**")), inline


def _plotly_specs(at) -> str:
    return " ".join(chart.proto.spec for chart in at.get("plotly_chart"))


def test_a_query_result_in_the_chart_is_no_html(seeded, open_page):
    """`/history?sql=` names the chart's labels and axis titles; Plotly would render <a href> there as a link."""
    literal = ANCHOR.replace("'", "''")
    at = open_page("history", sql=f"""SELECT '{literal}' AS "{ANCHOR}", 1 AS n""")
    assert not at.exception and not at.error
    spec = _plotly_specs(at)
    assert "&lt;a href" in spec  # the label is there, as text
    assert "<a href" not in spec and "\\u003ca href" not in spec


def test_a_tag_on_the_explore_chart_is_no_html(seeded, open_page):
    db, ids = seeded
    with connect(db, read_only=False) as conn:
        conn.execute("UPDATE runs SET tag = ? WHERE run_id = ?", [ANCHOR, ids[0]])
    at = open_page("explore", x="tag")
    assert not at.exception and not at.error
    spec = _plotly_specs(at)
    assert "&lt;a href" in spec
    assert "<a href" not in spec and "\\u003ca href" not in spec
