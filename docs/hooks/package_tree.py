"""engine/'s packages in docs/architecture.md, generated from the code at build time so that the tree cannot drift.

MkDocs calls `on_page_markdown` for every page (mkdocs.yml's `hooks:`); the marker line `<!-- package-tree -->`
becomes one line per package under engine/: its folder and the first sentence of its docstring (read with ast: nothing
is imported). tests/docs/test_docs.py holds every package against it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- package-tree -->"


def package_lines() -> list[str]:
    """`  name/   first sentence of its docstring`, one per package directly under engine/, by name."""
    out = []
    for init in sorted((ROOT / "engine").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        paragraph = " ".join(doc.strip().split("\n\n")[0].split())
        first = re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0]
        out.append(f"  {init.parent.name + '/':<16}{first}")
    return out


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # noqa: ARG001 - MkDocs' signature
    return markdown.replace(MARKER, "\n".join(package_lines())) if MARKER in markdown else markdown
