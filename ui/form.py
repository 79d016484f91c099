"""The run form and the sweep builder, generated from RunConfig's fields: a new field appears with no page change.

One expander per field group; the widget follows the field's type (a select box when the field has
choices from the registry, number inputs bounded by the field's min/max, a checkbox, a text input;
list fields are comma-separated text). Values come from a preset, the URL (every field is a query
parameter: `/launch?loader=threads&workers=4`) or the defaults, and fields that differ from the defaults
are written back to the URL, so the launch view is always shareable. Bad values are shown inline under
the field that ConfigError names.

    form = run_form("run")            # form.cfg: a valid RunConfig or None; form.error: the ConfigError
    sweep = sweep_builder("sweep", form.values)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import Any

import streamlit as st

from engine import api
from ui import state
from ui.state import Param
from ui.text import plain

__all__ = ["FormResult", "SweepResult", "preset_picker", "run_form", "sweep_builder"]

_OPEN_GROUPS = ("workload", "loader", "model", "training")  # the rest start collapsed
_PLUGIN_HELP = {"workload": "dataset to load", "model": "architecture", "model_b": "dual-*: second model's "
                "architecture (empty: same as model)", "collate": "batch collate (empty: torch's default_collate)",
                "loss": "loss(logits, y) (empty: cross-entropy)"}


@dataclass
class FormResult:
    values: dict[str, Any]
    cfg: Any = None  # RunConfig when the values are valid
    error: Any = None  # the ConfigError otherwise


@dataclass
class SweepResult:
    sweep: Any = None  # SweepConfig when valid
    error: Any = None
    n_configs: int = 0
    n_runs: int = 0


def _fields() -> list[dataclasses.Field]:
    """Visible fields; collate and loss only when the server's owner registered one (by name, never a path)."""
    return [f for f in api.config_fields() if f.metadata.get("ui") != "hidden"
            or (f.name in api.PLUGIN_FIELDS and len(api.plugin_choices(f.name)) > 1)]


def _choices(f: dataclasses.Field) -> tuple[str, ...] | None:
    """A select box's options: plugin fields offer built-ins plus the registered names of their kind."""
    return tuple(api.plugin_choices(f.name)) if f.name in api.PLUGIN_FIELDS else api.field_choices(f)


def _defaults() -> dict[str, Any]:
    return api.RunConfig().to_dict()


def _widget_value(f: dataclasses.Field, value: Any) -> Any:
    """A config value as its widget holds it: the field's type within its limits (the schema's own coercion, so a
    URL's batch_size=-1 or n_samples=1e99 is as wrong as workers=abc, never clamped), lists as comma text.
    ValueError saying what is wrong otherwise."""
    try:
        typed = api.field_value(f, value)
    except api.ConfigError as e:
        raise ValueError(e.message) from None
    return ", ".join(typed) if api.field_type(f) is list else typed


def _apply_preset(prefix: str) -> None:
    name = st.session_state.get(f"{prefix}.preset")
    if name in api.PRESETS:
        values = {**_defaults(), **api.PRESETS[name]().to_dict()}
        for f in _fields():
            st.session_state[f"{prefix}.{f.name}"] = _widget_value(f, values[f.name])


def preset_picker(prefix: str) -> None:
    """A select box over engine.presets.PRESETS; picking one fills the form."""
    st.selectbox("Preset", ["(none)", *api.PRESETS], key=f"{prefix}.preset", on_change=_apply_preset,
                 args=(prefix,), help="fills the form; every field can still be changed")


def _spec(values: dict[str, Any]) -> dict[str, Param]:
    """The form's URL parameters: one per visible field, read by the schema's coercion; `values` give the defaults
    (a URL's preset changes them)."""
    return {f.name: Param(_widget_value(f, values[f.name]), kind="value", parse=partial(_widget_value, f))
            for f in _fields()}


def _bind_url(prefix: str) -> list[str]:
    """Fill the widgets from the URL when it changed since the form last wrote it (ui/state.bind)."""
    params = st.query_params.to_dict()
    # NOTE: another page leaves the URL empty, and Streamlit forgets the state of widgets it did not draw: coming
    # back, the form is as it was left, not reset to the defaults
    params = params or state.published(prefix) or {}
    values = _defaults()
    if params.get("preset") in api.PRESETS:  # ?preset=NAME: that preset's values are the defaults under the URL's
        values.update(api.PRESETS[params["preset"]]().to_dict())
    return state.bind(prefix, _spec(values), {k: v for k, v in params.items() if k != "preset"})


