"""The run form and the sweep builder, generated from RunConfig's fields: a new field appears with no page change.

One expander per field group; the widget follows the field's type (a select box when the field has
choices from the registry, a checkbox, a text input for numbers, text and lists: comma-separated).
Values come from a preset, the URL (every field is a query parameter: `/launch?loader=threads&workers=4`)
or the defaults (the demo's pipeline, examples/demo.toml, so a first run compares with the demo), and
fields that differ from the defaults are written back to the URL, so the launch view is always shareable.

The form runs exactly what it shows: the schema (engine.config.field_value, then RunConfig through
engine.api.browser_config) is the only validator. NOTE: numbers are text inputs because Streamlit's
number_input with min/max keeps its last valid value when the browser refuses one, so the schema never saw
what the user typed (issue 28). Every refused field shows its one line under its widget, and the queue
buttons refuse while any is refused, naming it. Labels are words; the help names the schema's field.

    form = run_form("run")            # form.cfg: a valid RunConfig or None; form.errors: the ConfigErrors
    sweep = sweep_builder("sweep", form)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import streamlit as st

from engine import api
from ui import state
from ui.state import Param
from ui.form_labels import label, refusal
from ui.text import plain

__all__ = ["FormResult", "SweepResult", "preset_picker", "run_form", "sweep_builder"]

_OPEN_GROUPS = ("workload", "loader", "model", "training")  # the rest start collapsed
_PLUGIN_HELP = {
    "workload": "dataset to load",
    "model": "architecture",
    "model_b": "dual-*: second model's architecture (empty: same as model)",
    "collate": "batch collate (empty: torch's default_collate)",
    "loss": "loss(logits, y) (empty: cross-entropy)",
}


@dataclass
class FormResult:
    values: dict[str, Any]  # as the widgets hold them: numbers as the text typed
    cfg: Any = None  # RunConfig when the values are valid
    errors: list[Any] = field(default_factory=list)  # the ConfigErrors otherwise, one per refused field
    oversubscribe: bool = False  # the user insists on running more processes than cores
    warnings: list[str] = field(default_factory=list)  # shown under the form (the sweep does not repeat them)

    @property
    def error(self) -> Any:
        return self.errors[0] if self.errors else None


@dataclass
class SweepResult:
    sweep: Any = None  # SweepConfig when valid
    error: Any = None
    n_configs: int = 0
    n_runs: int = 0


def _fields() -> list[dataclasses.Field]:
    """Visible fields; collate and loss only when the server's owner registered one (by name, never a path)."""
    return [
        f
        for f in api.config_fields()
        if f.metadata.get("ui") != "hidden" or (f.name in api.PLUGIN_FIELDS and len(api.plugin_choices(f.name)) > 1)
    ]


def _choices(f: dataclasses.Field) -> tuple[str, ...] | None:
    """A select box's options: plugin fields offer built-ins plus the registered names of their kind."""
    return tuple(api.plugin_choices(f.name)) if f.name in api.PLUGIN_FIELDS else api.field_choices(f)


@cache
def _demo_defaults() -> tuple[tuple[str, Any], ...]:
    base = {k: v for k, v in api.demo_sweep().base.items() if k != "tag"}
    return tuple(api.RunConfig.from_dict(base).to_dict().items())


def _defaults() -> dict[str, Any]:
    """RunConfig's defaults on the demo's pipeline (its base, less its tag): a newcomer's first run is comparable
    with the demo's runs. A new dict each call: callers fill it."""
    return {k: list(v) if isinstance(v, list) else v for k, v in _demo_defaults()}


def _widget_value(f: dataclasses.Field, value: Any) -> Any:
    """A config value as its widget holds it: the field's type within its limits (the schema's own coercion, so a
    URL's batch_size=-1 or n_samples=1e99 is as wrong as workers=abc, never clamped); numbers and lists as text.
    ValueError saying what is wrong otherwise."""
    try:
        typed = api.field_value(f, value)
    except api.ConfigError as e:
        raise ValueError(e.message) from None
    kind = api.field_type(f)
    return ", ".join(typed) if kind is list else str(typed) if kind in (int, float) else typed


