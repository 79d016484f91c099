"""Preflight, the launchers' side: try a config's plugins on one small batch before a run is launched.

    extra_meta = preflight(cfg)          # {"code_hash": "..."} for a plugin run, {} for built-ins

Built-in configs return at once and load nothing. A config that names a plugin is checked by
engine/_plugin_check.py, which builds the dataset and model with torch. This module is the launchers' (CLI,
sweeps, the job worker, Ray, the notebook) and sits above the run side: nothing the run side imports imports
it, so the import graph stays acyclic.
"""

from __future__ import annotations

from typing import Any

from engine.plugins import specs_of

__all__ = ["preflight"]


def preflight(cfg: Any, cwd: str | None = None) -> dict[str, Any]:
    """Try cfg's plugins on one small batch; returns {"code_hash": ...} or {}. A bad plugin raises a one-line
    ConfigError naming its field."""
    if not specs_of(cfg):
        return {}  # built-ins only: nothing to try, and torch stays out of the launching process
    # NOTE: imported here: the check builds the dataset and model with torch, which the launchers (CLI,
    # dashboard, notebook) load only when a config names a plugin
    from engine._plugin_check import preflight as check  # noqa: PLC0415

    return check(cfg, cwd)