def _widget(f: dataclasses.Field, key: str) -> Any:
    label, help_ = f.name, f.metadata.get("help")
    if f.name in api.PLUGIN_FIELDS:  # NOTE: the help must not invite a module path the browser may not give
        help_ = f"{_PLUGIN_HELP[f.name]}: a built-in, or a plugin the server's owner registered by name"
    choices = _choices(f)
    if choices is not None:
        options = list(choices)
        if st.session_state.get(key) not in options:  # e.g. from a URL: shown, then rejected inline
            options.append(st.session_state[key])
        return st.selectbox(label, options, key=key, help=help_, format_func=lambda v: v if v != "" else "(default)")
    kind = api.field_type(f)
    if kind is bool:
        return st.checkbox(label, key=key, help=help_)
    if kind in (int, float):
        lo, hi = f.metadata.get("min"), f.metadata.get("max")
        return st.number_input(label, min_value=None if lo is None else kind(lo), help=help_, key=key,
                               max_value=None if hi is None else kind(hi), step=kind(1) if kind is int else None,
                               format=None if kind is int else "%g")
    if kind is list:
        return st.text_input(label, key=key, help=(help_ or "") + " (comma-separated)")
    return st.text_input(label, key=key, help=help_)


def run_form(prefix: str) -> FormResult:
    """Render every RunConfig field, grouped; validate; show a ConfigError under the field it names."""
    for warning in _bind_url(prefix):
        st.warning(plain(warning))  # they quote the URL: text, never Markdown
    values, slots = _draw_fields(prefix)
    result = _validate(values, slots, st.empty())
    state.publish(prefix, _spec(_defaults()), values)
    return result


def _draw_fields(prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One expander per field group, three columns each: the widgets' values and, per field, an empty slot under
    its widget for its error."""
    groups: dict[str, list[dataclasses.Field]] = {}
    for f in _fields():
        groups.setdefault(f.metadata.get("group", "other"), []).append(f)
    values, slots = _defaults(), {}
    for group, fields in groups.items():
        with st.expander(group.capitalize(), expanded=group in _OPEN_GROUPS):
            cols = st.columns(3)
            for i, f in enumerate(fields):
                with cols[i % 3]:
                    values[f.name] = _widget(f, f"{prefix}.{f.name}")
                    slots[f.name] = st.empty()
    return values, slots


def _validate(values: dict[str, Any], slots: dict[str, Any], top: Any) -> FormResult:
    """The browser's gate (engine.plugins.browser.browser_config), then this host's check; a ConfigError is shown under
    the field it names (or at the top)."""
    result = FormResult(values)
    try:
        cfg = api.browser_config(values)
        for warning in api.check_host(cfg):  # refused (a ConfigError) when this host cannot run it
            st.warning(warning)
        result.cfg = cfg
    except api.ConfigError as e:
        result.error = e
        (slots.get(e.field) or top).error(f"**{plain(e.field)}**: {plain(e.message)}")
    return result


def _axis_help(f: dataclasses.Field, sep: str) -> str:
    choices = _choices(f)
    among = f"; choose from: {plain(', '.join(choices))}" if choices is not None else ""
    return f"{f.metadata.get('help')} — values separated by '{sep}'{among}"


def sweep_builder(prefix: str, base: dict[str, Any]) -> SweepResult:
    """Axes over any fields (values comma-separated; `;` between list values) × repeats, on top of `base`."""
    by_name = {f.name: f for f in _fields()}
    axes = st.multiselect("Axes", list(by_name), key=f"{prefix}.axes",
                          help="fields to vary; every other field comes from the run form above")
    grid = {}
    for name in axes:
        f = by_name[name]
        sep = ";" if api.field_type(f) is list else ","
        start = _widget_value(f, base.get(f.name, ""))  # the run form's value: add more to vary it
        text = st.text_input(f"{name} values", value=str(start).lower() if isinstance(start, bool) else str(start),
                             key=f"{prefix}.axis.{name}", help=_axis_help(f, sep))
        grid[name] = [v.strip() for v in text.split(sep) if v.strip()]
    repeats = st.number_input("Repeats", min_value=1, max_value=1000, value=1, step=1, key=f"{prefix}.repeats",
                              help="runs per distinct config, for a median and a 95% CI")
    out = SweepResult()
    try:
        sweep, configs = api.browser_sweep_config(base, grid, int(repeats))
        for warning in api.check_host_all(configs):  # refused when this host cannot run one of them
            st.warning(warning)
        out.sweep, out.n_configs, out.n_runs = sweep, len(configs), len(configs) * int(repeats)
    except api.ConfigError as e:
        out.error = e
        st.error(f"**{plain(e.field)}**: {plain(e.message)}")
    return out
