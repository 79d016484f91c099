"""bench/findings.py judges every claim by engine.analysis.stats' exact interval of the ratio: "not slower" needs the
low end >= 1 - margin, a claim with no interval is never confirmed, and the sweeps give each side 7 runs."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from engine.config import SweepConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def findings():
    spec = importlib.util.spec_from_file_location("findings_bench", ROOT / "bench" / "findings.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # NOTE: dataclasses look their module up while the file executes
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def _runs(workload: str, loader: str, epochs: list[float]) -> list[dict]:
    return [{"workload": workload, "loader": loader, "epoch_s": t} for t in epochs]


def test_not_slower_needs_the_interval_low_end_within_the_margin(findings):
    claim = next(c for c in findings.CLAIMS if c.expect == "B not slower")
    # the README's JPEG row: 0.94x with an interval reaching 0.88: B may be 12% slower, so not confirmed
    wide = pd.DataFrame(
        _runs("jpeg", "processes", [0.307, 0.300, 0.312, 0.305, 0.309, 0.303, 0.310])
        + _runs("jpeg", "threads", [0.328, 0.295, 0.349, 0.330, 0.318, 0.340, 0.333])
    )
    status, line = findings.judge(claim, wide)
    assert status == "no clear difference" and "(95% CI 0.8" in line  # low end below 0.95
    close = pd.DataFrame(
        _runs("jpeg", "processes", [0.307, 0.300, 0.312, 0.305, 0.309, 0.303, 0.310])
        + _runs("jpeg", "threads", [0.306, 0.301, 0.311, 0.304, 0.308, 0.302, 0.309])
    )
    assert findings.judge(claim, close)[0] == "confirmed"
    slow = pd.DataFrame(_runs("jpeg", "processes", [0.30] * 7) + _runs("jpeg", "threads", [0.40] * 7))
    assert findings.judge(claim, slow)[0] == "contradicted"
    few = pd.DataFrame(_runs("jpeg", "processes", [0.30] * 3) + _runs("jpeg", "threads", [0.30] * 3))
    status, line = findings.judge(claim, few)
    assert status == "no clear difference" and "no interval: 3 runs" in line


def test_b_faster_uses_the_ratio_interval(findings):
    claim = next(c for c in findings.CLAIMS if c.text.startswith("pyloop"))
    assert (claim.a["loader"], claim.b["loader"]) == ("threads", "processes")
    clear = pd.DataFrame(
        _runs("pyloop", "threads", [0.80, 0.79, 0.81, 0.80, 0.82, 0.78, 0.80])
        + _runs("pyloop", "processes", [0.45, 0.46, 0.44, 0.45, 0.47, 0.43, 0.45])
    )
    assert findings.judge(claim, clear)[0] == "confirmed"
    assert (
        findings.judge(
            claim, clear.assign(loader=clear["loader"].map({"threads": "processes", "processes": "threads"}))
        )[0]
        == "contradicted"
    )


def test_every_findings_sweep_gives_each_config_enough_runs_for_an_interval():
    from engine.analysis import stats

    paths = sorted((ROOT / "examples").glob("findings_*.toml"))
    assert len(paths) == 6
    for path in paths:
        sweep = SweepConfig.from_dict(tomllib.loads(path.read_text()))
        assert sweep.repeats >= 7, path.name
        assert stats.ratio_ci(range(1, sweep.repeats + 1), range(1, sweep.repeats))[1] > 0  # one run may fail
    pyloop = SweepConfig.from_dict(
        tomllib.loads((ROOT / "examples" / "findings_threads_vs_processes.toml").read_text())
    )
    assert pyloop.base["workers"] == 2 and set(pyloop.grid["loader"]) == {"threads", "processes"}
