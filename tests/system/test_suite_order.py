"""How `make test` splits and orders the suite (tests/conftest.py): what it runs where, never how long it takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

from tests.conftest import MODULE_SECONDS, QUIET_PART, ROOT, UNTIMED_S, module_order, work_unit


def _item(nodeid: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid)


def test_modules_run_longest_first_each_kept_whole_in_its_own_order_and_an_untimed_one_counts_as_middling():
    ids = ["a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "b.py::t2", "d.py::t1"]
    items = [_item(i) for i in ids]
    module_order(items, {"a.py": UNTIMED_S - 1, "b.py": 500, "d.py": UNTIMED_S + 1})  # c.py untimed
    assert [i.nodeid for i in items] == ["b.py::t1", "b.py::t2", "d.py::t1", "c.py::t1", "a.py::t1", "a.py::t2"]


def test_the_browser_modules_are_one_unit_whose_seconds_are_theirs_together():
    ids = ["tests/browser/test_a.py::t", "tests/browser/test_b.py::t", "tests/engine/test_x.py::t"]
    items = [_item(i) for i in ids]
    module_order(items, {"tests/browser/test_a.py": 60, "tests/browser/test_b.py": 60, "tests/engine/test_x.py": 100})
    assert [i.nodeid for i in items] == ids  # 120 s together, before the 100 s module, each in its own order
    assert {work_unit(i) for i in ids[:2]} == {"tests/browser/"} and work_unit(ids[2]) == "tests/engine/test_x.py"


def test_the_module_seconds_name_test_files_that_exist():
    seconds = json.loads(MODULE_SECONDS.read_text())
    assert seconds and all(isinstance(s, int) and s >= 1 for s in seconds.values())
    missing = [m for m in seconds if not (ROOT / m).is_file()]
    assert not missing, f"tests/module_seconds.json names files that are gone: {missing} (tests/_module_seconds.py)"


def test_the_quiet_part_imports_only_files_that_mark_quiet_or_serial_tests_and_selects_the_same(tmp_path):
    """A file with no quiet or serial mark is never imported by the quiet part (it would fail to here); a marked
    test in a file that marks one is selected, as are module-wide marks."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_ignore_collect  # noqa: F401\n")
    (tmp_path / "test_plain.py").write_text("raise SystemExit('imported by the quiet part')\n")
    (tmp_path / "test_marked.py").write_text(
        textwrap.dedent("""
        import pytest

        @pytest.mark.quiet
        def test_q(): pass

        def test_other(): pass
        """)
    )
    (tmp_path / "test_module_wide.py").write_text(
        "import pytest\npytestmark = pytest.mark.serial\ndef test_s(): pass\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", QUIET_PART, "."],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_marked.py::test_q" in out.stdout and "test_module_wide.py::test_s" in out.stdout
    assert "test_other" not in out.stdout and "test_plain" not in out.stdout
