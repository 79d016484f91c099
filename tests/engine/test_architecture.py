"""The tree is the architecture: the engine runs without a browser, pages stay thin."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_engine_never_imports_streamlit():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "engine").rglob("*.py") if "streamlit" in _imports(p)]
    assert offenders == []


def test_importing_the_whole_engine_loads_no_streamlit():
    code = ("import sys, pkgutil, importlib, engine\n"
            "for m in pkgutil.walk_packages(engine.__path__, 'engine.'):\n"
            "    if m.name != 'engine.__main__': importlib.import_module(m.name)\n"
            "print('streamlit' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_pages_use_the_engine_api_not_torch_or_duckdb():
    for page in (ROOT / "pages").glob("*.py"):
        assert not _imports(page) & {"torch", "duckdb", "threading", "multiprocessing"}, page.name


def test_app_only_routes():
    assert _imports(ROOT / "app.py") <= {"streamlit", "engine", "ui"}
