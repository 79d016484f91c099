"""The spelling of a plugin spec, "module.path:callable": one regex for the config, the plugin registry and
engine.plugins. A leaf module (it imports nothing from the engine), so the config schema needs neither torch nor
the plugin machinery to check a spec's spelling."""

from __future__ import annotations

import re

__all__ = ["SPEC_RE", "is_spec"]

SPEC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")


def is_spec(value: str) -> bool:
    return bool(SPEC_RE.match(value))
