"""The docs site cannot drift from the code: it builds strictly, its CLI reference names every command and flag of
the CLI's own parsers, and every block marked `<!-- test: runs -->` runs as written on a fresh store."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "hooks"))

import cli_reference  # noqa: E402 - the hook MkDocs runs, imported from docs/hooks/
import package_tree  # noqa: E402 - likewise

from engine.cli import build_parser  # noqa: E402

RUNS = "<!-- test: runs -->"
BLOCK = re.compile(r"^" + re.escape(RUNS) + r"\n```(bash|python)\n(.*?)^```", re.M | re.S)


def test_the_docs_build_strictly(tmp_path):
    """A broken link, a missing page or an anchor that is not there fails the build (mkdocs.yml: strict, and every
    validation at warn)."""
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "--prefetch-depth" in cli and "export-bundle" in cli  # the generated reference is in the built page
    assert "engine.lab" in (tmp_path / "site" / "api" / "index.html").read_text()  # the API page has the docstrings


def _commands() -> dict[str, argparse.ArgumentParser]:
    return cli_reference._subcommands(build_parser())  # noqa: SLF001


def test_the_cli_reference_names_every_command_and_flag():
    text = cli_reference.reference_markdown()
    commands = _commands()
    assert {"run", "sweep", "tune", "predict", "query"} <= set(commands)  # the parsers were read
    flags = {
        name: [
            o
            for a in parser._actions
            if not isinstance(a, argparse._HelpAction)  # noqa: SLF001
            for o in a.option_strings
        ]
        for name, parser in commands.items()
    }
    missing = [f"{name} {flag}" for name in commands for flag in [f"### `{name}`", *flags[name]] if flag not in text]
    assert missing == []


def test_the_cli_reference_misses_a_flag_the_parser_does_not_have():
    """The completeness check can fail: a flag the CLI does not have is not in the reference."""
    assert "--no-such-flag" not in cli_reference.reference_markdown()


def test_the_architecture_page_lists_every_engine_package_with_its_docstring():
    assert package_tree.MARKER in (DOCS / "architecture.md").read_text()  # the page is generated, not typed
    lines = package_tree.package_lines()
    packages = sorted(p.parent.name for p in (ROOT / "engine").glob("*/__init__.py"))
    assert {"calibrate", "predict", "observe", "measure"} <= set(packages)  # the check sees the packages
    assert [line.split()[0] for line in lines] == [f"{p}/" for p in packages]
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)  # each with its docstring's first sentence


def _blocks() -> list[tuple[str, str, str]]:
    return [
        (f"{page.name}:{text[: m.start()].count(chr(10)) + 2}", m.group(1), m.group(2))
        for page in sorted(DOCS.glob("*.md"))
        for text in [page.read_text()]
        for m in BLOCK.finditer(text)
    ]


def test_the_docs_mark_blocks_that_run():
    assert len(_blocks()) >= 2, "mark the docs' runnable examples with " + RUNS


@pytest.mark.parametrize("where, language, code", _blocks(), ids=[b[0] for b in _blocks()])
def test_a_docs_example_runs_as_written(where, language, code, tmp_path, store):
    """Each marked block runs from the checkout's root with `python` as this interpreter, on a fresh store."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # NOTE: a venv's python, not a
    (bin_dir / "python").chmod(0o755)  # link to it: a link's folder has no pyvenv.cfg, so the venv would be lost
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "LOADERLAB_DB": str(store)}
    argv = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{where}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    assert shutil.which("python", path=str(bin_dir))  # the block ran with this interpreter as `python`
