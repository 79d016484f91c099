"""`python -m engine <command>`: the CLI, wired in engine/cli/__init__.py. `python -m engine --help` lists the
commands."""

from __future__ import annotations

import sys

from engine.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
