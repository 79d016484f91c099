"""Plugins the server's owner registers for the dashboard: a TOML file, never input from the browser.

`$LOADERLAB_PLUGINS`, else `plugins.toml` beside the store (data/plugins.toml by default):

    [my_images]
    workload = "mypkg.data:build"
    [small_resnet]
    model = "mypkg.nets:resnet"

    registered()   # {"my_images": {"workload": "mypkg.data:build"}, "small_resnet": {"model": ...}}
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

from engine.errors import ConfigError, printable
from engine.paths import Db, db_path
from engine.names import SPEC_RE

__all__ = ["KINDS", "plugins_file", "registered"]

KINDS = ("workload", "model", "collate", "loss")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def plugins_file(db: Db = None) -> Path:
    """`$LOADERLAB_PLUGINS`, else plugins.toml beside the store (data/plugins.toml by default)."""
    raw = os.environ.get("LOADERLAB_PLUGINS", "")
    return Path(raw).expanduser() if raw else db_path(db).parent / "plugins.toml"


def registered(db: Db = None) -> dict[str, dict[str, str]]:
    """Plugins the server's owner registered: name -> {kind: spec}, one kind per name. {} without a file.

    A bad file is a ConfigError("plugins", ...) naming the file and the entry, so the owner can fix it.
    """
    path = plugins_file(db)
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError("plugins", f"'{path}' cannot be read as TOML ({e}); fix or remove it") from None
    out: dict[str, dict[str, str]] = {}
    for name, entry in data.items():
        where = f"'{path}' entry [{printable(name)}]"
        if not _NAME_RE.match(name):
            raise ConfigError("plugins", f"{where}: a name is letters, digits, '_', '.', '-' (at most 64)")
        if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in KINDS:
            raise ConfigError("plugins", f'{where}: give exactly one of {", ".join(KINDS)} = "module:callable"')
        kind, spec = next(iter(entry.items()))
        if not isinstance(spec, str) or not SPEC_RE.match(spec):
            raise ConfigError("plugins", f"{where}: {kind} must be a 'module.path:callable' string")
        out[name] = {kind: spec}
    return out
