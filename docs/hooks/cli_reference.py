"""The CLI reference, generated from the argparse parsers at build time so that it cannot drift from the code.

MkDocs calls `on_page_markdown` for every page (mkdocs.yml's `hooks:`); on the CLI page the marker line
`<!-- cli-reference -->` becomes one section per command: its help, then a table of its options with their help
and defaults. tests/docs/test_docs.py holds every command and flag of `engine.cli.build_parser()` against it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the engine is imported from it, not from site-packages
MARKER = "<!-- cli-reference -->"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def _cell(text: Any) -> str:
    return re.sub(r"\s+", " ", str(text)).replace("|", "\\|").strip()


def _option_row(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
    if action.metavar or (action.nargs != 0 and action.option_strings):
        names += f" `{action.metavar or action.dest.upper()}`"
    help_text = action.help if action.help and action.help != argparse.SUPPRESS else ""
    try:
        help_text = help_text % {"default": action.default, "prog": parser.prog} if help_text else ""
    except (KeyError, TypeError, ValueError):
        pass
    default = "" if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{action.default}`"
    return f"| {names} | {_cell(help_text)} | {default} |"


def reference_markdown() -> str:
    """Every command of `python -m engine`, in the CLI's order, with its options."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from engine.cli import build_parser  # noqa: PLC0415 - the docs build imports the engine only when it renders

    root = build_parser()
    out = []
    for name, parser in _subcommands(root).items():
        parser.format_help()  # fills the registries' names into the config flags' help (engine.cli._Parser)
        out += [
            f"### `{name}`",
            "",
            _cell(parser.description or ""),
            "",
            "| option | what it does | default |",
            "| --- | --- | --- |",
        ]
        out += [
            _option_row(a, parser)
            for a in parser._actions  # noqa: SLF001
            if not isinstance(a, argparse._HelpAction)
        ]  # noqa: SLF001
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # noqa: ARG001 - MkDocs' signature
    return markdown.replace(MARKER, reference_markdown()) if MARKER in markdown else markdown
