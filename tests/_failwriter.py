"""A pytest plugin that writes every test outcome, and every failure's report, the moment it happens.

    python -m pytest -p tests._failwriter ...        # into $LOADERLAB_REPORT_DIR (default: the current folder)

outcomes.tsv gets one line per phase report (nodeid, when, outcome, seconds) and failures.txt each failure's
report (its last 4,000 characters), both appended and flushed at once: a run cut off by a time limit, a killed
job or a lost machine still leaves what it did so far (bench/gpu_box.py reads them into its summary).
Under pytest-xdist only the controller writes (it sees every worker's reports), so nothing is written twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_DIR: list[Path] = []  # set in pytest_configure: where to write, or empty in an xdist worker


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes its reports
        return
    folder = Path(os.environ.get("LOADERLAB_REPORT_DIR") or ".")
    folder.mkdir(parents=True, exist_ok=True)
    _DIR.append(folder)


def _append(name: str, text: str) -> None:
    with open(_DIR[0] / name, "a", encoding="utf-8") as fh:
        fh.write(text)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _DIR:
        return
    nodeid = report.nodeid.replace("\t", " ").replace("\n", " ")
    _append("outcomes.tsv", f"{nodeid}\t{report.when}\t{report.outcome}\t{report.duration:.3f}\n")
    if report.failed:
        _append("failures.txt", f"===== {nodeid} [{report.when}]\n{report.longreprtext[-4000:]}\n")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A file that cannot even be collected (a missing package, say) is a failure too."""
    if _DIR and report.failed:
        _append("outcomes.tsv", f"{report.nodeid}\tcollect\tfailed\t0.000\n")
        _append("failures.txt", f"===== {report.nodeid} [collect]\n{report.longreprtext[-4000:]}\n")
