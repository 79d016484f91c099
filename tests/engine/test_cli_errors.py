"""Bad input to the CLI gets one line and exit 2, never a traceback (issue 19 §4), on real stores: the CLI's
main() in this process (tests/_cli.py), and real `python -m engine` subprocesses where a process's own behaviour is
the point (its peak memory, a closed pipe); runs fork from a warm parent (conftest's warm_runs).

    .venv/bin/python -m pytest tests/engine/test_cli_errors.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import RunConfig
from engine.runlog import RunLog
from engine.store import ingest_run
from tests._cli import cli_in_process as cli

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("warm_runs")


def one_line(out: subprocess.CompletedProcess, *words: str) -> str:
    """The one stderr line of a refused command (exit 2), which names what was wrong."""
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def stored_run(root: Path, run_id: str = "r1", **config: object) -> Path:
    """A real store holding one done run, written as a RunLog and ingested (no torch run needed)."""
    with RunLog(root / "runs" / run_id) as rl:
        rl.write("start", run_id=run_id, config=RunConfig(**config).to_dict(), host={})
        rl.write(
            "epoch",
            model_idx=0,
            rank=0,
            epoch=0,
            warmup=False,
            wall_s=1.5,
            samples=10,
            ttfb_s=0.1,
            data_wait_s=0.1,
            h2d_s=0.0,
            compute_s=1.0,
            n_steps=1,
            steps=[[0, 0.1, 0.0, 1.0, 1.1]],
        )
        rl.write("end", status="done", error=None)
    db = root / "loaderlab.duckdb"
    ingest_run(root / "runs" / run_id, db=db)
    return db


# ---------------------------------------------------------------------------- row counts


@pytest.mark.parametrize("value", ["-1", "0", "99999999999999999999", "ten"])
def test_runs_limit_out_of_range_is_one_line(tmp_path, value):
    db = stored_run(tmp_path)
    one_line(cli("runs", "--limit", value, db=db), "--limit")
    assert "r1" in cli("runs", "--limit", "1", db=db).stdout


@pytest.mark.parametrize("value", ["-1", "0", "99999999999999999999"])
def test_query_max_rows_out_of_range_is_one_line(tmp_path, value):
    db = stored_run(tmp_path)
    out = cli("query", "SELECT 1 AS x", "--max-rows", value, db=db)
    one_line(out, "--max-rows")
    assert out.stdout == ""  # no empty frame printed as if it were the answer


def test_query_table_above_its_cap_says_to_stream(tmp_path):
    db = stored_run(tmp_path)
    one_line(cli("query", "SELECT 1 AS x", "--max-rows", "30000000", db=db), "--max-rows", "--format csv")


def test_query_streams_a_large_csv_in_bounded_memory_and_says_where_it_stopped(tmp_path):
    """1M rows of 200 characters (~200 MB as text, several times that as one DataFrame) stream out whole, and the
    CLI's peak memory stays far below what holding them would take."""
    db = stored_run(tmp_path)
    sql = "SELECT range AS i, repeat('x', 200) AS s FROM range(1000001)"
    probe = (
        "import resource, subprocess, sys; "
        "out = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE); "
        "lines = out.stdout.count(b'\\n'); "
        "print(out.returncode, lines, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
        "out.stderr.decode().strip().replace(' ', '_'))"
    )
    peaks = {}
    for name, args in (
        ("small", ["SELECT 1 AS i", "--format", "csv"]),
        ("large", [sql, "--format", "csv", "--max-rows", "1000000"]),
    ):
        run = subprocess.run(
            [sys.executable, "-c", probe, sys.executable, "-m", "engine", "query", *args, "--db", str(db)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        code, lines, peak_kb, err = run.stdout.split(maxsplit=3) + [""] * (4 - len(run.stdout.split(maxsplit=3)))
        assert code == "0", run.stdout + run.stderr
        peaks[name] = int(peak_kb) * 1024
        if name == "large":
            assert int(lines) == 1 + 1_000_000  # the header and every row up to the cap: nothing cut silently
            assert "truncated_at_1000000_rows" in err
    assert peaks["large"] - peaks["small"] < 150 * 2**20, peaks


def test_query_json_streams_one_array(tmp_path):
    db = stored_run(tmp_path)
    out = cli("query", "SELECT range AS i FROM range(70000)", "--format", "json", "--max-rows", "69999", db=db)
    assert out.returncode == 0, out.stderr
    assert [r["i"] for r in json.loads(out.stdout)] == list(range(69999))  # across batches of 65536 rows
    assert "truncated at 69999 rows" in out.stderr
    empty = cli("query", "SELECT 1 AS i WHERE false", "--format", "json", db=db)
    assert json.loads(empty.stdout) == []


def test_query_stopped_by_a_closed_pipe_ends_quietly(tmp_path):
    """`query ... | head -1`: the reader goes away mid-stream; the CLI stops without a BrokenPipeError traceback."""
    db = stored_run(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine",
            "query",
            "SELECT range FROM range(1000000)",
            "--format",
            "csv",
            "--max-rows",
            "1000000",
            "--db",
            str(db),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout.readline() == b"range\n"
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141 and "Traceback" not in err and not err.strip(), err


# ---------------------------------------------------------------------------- the console's own SQL


def test_query_with_a_trailing_semicolon_and_comment_runs(tmp_path):
    db = stored_run(tmp_path)
    out = cli("query", "SELECT 1 AS x; -- c", "--format", "json", db=db)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"x": 1}]


def test_query_errors_name_the_users_own_line(tmp_path):
    db = stored_run(tmp_path)
    line = one_line(cli("query", "SELECT\n  nope FROM runs; -- c", db=db), "nope")
    assert "LINE 2:" in line  # the user's second line, not a line of a wrapper around it


# ---------------------------------------------------------------------------- user text on the terminal


def test_control_characters_in_user_text_are_escaped_not_printed_raw(tmp_path):
    """A tag holding an ANSI escape (or a newline) must not recolour the terminal or forge a line of the table."""
    db = stored_run(tmp_path, tag="\x1b[31mred\x1b[0m\nforged done")
    for args in (["runs"], ["show", "r1"], ["query", "SELECT tag FROM runs"]):
        out = cli(*args, db=db)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout, (args, out.stdout)
        assert "red" in out.stdout and not any(line.startswith("forged") for line in out.stdout.splitlines()), args
    assert "\\x1b[31mred" in cli("runs", db=db).stdout  # shown, escaped
    raw = cli("query", "SELECT tag FROM runs", "--format", "json", db=db)
    assert json.loads(raw.stdout) == [{"tag": "\x1b[31mred\x1b[0m\nforged done"}]  # data formats keep the data


# ---------------------------------------------------------------------------- files given on the command line


def test_sweep_of_a_directory_says_it_is_a_directory(tmp_path, store):
    folder = tmp_path / "sweeps"
    folder.mkdir()
    line = one_line(cli("sweep", str(folder), db=store), "is a directory", ".toml")
    assert "does not exist" not in line
    one_line(cli("run", "--config", str(folder), db=store), "config", "is a directory")


def test_tune_with_nothing_after_the_dashes_is_one_line_saying_how_to_name_the_script(tmp_path):
    store = tmp_path / "s.duckdb"
    out = cli("tune", "--db", str(store), "--")  # --db before --: after it, everything is the script's command
    line = one_line(out, "script", "python -m engine tune -- python train.py")
    assert "observe" not in line
    assert out.stdout == "" and not store.exists()  # refused before a trial was promised or the store made


@pytest.mark.parametrize(
    ("script", "says"),
    [(["bash", "train.sh"], "is not a Python interpreter"), (["python"], "no script to run after the interpreter")],
)
def test_tune_of_a_command_it_cannot_run_is_one_line_about_tune_not_observe(tmp_path, script, says):
    store = tmp_path / "s.duckdb"
    out = cli("tune", "--db", str(store), "--", *script)
    line = one_line(out, "script", says, "python -m engine tune -- python train.py")
    assert "observe" not in line
    assert out.stdout == "" and not store.exists()


@pytest.mark.parametrize("target", ["/proc/version", "a folder"])
def test_export_to_a_path_it_cannot_write_is_one_line_and_writes_nothing(tmp_path, target):
    db = stored_run(tmp_path / "store")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "keep.txt").write_text("keep")
    out = folder if target == "a folder" else Path(target)
    one_line(cli("export", "--format", "csv", "--table", "runs", "--out", str(out), db=db), "--out", str(out))
    assert sorted(os.listdir(folder)) == ["keep.txt"]  # no half-written file, no temporary left behind
    assert (folder / "keep.txt").read_text() == "keep"
    good = cli("export", "--format", "csv", "--out", str(folder / "runs.csv"), db=db)
    assert good.returncode == 0, good.stderr
    assert (folder / "runs.csv").read_text().startswith("run_id,") and sorted(os.listdir(folder)) == [
        "keep.txt",
        "runs.csv",
    ]


