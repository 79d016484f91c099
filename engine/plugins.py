"""The user's own pipeline: dataset, model, collate and loss named as `"module.path:callable"` specs.

A spec's module must be importable where the run starts (the CWD or PYTHONPATH; the run child puts
the launching CWD on sys.path, as `python -m` does). Resolution is lazy: nothing here imports torch
or the user's module until a run or a check asks for it.

    fn = resolve("mypkg.data:build", "workload")      # ConfigError("workload", ...) if it cannot be imported
    code_hash(["mypkg.data:build", "mypkg.nets:net"])  # sha256 of the modules' source files
    registered()                                       # {"my_images": {"workload": "mypkg.data:build"}, ...}

What the server's owner registers for the dashboard lives in a TOML file, `$LOADERLAB_PLUGINS`, else
`plugins.toml` beside the store (data/plugins.toml by default); the browser only ever picks a name:

    [my_images]
    workload = "mypkg.data:build"
    [small_resnet]
    model = "mypkg.nets:resnet"
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterable

from engine.config import ConfigError, printable

__all__ = ["KINDS", "SPEC_RE", "code_hash", "is_spec", "plugins_file", "registered", "resolve"]

SPEC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
KINDS = ("workload", "model", "collate", "loss")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def is_spec(value: str) -> bool:
    return bool(SPEC_RE.match(value))


def resolve(spec: str, field: str) -> Callable[..., Any]:
    """Import the spec's module and return its callable; any failure is a one-line ConfigError on `field`."""
    if not is_spec(spec):
        raise ConfigError(field, f"'{printable(spec[:200])}' is not a plugin spec; write it as "
                                 "'module.path:callable', e.g. 'mypkg.data:build'")
    module_name, attr = spec.split(":")
    _cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        where = "the current directory or PYTHONPATH"
        raise ConfigError(field, f"module '{module_name}' cannot be imported ({e}); run from the folder that "
                                 f"holds it or add that folder to PYTHONPATH ({where})") from None
    except Exception as e:  # noqa: BLE001 - the user's module failing at import is bad input, not our crash
        raise ConfigError(field, f"module '{module_name}' failed to import: "
                                 f"{type(e).__name__}: {printable(str(e)[:300])}") from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise ConfigError(field, f"module '{module_name}' has no '{attr}'; check the name after the colon")
    if not callable(fn):
        raise ConfigError(field, f"'{spec}' is a {type(fn).__name__}, not a callable; name a function or class")
    return fn


def _cwd_on_path() -> None:
    """`python -m engine` puts the CWD on sys.path; a console script or a notebook may not: do it here too."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def code_hash(specs: Iterable[str]) -> str | None:
    """sha256 over the source of the modules the specs come from; None when no spec is a plugin.

    NOTE: for a module inside a package, every .py file of its top-level package is hashed (sorted by
    relative path), since a helper module the factory imports changes results as much as the factory's
    own file. A lone module hashes just its file.
    """
    files: dict[str, Path] = {}
    for spec in sorted({s for s in specs if s and is_spec(s)}):
        module_name = spec.split(":")[0]
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        for key, path in _source_files(module_name, module):
            files[key] = path
    if not files:
        return None
    h = hashlib.sha256()
    for key in sorted(files):
        h.update(key.encode() + b"\0" + files[key].read_bytes() + b"\0")
    return h.hexdigest()


def _source_files(module_name: str, module: Any) -> list[tuple[str, Path]]:
    top = sys.modules.get(module_name.split(".")[0])
    top_file = getattr(top, "__file__", None)
    if top is not None and top_file and Path(top_file).name == "__init__.py":
        root = Path(top_file).parent
        return [(f"{root.name}/{p.relative_to(root).as_posix()}", p) for p in sorted(root.rglob("*.py"))
                if "__pycache__" not in p.parts]
    path = getattr(module, "__file__", None)
    return [(module_name, Path(path))] if path else []


def plugins_file(db: str | os.PathLike | None = None) -> Path:
    """`$LOADERLAB_PLUGINS`, else plugins.toml beside the store (data/plugins.toml by default)."""
    from engine.paths import db_path  # noqa: PLC0415

    raw = os.environ.get("LOADERLAB_PLUGINS", "")
    return Path(raw).expanduser() if raw else db_path(db).parent / "plugins.toml"


def registered(db: str | os.PathLike | None = None) -> dict[str, dict[str, str]]:
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
            raise ConfigError("plugins", f"{where}: give exactly one of {', '.join(KINDS)} = \"module:callable\"")
        kind, spec = next(iter(entry.items()))
        if not isinstance(spec, str) or not is_spec(spec):
            raise ConfigError("plugins", f"{where}: {kind} must be a 'module.path:callable' string")
        out[name] = {kind: spec}
    return out
