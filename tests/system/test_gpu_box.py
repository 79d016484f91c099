"""The suite and its tools on a GPU box, checked on any machine: `make test-gpu`'s script (bench/gpu_box.py) finds
the missing pins against this very Python and summarises real pytest runs, a cut-off one included; pytest-xdist
workers share the cores; and every CUDA test carries the `gpu` mark that `make test-gpu` selects by.

The GPU tests themselves are not run here: they skip without CUDA.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [sys.executable, str(ROOT / "bench" / "gpu_box.py")]


def _gpu_box(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, **kw)


def test_only_the_missing_pins_are_installed_and_never_torch(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text(
        f"# a comment\ntorch==9.9.9\npsutil=={md.version('psutil')}\nduckdb==0.0.1  # not what is here\n"
        "loaderlab-no-such-package==1.0\n"
    )
    missing = _gpu_box("missing", "--requirements", str(req))
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout.split() == ["loaderlab-no-such-package==1.0"]  # torch is the box's; others are here
    assert f"kept: duckdb {md.version('duckdb')} (pinned 0.0.1)" in missing.stderr
    dry = _gpu_box(
        "install",
        "--dry-run",
        "--requirements",
        str(req),
        "--out",
        str(tmp_path / "out"),
        "--pip-args=--no-index --find-links /wheels",
    )
    assert dry.returncode == 0, dry.stderr
    command = dry.stdout.strip().split()
    assert command[1:4] == ["-m", "pip", "install"] and "--no-deps" in command
    assert [a for a in command if "==" in a] == ["loaderlab-no-such-package==1.0"]
    assert "--no-index" in command and "/wheels" in command


SAMPLE = """
import time
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("fixture on fire")

def test_passes():
    pass

def test_fails():
    assert 1 + 1 == 3, "arithmetic is off"

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

def test_errors(broken):
    pass

def test_zz_sleeps():
    time.sleep(600)
"""


def test_a_run_is_summarised_with_its_counts_and_failures(tmp_path):
    (tmp_path / "t" / "test_sample.py").parent.mkdir()
    (tmp_path / "t" / "test_sample.py").write_text(SAMPLE.replace("time.sleep(600)", "pass"))
    out = tmp_path / "out"
    run = _gpu_box("test", "--out", str(out), "--", str(tmp_path / "t"), "-p", "no:randomly")
    assert run.returncode == 1, run.stdout + run.stderr  # pytest's own exit status: tests failed
    summary = (out / "summary.md").read_text()
    assert "### custom: 2 passed, 1 failed, 1 errors, 1 skipped (exit 1 in" in summary, summary
    assert "test_sample.py::test_fails`: AssertionError: arithmetic is off" in summary
    assert "test_sample.py::test_errors`: RuntimeError: fixture on fire" in summary
    assert "**torch:** " in summary and "**GPU:** " in summary


def test_a_cut_off_run_still_leaves_its_outcomes_and_failures(tmp_path):
    (tmp_path / "t" / "test_sample.py").parent.mkdir()
    (tmp_path / "t" / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*SCRIPT, "test", "--out", str(out), "--", str(tmp_path / "t"), "-p", "no:randomly"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        outcomes = out / "custom" / "outcomes.tsv"
        wait_for(
            lambda: outcomes.exists() and "test_zz_sleeps\tsetup" in outcomes.read_text(),
            "the sleeping test to start",
            timeout_s=120,
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole run, as a lost machine or a job limit would
        proc.wait()
    assert not (out / "summary.md").exists()
    summary = _gpu_box("summary", "--out", str(out))
    assert summary.returncode == 0, summary.stderr
    assert (
        "### custom: 1 passed, 1 failed, 1 errors, 1 skipped, 1 unfinished (**cut off**: the counts so far)"
        in summary.stdout
    ), summary.stdout
    assert "arithmetic is off" in summary.stdout


def test_a_benchmark_cut_off_at_its_limit_keeps_what_it_printed_and_stops_its_children(tmp_path):
    script = tmp_path / "fig.py"
    script.write_text(
        "import subprocess, sys, time\nprint('fused N=16: 11.1x sequential')\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print('child', child.pid)\ntime.sleep(600)\n"
    )
    out = tmp_path / "out"
    run = _gpu_box("bench", "--out", str(out), "--timeout", "5", "--", str(script), "--flag")
    assert run.returncode == 0, run.stdout + run.stderr  # a cut-off benchmark still gives its figures
    summary = (out / "summary.md").read_text()
    assert "### fig (cut off at its time limit, " in summary and "fused N=16: 11.1x sequential" in summary
    child = int(summary.split("child ")[1].split()[0])
    wait_for(
        lambda: not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2],
        "the benchmark's child to stop",
        timeout_s=30,
    )


def test_xdist_workers_share_the_cores_and_the_runs_they_start_inherit_it(tmp_path):
    """tests/conftest.py under N xdist workers: torch in the worker and in a process it starts use at most
    cores / N threads (torch's default, one per core in each of N workers, swamped a 16-core GPU box)."""
    (tmp_path / "test_threads.py").write_text(
        textwrap.dedent("""
        import os, subprocess, sys
        import torch

        def test_threads():
            n, cores = int(os.environ["PYTEST_XDIST_WORKER_COUNT"]), len(os.sched_getaffinity(0))
            child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                                   capture_output=True, text=True, check=True).stdout
            assert torch.get_num_threads() == int(child) == max(1, cores // n)
    """)
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(PYTEST_XDIST_WORKER_COUNT=str(4 * len(os.sched_getaffinity(0))), PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_threads.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:]


def _skips_without_cuda(decorator: ast.expr) -> bool:
    """`@pytest.mark.skipif(not torch.cuda.is_available() ...)`, `device_count() < k`, or a name bound to one."""
    text = ast.unparse(decorator)
    return "skipif" in text and ("not torch.cuda.is_available()" in text or "device_count() <" in text)


def test_every_test_that_needs_cuda_carries_the_gpu_mark():
    """`make test-gpu` runs `-m gpu` one test at a time on the one GPU: a CUDA test without the mark would run
    in parallel with the rest instead (and `-m "not gpu"` would hold it)."""
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        aliases = {
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign) and _skips_without_cuda(node.value)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            decorators = [ast.unparse(d) for d in node.decorator_list]
            needs = any(_skips_without_cuda(d) for d in node.decorator_list) or aliases & set(decorators)
            if needs and "pytest.mark.gpu" not in decorators:
                unmarked.append(f"{path.relative_to(ROOT)}::{node.name}")
    assert unmarked == []


@pytest.mark.parametrize("target", ["test-gpu", "bench-gpu"])
def test_make_targets_use_the_pythons_own_torch_and_no_venv(target):
    # NOTE: --no-print-directory: under `make test` this is a sub-make, which would add "Entering directory" lines
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", target, "PYTHON=/opt/box/bin/python3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    lines = [line for line in dry.stdout.splitlines() if line.strip()]
    assert lines and all(line.startswith("/opt/box/bin/python3 bench/gpu_box.py ") for line in lines), lines
    assert "venv" not in dry.stdout and "requirements.txt" not in dry.stdout
