"""What a config from the browser may hold: plugins by registered name only, never as a module path,
and a `folder` only under the data roots.

The server's owner registers plugins in a TOML file (engine.plugins.registered). A config that comes
from the browser (the Launch form, its URL, the sweep builder) names a built-in or a registered plugin;
`browser_values` maps a registered name to its spec and refuses everything else, before RunConfig
sees the value. `check_plugins` is the last gate at submit(origin="browser"): any spec left in a config
must be one the owner registered for that field's kind. `check_browser_config` is that gate plus the
data roots. Nothing here imports a user's module.

    values = browser_values({"workload": "my_images", "loader": "threads"})   # workload -> "mypkg.data:build"
    cfg = browser_config(form_values)                                         # the whole gate, in order
    sweep, configs = browser_sweep_config(base, grid, repeats=3)
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from engine.config import RunConfig, SweepConfig, field_choices
from engine.errors import ConfigError, printable
from engine.paths import DATA_DIR
from engine.plugins.registered import plugins_file, registered

__all__ = [
    "PLUGIN_FIELDS",
    "browser_config",
    "browser_sweep",
    "browser_sweep_config",
    "browser_values",
    "check_browser_config",
    "check_plugins",
    "choices",
    "data_roots",
]

# Fields that may hold a plugin spec -> the registered kind that may fill them (model_b is a second model).
PLUGIN_FIELDS = {"workload": "workload", "model": "model", "model_b": "model", "collate": "collate", "loss": "loss"}


def _registered() -> dict[str, dict[str, str]]:
    """The owner's registrations, read again only when the file changes (a form asks many times per rerun)."""
    path = plugins_file()
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    return _read(str(path), stamp)


@functools.lru_cache(maxsize=4)
def _read(path: str, stamp: tuple[int, int] | None) -> dict[str, dict[str, str]]:
    return registered() if stamp is not None else {}


def _builtins(name: str) -> list[str]:
    """The non-plugin values a browser may give: the field's registry choices, or empty (= the default)."""
    fld = RunConfig.__dataclass_fields__["model" if name == "model_b" else name]
    return ["", *(field_choices(fld) or ())] if name == "model_b" else list(field_choices(fld) or [""])


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
    raise ConfigError(
        name,
        f"'{printable(value[:80])}' is not offered here; the dashboard runs only built-ins and "
        f"plugins its owner registered by name (choose one of: {shown}); a module path "
        "works only from the CLI or a notebook",
    )


def browser_values(values: dict[str, Any]) -> dict[str, Any]:
    """Browser input -> values RunConfig accepts: registered names become specs; any other plugin value is refused."""
    plugins = _registered()
    return {k: _map(k, v, plugins) if k in PLUGIN_FIELDS else v for k, v in values.items()}


def browser_sweep(base: dict[str, Any], grid: dict[str, list[Any]]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """browser_values over a sweep's base and every value of its grid axes."""
    plugins = _registered()
    base = {k: _map(k, v, plugins) if k in PLUGIN_FIELDS else v for k, v in base.items()}
    grid = {
        k: [_map(k, v, plugins) for v in vs] if k in PLUGIN_FIELDS and isinstance(vs, list) else vs
        for k, vs in grid.items()
    }
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
            raise ConfigError(
                name,
                f"'{printable(value[:80])}' is not a plugin registered on this server; the "
                "dashboard runs only plugins its owner registered by name (LOADERLAB_PLUGINS or "
                "plugins.toml beside the store)",
            )


def data_roots() -> list[Path]:
    """Folders a config from the browser may read: $LOADERLAB_DATA_ROOTS (os.pathsep-separated), else data/."""
    raw = os.environ.get("LOADERLAB_DATA_ROOTS", "")
    return [Path(p).resolve() for p in raw.split(os.pathsep) if p.strip()] or [DATA_DIR.resolve()]


def check_browser_config(cfg: RunConfig) -> None:
    """Extra rules for configs that arrive from the browser: plugins only as registered on the server (specs
    the owner listed, check_plugins above), and a `folder` must lie under a data root.

    NOTE: the path is resolved (symlinks and `..` included) before the check, so a link inside a root
    that points outside it is refused too. The CLI is not limited: its user already owns the machine.
    """
    check_plugins(cfg)  # a module path only as a plugin the server's owner registered by name
    if cfg.workload != "folder" and not cfg.folder:
        return
    try:
        real = Path(cfg.folder).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # a NUL byte, a symlink loop: no path a root could hold
        raise ConfigError("folder", f"'{printable(cfg.folder[:200])}' is not a usable path") from None
    roots = data_roots()
    if not any(real == root or root in real.parents for root in roots):
        raise ConfigError(
            "folder",
            f"'{cfg.folder}' is outside the folders this dashboard may read "
            f"({', '.join(map(str, roots))}); move the data there or ask whoever runs the "
            "dashboard to add its folder to LOADERLAB_DATA_ROOTS",
        )


def browser_config(values: dict[str, Any]) -> RunConfig:
    """The run form's values through the whole gate, in order: registered names become specs (any other plugin
    value stops here), the folder is checked against the data roots before RunConfig walks it, then the config is
    built (validated) and checked again whole. ConfigError names the field."""
    mapped = browser_values(values)
    _check_folder(mapped, mapped.get("folder"))
    cfg = RunConfig.from_dict(mapped)
    check_browser_config(cfg)
    return cfg


def browser_sweep_config(
    base: dict[str, Any], grid: dict[str, list[Any]], repeats: int
) -> tuple[SweepConfig, list[RunConfig]]:
    """The sweep builder's base and axes through the same gate as browser_config, every folder and every config
    of the grid; returns the sweep and its distinct configs (built once)."""
    base, grid = browser_sweep(base, grid)
    for folder in [base.get("folder"), *grid.get("folder", [])]:
        _check_folder(base, folder)
    sweep = SweepConfig.from_dict({"name": "ui-sweep", "base": base, "grid": grid, "repeats": int(repeats)})
    configs = sweep.configs()
    for cfg in configs:
        check_browser_config(cfg)
    return sweep, configs


def _check_folder(values: dict[str, Any], folder: Any) -> None:
    """The data-root check on the values that name paths alone, before anything walks the folder (from_dict's
    folder check says what it found there)."""
    check_browser_config(RunConfig(workload=str(values.get("workload") or ""), folder=str(folder or "")))
