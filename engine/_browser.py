"""Plugins from the browser: by registered name only, never as a module path.

The server's owner registers plugins in a TOML file (engine._plugin_registry). A config that comes
from the browser (the Launch form, its URL, the sweep builder) names a built-in or a registered plugin;
`browser_values` maps a registered name to its spec and refuses everything else, before RunConfig
sees the value. `check_plugins` is the last gate at submit(origin="browser"): any spec left in a config
must be one the owner registered for that field's kind. Nothing here imports a user's module.

    values = browser_values({"workload": "my_images", "loader": "threads"})   # workload -> "mypkg.data:build"
"""

from __future__ import annotations

import functools
from typing import Any

from engine.config import ConfigError, RunConfig, field_choices, printable

__all__ = ["PLUGIN_FIELDS", "browser_sweep", "browser_values", "check_plugins", "choices"]

# Fields that may hold a plugin spec -> the registered kind that may fill them (model_b is a second model).
PLUGIN_FIELDS = {"workload": "workload", "model": "model", "model_b": "model", "collate": "collate", "loss": "loss"}


def _registered() -> dict[str, dict[str, str]]:
    """The owner's registrations, read again only when the file changes (a form asks many times per rerun)."""
    from engine._plugin_registry import plugins_file  # noqa: PLC0415  (it imports engine.config)

    path = plugins_file()
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    return _read(str(path), stamp)


@functools.lru_cache(maxsize=4)
def _read(path: str, stamp: tuple[int, int] | None) -> dict[str, dict[str, str]]:
    from engine._plugin_registry import registered  # noqa: PLC0415

    return registered() if stamp is not None else {}


def _builtins(name: str) -> list[str]:
    """The non-plugin values a browser may give: the field's registry choices, or empty (= the default)."""
    if name == "model_b":
        from engine.registry import names  # noqa: PLC0415

        return ["", *names("models")]
    fld = next(f for f in RunConfig.__dataclass_fields__.values() if f.name == name)
    return list(field_choices(fld) or [""])


def choices(name: str, plugins: dict[str, dict[str, str]] | None = None) -> list[str]:
    """What the form offers for a plugin field: built-ins, then registered names of its kind."""
    plugins = _registered() if plugins is None else plugins
    kind = PLUGIN_FIELDS[name]
    return _builtins(name) + sorted(n for n, entry in plugins.items() if kind in entry and n not in _builtins(name))


def _map(name: str, value: Any, plugins: dict[str, dict[str, str]]) -> Any:
    if not isinstance(value, str):
        return value  # a wrong type is RunConfig's error to report
    allowed = choices(name, plugins)
    if value in allowed:
        entry = plugins.get(value)
        return entry[PLUGIN_FIELDS[name]] if entry and value not in _builtins(name) else value
    shown = ", ".join(repr(a) if a == "" else a for a in allowed)
    raise ConfigError(name, f"'{printable(value[:80])}' is not offered here; the dashboard runs only built-ins and "
                            f"plugins its owner registered by name (choose one of: {shown}); a module path "
                            "works only from the CLI or a notebook")


def browser_values(values: dict[str, Any]) -> dict[str, Any]:
    """Browser input -> values RunConfig accepts: registered names become specs; any other plugin value is refused."""
    plugins = _registered()
    return {k: _map(k, v, plugins) if k in PLUGIN_FIELDS else v for k, v in values.items()}


def browser_sweep(base: dict[str, Any], grid: dict[str, list[Any]]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """browser_values over a sweep's base and every value of its grid axes."""
    plugins = _registered()
    base = {k: _map(k, v, plugins) if k in PLUGIN_FIELDS else v for k, v in base.items()}
    grid = {k: [_map(k, v, plugins) for v in vs] if k in PLUGIN_FIELDS and isinstance(vs, list) else vs
            for k, vs in grid.items()}
    return base, grid


def check_plugins(cfg: RunConfig) -> None:
    """The submit gate: a spec in a browser config must be one the owner registered for that field's kind."""
    plugins = None
    for name, kind in PLUGIN_FIELDS.items():
        value = getattr(cfg, name)
        if not value or value in _builtins(name):
            continue
        plugins = _registered() if plugins is None else plugins
        if not any(entry.get(kind) == value for entry in plugins.values()):
            raise ConfigError(name, f"'{printable(value[:80])}' is not a plugin registered on this server; the "
                                    "dashboard runs only plugins its owner registered by name (LOADERLAB_PLUGINS or "
                                    "plugins.toml beside the store)")
