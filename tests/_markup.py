"""Reading what the dashboard shows, for tests: the text a reader sees in a Markdown message, and the Markdown
that is still live in it. Written from the CommonMark spec and Streamlit's own Markdown plugins, not from ui/text.py.

    assert payload in seen(at.warning[0].value)        # the reader sees the URL's text as typed
    assert not live_markup(at.warning[0].value)         # and nothing in it renders as a link, image or emphasis
"""

from __future__ import annotations

import re

__all__ = ["live_markup", "seen"]

_ESCAPABLE = r"[!-/:-@\[-`{-~]"  # CommonMark: a backslash before any ASCII punctuation makes it literal
# Characters that start Markdown, HTML, math or GFM when not escaped; and the two-character starts of an image,
# a directive (:red[…]) or a shortcode, and an HTML entity
_SPECIAL = set("\\`*_[]<$~|")
_STARTS = re.compile(r"!\[|:[\w+/-]|&#?\w+;")
# What Streamlit's Markdown rewrites in text after parsing, where escapes no longer count (its frontend's
# GFM autolink literal, remark-emoji and its :material_…: / :streamlit: icon plugins)
_AFTER_PARSE = re.compile(r"https?://|www\.|[\w.+-]@\w|:[\w+-]+:", re.IGNORECASE)


def seen(markdown: str) -> str:
    """The text a reader sees for Markdown whose text was escaped: CommonMark drops the backslash of an escaped
    punctuation character, a backslash at a line's end is a line break, and U+2060 (word joiner) is invisible.
    The app's own markup (`**field**`) stays as it is."""
    text = re.sub(r"\\\n", "\n", markdown)
    text = re.sub(r"\\(" + _ESCAPABLE + ")", r"\1", text)
    return text.replace("\u2060", "")


def live_markup(markdown: str) -> list[str]:
    """The pieces of `markdown` that would still render as markup: unescaped special characters, and text that
    Streamlit turns into links or icons after parsing. Empty for text that shows exactly as typed."""
    live, text, i = [], [], 0
    while i < len(markdown):
        ch = markdown[i]
        if ch == "\\" and i + 1 < len(markdown) and re.match(_ESCAPABLE + "|\n", markdown[i + 1]):
            text.append(markdown[i + 1])
            i += 2
            continue
        if ch in _SPECIAL:
            live.append(ch)
        elif start := _STARTS.match(markdown, i):
            live.append(start.group(0))
        text.append(ch)
        i += 1
    return live + _AFTER_PARSE.findall("".join(text))