def _apply_preset(prefix: str) -> None:
    name = st.session_state.get(f"{prefix}.preset")
    if name in api.PRESETS:
        values = {**_defaults(), **api.PRESETS[name]().to_dict()}
        for f in _fields():
            st.session_state[f"{prefix}.{f.name}"] = _widget_value(f, values[f.name])


def preset_picker(prefix: str) -> None:
    """A select box over engine.presets.PRESETS; picking one fills the form."""
    st.selectbox(
        "Preset",
        ["(none)", *api.PRESETS],
        key=f"{prefix}.preset",
        on_change=_apply_preset,
        args=(prefix,),
        help="fills the form; every field can still be changed",
    )


def _spec(values: dict[str, Any]) -> dict[str, Param]:
    """The form's URL parameters: one per visible field, read by the schema's coercion; `values` give the defaults
    (a URL's preset changes them)."""
    return {
        f.name: Param(_widget_value(f, values[f.name]), kind="value", parse=partial(_url_value, f)) for f in _fields()
    }


def _url_value(f: dataclasses.Field, raw: str) -> Any:
    """A URL's value as its widget holds it. One the schema refuses stays as typed in its text box (or select box),
    where the form refuses it by name and queues nothing, as it does a typed one: `workers=abc` is refused like
    `loader=bogus`, never swapped for the default. Only a checkbox, which cannot hold it, raises (a URL warning)."""
    try:
        return _widget_value(f, raw)
    except ValueError:
        if api.field_type(f) is bool:
            raise
        return raw


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


def _help(f: dataclasses.Field) -> str:
    """The field's help, its limits and its schema name (what a TOML file, a URL and the store call it)."""
    help_ = f.metadata.get("help") or ""
    if f.name in api.PLUGIN_FIELDS:  # NOTE: the help must not invite a module path the browser may not give
        help_ = f"{_PLUGIN_HELP[f.name]}: a built-in, or a plugin the server's owner registered by name"
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    limits = f"; from {lo:g} to {hi:g}" if lo is not None and hi is not None else ""
    lists = " (comma-separated)" if api.field_type(f) is list else ""
    return f"{help_}{lists}{limits}. Field name: {f.name}"


def _widget(f: dataclasses.Field, key: str) -> Any:
    name, help_ = label(f.name), _help(f)
    choices = _choices(f)
    if choices is not None:
        options = list(choices)
        if st.session_state.get(key) not in options:  # e.g. from a URL: shown, then rejected inline
            options.append(st.session_state[key])
        return st.selectbox(name, options, key=key, help=help_, format_func=lambda v: v if v != "" else "(default)")
    if api.field_type(f) is bool:
        return st.checkbox(name, key=key, help=help_)
    return st.text_input(name, key=key, help=help_)  # numbers too: the schema reads what was typed (see above)


def run_form(prefix: str) -> FormResult:
    """Render every RunConfig field, grouped; validate; show a ConfigError under the field it names."""
    for warning in _bind_url(prefix):
        st.warning(plain(warning))  # they quote the URL: text, never Markdown
    values, slots = _draw_fields(prefix)
    top = st.empty()
    oversubscribe = st.checkbox(
        "Oversubscribe: run even with more parallel processes than cores",
        key=f"{prefix}.oversubscribe",
        help="the processes time-share the cores, so the run measures that, not the loader",
    )
    result = _validate(values, slots, top, oversubscribe)
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


