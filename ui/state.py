"""A page's state lives in the URL: widgets are filled from `st.query_params` and written back to it.

A page declares its parameters once (`Param`s), then per run:

    warnings = bind("explore", SPEC)          # URL -> widget keys "explore.<name>" (when the URL changed)
    ... widgets with key="explore.<name>" ...
    publish("explore", SPEC)                  # widget values -> URL (defaults omitted: short links)

Tampered URLs (an unknown parameter, a value that is not allowed) never raise: the bad part is
dropped with a warning and the default is used. `restore_view` loads a saved `?view=<id>`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import streamlit as st

from engine import api
from ui.text import plain

__all__ = ["Param", "bind", "decode", "encode", "publish", "published", "restore_view", "share_link", "widget_key"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Param:
    """One URL parameter. kind: "choice" (one of choices), "many" (comma list of choices),
    "date" (ISO date or empty), "ids" (comma list of run ids), "text" (free text), "value" (what `parse` makes
    of the text: the launch form's config fields, through the schema's own coercion; ValueError if unusable)."""

    default: Any
    kind: str = "choice"
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    parse: Callable[[str], Any] | None = None

    def allowed(self) -> Sequence[str] | None:
        return self.choices() if callable(self.choices) else self.choices


def widget_key(page: str, name: str) -> str:
    return f"{page}.{name}"


def _check(name: str, raw: str, p: Param) -> Any:
    """The parameter's value, or ValueError saying why it is not acceptable."""
    if p.kind == "value":
        return p.parse(raw)
    allowed = p.allowed()
    if p.kind == "choice":
        if allowed is not None and raw not in allowed:
            raise ValueError(f"'{raw}' is not one of the choices")
        return raw
    if p.kind == "date":
        return dt.date.fromisoformat(raw).isoformat() if raw else ""
    if p.kind == "text":
        if len(raw) > 20_000:
            raise ValueError("is too long")
        return raw
    items = [v for v in raw.split(",") if v]
    if p.kind == "ids":
        bad = [v for v in items if not _ID.match(v)]
        if bad or len(items) > 100:
            raise ValueError(f"'{raw[:60]}' is not a list of run ids")
        return items
    unknown = [v for v in items if allowed is not None and v not in allowed]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} not among the values in the store")
    return items


def decode(params: Mapping[str, str], spec: Mapping[str, Param]) -> tuple[dict[str, Any], list[str]]:
    """URL parameters -> a complete state (defaults filled in) and warnings for what was dropped."""
    state = {name: p.default for name, p in spec.items()}
    warnings = []
    for name, raw in params.items():
        if name not in spec:
            warnings.append(f"Ignored the unknown URL parameter '{name}'.")
            continue
        try:
            state[name] = _check(name, str(raw), spec[name])
        except ValueError as e:
            default = spec[name].default
            said = f", {default}" if default not in ("", None, []) else ""
            warnings.append(f"Ignored URL parameter {name}={str(raw)[:60]!r}: {e}; using the default{said}.")
    return state, warnings


def encode(state: Mapping[str, Any], spec: Mapping[str, Param]) -> dict[str, str]:
    """A state -> URL parameters, leaving out values equal to the default."""
    out = {}
    for name, p in spec.items():
        value = state.get(name, p.default)
        if isinstance(value, dt.date):
            value = value.isoformat()
        if value in (None, p.default) or value == [] and p.default == []:
            continue
        if isinstance(value, bool):
            value = str(value).lower()  # what parse reads back: true, false
        out[name] = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return out


def _to_widget(p: Param, value: Any) -> Any:
    if p.kind == "date":
        return dt.date.fromisoformat(value) if value else None
    return list(value) if isinstance(value, (list, tuple)) else value


def bind(page: str, spec: Mapping[str, Param], params: Mapping[str, str] | None = None) -> list[str]:
    """Fill the page's widget keys from the URL when it changed since `publish` last wrote it
    (a pasted link, back/forward), or when a key is missing. Returns warnings to show."""
    ss = st.session_state
    current = dict(st.query_params.to_dict() if params is None else params)
    current.pop("view", None)  # handled by restore_view
    changed = ss.get(f"_url.{page}") != current
    missing = [n for n in spec if widget_key(page, n) not in ss]
    if not changed and not missing:
        return []
    state, warnings = decode(current, spec)
    for name in spec if changed else missing:
        ss[widget_key(page, name)] = _to_widget(spec[name], state[name])
    ss[f"_url.{page}"] = current
    return warnings if changed else []


def publish(page: str, spec: Mapping[str, Param], state: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Write the page's state (default: its widget values) to the URL; returns the parameters."""
    ss = st.session_state
    if state is None:
        state = {n: ss.get(widget_key(page, n), p.default) for n, p in spec.items()}
    params = encode(state, spec)
    if params != st.query_params.to_dict():
        st.query_params.from_dict(params)
    ss[f"_url.{page}"] = params
    return params


def published(page: str) -> dict[str, str] | None:
    """The parameters `publish` last wrote for the page in this session (None before it did)."""
    return st.session_state.get(f"_url.{page}")


def restore_view(page: str) -> dict[str, str] | None:
    """If the URL has ?view=<id>, the saved page's parameters (st.error and None when the id is bad).
    A view saved on another page switches there."""
    view_id = st.query_params.get("view")
    if view_id is None:
        return None
    try:
        saved = api.load_view(view_id)
    except (ValueError, LookupError) as e:
        st.error(f"Could not open the shared view: {plain(e)}")
        return None
    if not isinstance(saved, dict) or not isinstance(saved.get("params", {}), dict):
        st.error(f"Could not open the shared view {plain(repr(view_id))}: it does not hold a page state.")
        return None
    params = {str(k): str(v) for k, v in saved.get("params", {}).items()}
    target = saved.get("page", page)
    if target != page and target in ("explore", "runs", "history"):
        st.switch_page(f"pages/{target}.py", query_params=params)
    return params


def share_link(page: str, params: Mapping[str, str]) -> str:
    """Save the state and return the link that restores it (absolute when the browser's URL is known)."""
    view_id = api.save_view({"page": page, "params": dict(params)})
    path = f"/{page}?view={view_id}"
    url = getattr(st.context, "url", None)  # the browser's URL without the query; None in AppTest
    if not url:
        return path
    base = url.rstrip("/")
    if base.endswith(f"/{page}"):
        base = base[: -len(page) - 1]  # the current page's own segment; a proxy's base path stays
    return base + path
