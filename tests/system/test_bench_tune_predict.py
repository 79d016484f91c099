"""The issue-20 benchmarks run end to end (--quick, tiny data): bench/predict.py's accuracy tables and
bench/tune_vs_grid.py's comparison come out whole. The shape of what they print, never the figures: those are
taken on a quiet machine (bench/RESULTS.md)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _bench(script: str, *args: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def _table(text: str, header: str) -> list[list[str]]:
    """The rows (cells) of the Markdown table whose header line starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_predict_bench_prints_a_predicted_against_measured_table_per_pipeline(tmp_path):
    out = tmp_path / "predict.md"
    run = _bench("predict.py", "--n-samples", "64", "--db", str(tmp_path / "p.duckdb"), "--out", str(out))
    text = out.read_text()
    assert text.strip() in run.stdout
    for name, kind in (("tensor", "builtin"), ("storage", "unseen")):  # --quick: one built-in, one unseen
        section = text[text.index(f"### {name} ({kind}):") :]
        assert section.splitlines()[2].startswith("probe: load ")
        rows = _table(section, "| setting |")
        assert len(rows) == 3 and all(len(r) == 5 for r in rows), rows  # --quick: 3 settings
        for setting, predicted, measured, error, limit in rows:
            epoch, lo, hi = map(float, re.fullmatch(r"([\d.]+) \(([\d.]+)-([\d.]+)\)", predicted).groups())
            assert 0 < lo <= epoch <= hi, setting  # the range holds the prediction
            assert float(measured.split(" ")[0]) > 0 and re.fullmatch(r"[+-]\d+\.\d", error), setting
            assert limit in ("data-bound", "compute-bound", "cpu-bound", "no-overlap"), limit
    summary = _table(text[text.index("### accuracy") :], "| pipeline |")
    assert {r[0] for r in summary} == {"tensor", "storage"}
    assert {r[1] for r in summary} >= {"prior (probe alone)", "prior+runs, k=1", "prior+runs, k=2"}
    assert all(r[2] == "3" for r in summary if r[1] == "prior (probe alone)")
    assert "goal on the unseen pipelines, probe alone: median <= 10 %, p90 <= 20 %:" in text
    assert "largest misses" in text and "model:" in text.lower()


def test_tune_vs_grid_bench_scores_tunes_answer_on_the_grid(tmp_path):
    out = tmp_path / "grid.md"
    run = _bench("tune_vs_grid.py", "--share", "10", "--db-dir", str(tmp_path), "--out", str(out))
    text = out.read_text()
    assert text.strip() in run.stdout
    rows = _table(text, "| search |")
    assert [r[0].split(" (")[0] for r in rows] == ["grid", "tune"] and all(len(r) == 6 for r in rows), rows
    assert rows[0][5] == "100%" and rows[1][3] != "no answer"
    assert re.search(r"tune's wall time: [\d.]+% of the grid's", text)
    assert re.search(r"throughput: [\d.]+% of the grid best's", text)
    assert "vs processes 1w depth 2, threads 1: tune's answer is" in text and "at least as fast by the medians:" in text