def _validate(values: dict[str, Any], slots: dict[str, Any], top: Any, oversubscribe: bool) -> FormResult:
    """Each field through the schema's coercion and limits; when all pass, the browser's gate
    (engine.plugins.browser.browser_config) and this host's check. Each ConfigError is shown under the field it names
    (or at the top)."""
    result = FormResult(values, oversubscribe=oversubscribe)
    for f in _fields():
        try:
            api.field_value(f, values[f.name])
        except api.ConfigError as e:
            result.errors.append(e)
            continue
        choices = _choices(f)
        if choices is not None and values[f.name] not in choices:  # said beside the other fields' refusals
            offered = ", ".join(c or "(default)" for c in choices)
            result.errors.append(
                api.ConfigError(f.name, f"{str(values[f.name])[:60]!r} is not offered here; choose one of: {offered}")
            )
    if not result.errors:
        try:
            cfg = api.browser_config(values)
            result.warnings = oversubscribed(api.check_host(cfg, oversubscribe=oversubscribe), oversubscribe)
            for warning in result.warnings:
                st.warning(plain(warning))
            result.cfg = cfg
        except api.ConfigError as e:
            result.errors.append(e)
    for e in result.errors:
        (slots.get(e.field) or top).error(f"**{plain(label(e.field))}**: {plain(refusal(e.message))}")
    return result


def _axis_help(f: dataclasses.Field, sep: str) -> str:
    choices = _choices(f)
    among = f"; choose from: {plain(', '.join(choices))}" if choices is not None else ""
    return f"{f.metadata.get('help')} — values separated by '{sep}'{among}"


def _axis_start(f: dataclasses.Field, value: Any) -> str:
    """The run form's value as an axis' first value: add more to vary it (a refused value stays as typed)."""
    try:
        start = _widget_value(f, value)
    except ValueError:
        start = value
    return str(start).lower() if isinstance(start, bool) else str(start)


def sweep_builder(prefix: str, form: FormResult) -> SweepResult:
    """Axes over any fields (values comma-separated; `;` between list values) × repeats, on top of the run form's
    values. Refused while the run form refuses a field, naming it."""
    by_name = {f.name: f for f in _fields()}
    axes = st.multiselect(
        "Axes",
        list(by_name),
        key=f"{prefix}.axes",
        format_func=label,
        help="fields to vary; every other field comes from the run form above",
    )
    grid = {}
    for name in axes:
        f = by_name[name]
        sep = ";" if api.field_type(f) is list else ","
        text = st.text_input(
            f"{label(name)}: values",
            value=_axis_start(f, form.values.get(name, "")),
            key=f"{prefix}.axis.{name}",
            help=_axis_help(f, sep),
        )
        grid[name] = [v.strip() for v in text.split(sep) if v.strip()]
    repeats = st.text_input(
        "Repeats",
        value="1",
        key=f"{prefix}.repeats",
        help="runs per distinct config, for a median and a 95% CI; from 1 to 1000",
    )
    out = SweepResult()
    try:
        refused = [e for e in form.errors if e.field not in grid]  # an axis replaces the form's value
        if refused:  # NOTE: said once, under its field above; here only which one stops the sweep
            out.error = refused[0]
            st.error(f"The run form above refuses **{plain(label(refused[0].field))}**: fix it there first.")
            return out
        sweep, configs = api.browser_sweep_config(form.values, grid, _repeats(repeats))
        # refused when one cannot fit, or is oversubscribed without the checkbox; the form's own warning is not repeated
        for warning in oversubscribed(
            api.check_host_all(configs, oversubscribe=form.oversubscribe), form.oversubscribe
        ):
            if warning not in form.warnings:
                st.warning(plain(warning))
        out.sweep, out.n_configs, out.n_runs = sweep, len(configs), len(configs) * sweep.repeats
    except api.ConfigError as e:
        out.error = e
        st.error(f"**{plain(label(e.field))}**: {plain(refusal(e.message))}")
    return out


def oversubscribed(warnings: list[str], insist: bool) -> list[str]:
    """The host's oversubscription warnings ("field: what"), or, unless the user ticked Oversubscribe, a refusal
    (ConfigError naming the field): in a browser a run that only time-shares the cores is never queued unasked."""
    if warnings and not insist:
        name, _, what = warnings[0].partition(": ")
        raise api.ConfigError(name, f"{what}; use fewer, or {api.INSIST_HINT}")
    return warnings


def _repeats(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise api.ConfigError("repeats", f"expected a whole number from 1 to 1000, got {text[:60]!r}") from None
