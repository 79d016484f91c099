"""`code_hash`: the fingerprint of the user's plugin code that a run records (runs.code_hash).

Results of changed code must never pool with the old ones, so the hash covers what can change them:
for a module inside a package, every .py file of its outermost regular package (a helper module the
factory imports matters as much as the factory's file); for a lone module, its file. A module
installed in this environment (under sys.prefix: site-packages, the standard library) is not hashed
file by file: its distribution's name and version stand for it, so `torch.nn.functional:mse_loss`
as a loss costs nothing.

    code_hash(["mypkg.data:build", "mypkg.nets:resnet"])   # 64 hex digits; None without a plugin spec
    roots = source_roots(specs); stamp(roots)              # what it read, and a cheap check that it is unchanged

A launcher that checked a plugin in a child process (engine/run/preflight.py) keeps the child's `stamp` of the
files hashed: the same stamp later means the same code, without importing the user's module itself.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import sys
from pathlib import Path
from typing import Any, Iterable

from engine.names import SPEC_RE

__all__ = ["code_hash", "installed", "source_roots", "stamp"]


def code_hash(specs: Iterable[str]) -> str | None:
    """sha256 over the sources of the modules the specs come from; None when no spec is a plugin."""
    sources: dict[str, bytes] = {}
    for spec in sorted({s for s in specs if s and SPEC_RE.match(s)}):
        module_name = spec.split(":")[0]
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        sources.update(_sources(module_name, module))
    if not sources:
        return None
    h = hashlib.sha256()
    for key in sorted(sources):
        h.update(key.encode() + b"\0" + sources[key] + b"\0")
    return h.hexdigest()


def _sources(module_name: str, module: Any) -> dict[str, bytes]:
    top = module_name.split(".")[0]
    root = _root(module_name, module)
    if root is None:
        return {f"{top}@{_version(top)}": b""}
    if root.is_dir():
        return {f"{root.name}/{p.relative_to(root).as_posix()}": p.read_bytes() for p in _py_files(root)}
    return {module_name: root.read_bytes()}


def _root(module_name: str, module: Any) -> Path | None:
    """What is hashed for a module: its outermost regular package's folder, or its own file; None when installed."""
    path = getattr(module, "__file__", None)
    if path is None or installed(Path(path)):
        return None
    parts = module_name.split(".")
    for i in range(1, len(parts) + 1):  # the outermost regular package (namespace packages have no __init__)
        package_file = getattr(sys.modules.get(".".join(parts[:i])), "__file__", None)
        if package_file and Path(package_file).name == "__init__.py":
            return Path(package_file).parent
    return Path(path)


def _py_files(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts]


def source_roots(specs: Iterable[str]) -> list[str]:
    """The folders and files code_hash reads for these specs (their modules imported already), installed ones left
    out."""
    roots = {_root(s.split(":")[0], sys.modules.get(s.split(":")[0])) for s in specs if s and SPEC_RE.match(s)}
    return sorted(str(r) for r in roots if r is not None)


def stamp(roots: Iterable[str]) -> list[list[Any]]:
    """(path, mtime_ns, size) of every file under roots: equal stamps, equal code (a file added or removed shows)."""
    out: list[list[Any]] = []
    for root in map(Path, roots):
        for p in _py_files(root) if root.is_dir() else [root]:
            try:
                st = p.stat()
            except OSError:
                out.append([str(p), None, None])
                continue
            out.append([str(p), st.st_mtime_ns, st.st_size])
    return out


def installed(path: Path) -> bool:
    """Whether a module file lies in this environment (site-packages, the standard library), not in a user's folder."""
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    real = path.resolve()
    return any(real.is_relative_to(p) for p in prefixes)


def _version(top: str) -> str:
    try:
        return importlib.metadata.version(top)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(sys.modules.get(top), "__version__", sys.version.split()[0]))
