"""A sentinel plugin module that leaves a file when imported, registered on the server under a few names,
and the hostile strings a browser might send instead of those names.

    plugins = register(tmp_path, monkeypatch)     # sets LOADERLAB_PLUGINS; returns the registered specs by field
    ...
    assert not imported(tmp_path)                 # nothing the browser sent imported the module
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["HOSTILE", "MODULE", "NAMES", "imported", "register"]

MODULE = "ll_sentinel_plugin"
# registered name -> (the RunConfig fields it may fill, its spec)
NAMES = {
    "mydata": ("workload", f"{MODULE}:build"),
    "mynet": ("model", f"{MODULE}:net"),
    "mycollate": ("collate", f"{MODULE}:collate"),
    "myloss": ("loss", f"{MODULE}:loss"),
}
HOSTILE = [
    f"{MODULE}:build",
    f"{MODULE}:net",
    "os:system",
    "subprocess:run",
    "builtins:eval",
    "__import__",
    "__import__('os').system('id')",
    "os.path:join",
    "mydata ",
    " mydata",
    "MyData",
    "MYNET",
    "mydata\t",
    "mydata\x00",
    "ｍydata",
    "mydata:build",
    f"{MODULE}.build",
    "../mydata",
    "/etc/passwd",
    "mydata,mynet",
    "mynet:x",
    "engine.models.mlp:MLP",
    "torch.nn:CrossEntropyLoss",
    "🙂:x",
    "a" * 300 + ":b",
    "mydata;",
]


def register(tmp_path: Path, monkeypatch) -> dict[str, str]:
    """Write the sentinel module to tmp_path (importable from there) and a plugins file registering NAMES."""
    marker = tmp_path / "IMPORTED"
    (tmp_path / f"{MODULE}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "def build(**cfg): raise RuntimeError('never called in these tests')\n"
        "net = collate = loss = build\n"
    )
    toml = "".join(f'[{name}]\n{field} = "{spec}"\n' for name, (field, spec) in NAMES.items())
    (tmp_path / "plugins.toml").write_text(toml)
    monkeypatch.setenv("LOADERLAB_PLUGINS", str(tmp_path / "plugins.toml"))
    monkeypatch.syspath_prepend(str(tmp_path))  # so an import, if anything tried one, would succeed and show
    monkeypatch.chdir(tmp_path)
    return {field: spec for field, spec in NAMES.values()}


def imported(tmp_path: Path) -> bool:
    return MODULE in sys.modules or (tmp_path / "IMPORTED").exists()
