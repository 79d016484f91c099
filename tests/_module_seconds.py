"""Makes tests/module_seconds.json again: each test module's seconds in `make test`'s parallel part, which orders the
modules there (tests/conftest.py, longest first). From the durations a run printed:

    make test PYTEST_ARGS=--durations=0 2>&1 | tee test.log
    .venv/bin/python tests/_module_seconds.py test.log

Reads the last durations table in the log (the parallel part's), sums each module's setup, call and teardown
seconds, and writes the modules of a second or more, longest first.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parent / "module_seconds.json"
LINE = re.compile(r"\s*([\d.]+)s (?:setup|call|teardown)\s+(tests/[^:]+\.py)::")


def module_seconds(log: str) -> dict[str, int]:
    """{module path: seconds} from the log's last `slowest durations` table, longest first."""
    table = log.rsplit("slowest durations", 1)[-1]
    seconds: Counter[str] = Counter()
    for line in table.splitlines():
        if m := LINE.match(line):
            seconds[m.group(2)] += float(m.group(1))
    return {module: round(s) for module, s in seconds.most_common() if s >= 1}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: tests/_module_seconds.py LOG (the output of `make test PYTEST_ARGS=--durations=0`)")
        return 2
    found = module_seconds(Path(argv[0]).read_text())
    if not found:
        print(f"{argv[0]}: no durations table with tests in it: run with PYTEST_ARGS=--durations=0")
        return 1
    OUT.write_text(json.dumps(found, indent=0) + "\n")
    print(f"wrote {len(found)} modules to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