# ---------------------------------------------------------------------------- a run that fails


FAILING_DATA = '''
import torch
from torch.utils.data import Dataset


class Failing(Dataset):
    """Fails on the 41st item a process loads: after preflight's one batch (16 items), inside any loader's worker."""

    loaded = 0

    def __len__(self):
        return 96

    def __getitem__(self, i):
        Failing.loaded += 1
        if Failing.loaded > 40:
            raise ValueError("sample is corrupt")
        return torch.zeros(3, 8, 8), i % 2


def build(**cfg):
    return Failing()
'''


@pytest.mark.parametrize("loader", ["sync", "prefetch", "threads", "processes", "spdl"])
def test_a_failed_run_is_one_line_for_every_loader_with_the_traceback_in_its_runlog(tmp_path, store, loader):
    (tmp_path / "failing_data.py").write_text(FAILING_DATA)
    out = cli(
        "run",
        "--workload",
        "failing_data:build",
        "--num-classes",
        "2",
        "--image-size",
        "8",
        "--batch-size",
        "16",
        "--epochs",
        "2",
        "--no-bound",
        "--quiet",
        "--loader",
        loader,
        "--workers",
        "2",
        db=store,
        cwd=tmp_path,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    [line] = [x for x in out.stderr.strip().splitlines() if not x.startswith("created a new store at ")]
    assert line.endswith(" failed: ValueError: sample is corrupt"), line
    [row] = json.loads(cli("query", "SELECT run_id, status, error FROM runs", "--format", "json", db=store).stdout)
    assert (row["status"], row["error"]) == ("failed", "ValueError: sample is corrupt")
    from engine.runlog import end_traceback  # noqa: PLC0415

    traceback = end_traceback(store.parent / "runs" / row["run_id"])
    assert 'raise ValueError("sample is corrupt")' in traceback and "failing_data.py" in traceback


# ---------------------------------------------------------------------------- a full disk


FILLS_THE_DISK = '''
import os

import torch
from torch.utils.data import Dataset


class FillsTheDisk(Dataset):
    """From its 130th item on (in epoch 1 of a sync run), the disk holding the run's RunLog is full: the RunLog's
    open file is swapped for /dev/full, which fails every write with ENOSPC, as a disk that fills up mid-run does."""

    loaded = 0

    def __len__(self):
        return 96

    def __getitem__(self, i):
        FillsTheDisk.loaded += 1
        if FillsTheDisk.loaded == 130:
            [fd] = [int(fd) for fd in os.listdir("/proc/self/fd")
                    if os.path.realpath(f"/proc/self/fd/{fd}").endswith("/events.jsonl")]
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, fd)
            os.close(full)
        return torch.zeros(3, 8, 8), i % 2


def build(**cfg):
    return FillsTheDisk()
'''


def test_a_disk_full_mid_run_is_one_line_and_stored_as_failed_with_where(tmp_path, store):
    (tmp_path / "fills_disk.py").write_text(FILLS_THE_DISK)
    out = cli(
        "run",
        "--workload",
        "fills_disk:build",
        "--num-classes",
        "2",
        "--image-size",
        "8",
        "--batch-size",
        "16",
        "--epochs",
        "3",
        "--no-bound",
        "--quiet",
        "--loader",
        "sync",
        db=store,
        cwd=tmp_path,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    [line] = [x for x in out.stderr.strip().splitlines() if not x.startswith("created a new store at ")]
    [row] = json.loads(cli("query", "SELECT run_id, status, error FROM runs", "--format", "json", db=store).stdout)
    log_file = store.parent / "runs" / row["run_id"] / "events.jsonl"
    assert line.endswith(f" failed: disk full (writing {log_file}); free space on that disk and run again"), line
    assert (row["status"], row["error"]) == ("failed", line.split(" failed: ", 1)[1])
    epochs = json.loads(cli("query", "SELECT epoch FROM epochs", "--format", "json", db=store).stdout)
    assert epochs == [{"epoch": 0}]  # the epoch finished before the disk filled is kept


def test_a_runlog_with_no_room_at_all_still_stores_the_run_as_failed_disk_full(tmp_path, store):
    """The RunLog's file is /dev/full from the start: neither the run nor the launcher can write a byte of it. The
    launcher stores the run directly (failed, disk full), so it is not found later as `killed` with no reason."""
    from engine.run.runner import launch  # noqa: PLC0415
    from engine.store import get_run  # noqa: PLC0415

    run_dir = store.parent / "runs" / "20250101-120000-d15cf0"
    run_dir.mkdir(parents=True)
    (run_dir / "events.jsonl").symlink_to("/dev/full")
    cfg = RunConfig(workload="tensor", n_samples=64, image_size=8, width=8, batch_size=32, epochs=2, bound=False)
    result = launch(cfg, db=store, meta={"run_id": run_dir.name})
    expected = f"disk full (writing {run_dir / 'events.jsonl'}); free space on that disk and run again"
    assert (result.status, result.error, result.stored) == ("failed", expected, True)
    run = get_run(run_dir.name, db=store)
    assert (run["status"], run["error"]) == ("failed", expected)
