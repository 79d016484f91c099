"""The CLI end to end: run → runs → query → export in real subprocesses (start-up and exit codes), and bad input,
sweeps, predict and the rest through the CLI's main() in this process (tests/_cli.py); runs fork from a warm parent
(conftest's warm_runs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.names import NAMES
from tests._cli import cli_in_process as cli

ROOT = Path(__file__).resolve().parents[2]
# on the CPU: device auto is cuda:0 on a GPU box, and these tests check the CLI, not the device
TINY = [
    "--workload",
    "tensor",
    "--n-samples",
    "128",
    "--image-size",
    "8",
    "--width",
    "8",
    "--batch-size",
    "32",
    "--epochs",
    "2",
    "--device",
    "cpu",
]


pytestmark = pytest.mark.usefixtures("warm_runs")


def real_cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "engine", *args, "--db", str(db)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_run_runs_query_export(store, tmp_path):
    out = real_cli("run", *TINY, "--loader", "threads", "--workers", "2", "--no-bound", db=store)
    assert out.returncode == 0, out.stderr
    assert "epoch 1" in out.stdout and "samples/s" in out.stdout
    listing = real_cli("runs", db=store)
    assert listing.returncode == 0 and "threads" in listing.stdout and "done" in listing.stdout
    q = real_cli("query", "SELECT loader, workers, status, n_epochs FROM runs", "--format", "json", db=store)
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [{"loader": "threads", "workers": 2, "status": "done", "n_epochs": 2}]
    # NOTE: one real process per command is the point here; a second query or export would only repeat one
    run_id = json.loads(cli("query", "SELECT run_id FROM runs", "--format", "json", db=store).stdout)[0]["run_id"]
    show = real_cli("show", run_id, db=store)
    assert show.returncode == 0 and run_id in show.stdout
    for fmt, via in (("parquet", real_cli), ("csv", cli)):
        target = tmp_path / f"runs.{fmt}"
        exp = via("export", "--format", fmt, "--out", str(target), db=store)
        assert exp.returncode == 0, exp.stderr
        assert target.stat().st_size > 0
    import pandas as pd  # noqa: PLC0415

    assert pd.read_parquet(tmp_path / "runs.parquet")["run_id"].tolist() == [run_id]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--loader", "thread"], "loader"),
        (["--workers", "-1"], "workers"),
        (["--batch-size", "0"], "batch_size"),
        (["--device", "cuda:99"], "device"),
        (["--workload", "folder", "--folder", "/no/such/dir"], "folder"),
        (["--epochs", "many"], "epochs"),
    ],
)
def test_bad_flags_exit_2_with_one_line_naming_the_field(store, args, field):
    out = cli("run", *args, db=store)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], out.stderr
    assert not (store.parent / "runs").exists() or not any((store.parent / "runs").iterdir())
    assert not store.exists()  # refused before the store was even created


def test_unknown_command_and_flag_are_one_line(store):
    for args in (["fly"], ["run", "--no-such-flag"]):
        out = cli(*args, db=store)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_help_on_every_command(store):
    for command in ("run", "sweep", "runs", "show", "query", "export"):
        out = cli(command, "--help", db=store)
        assert out.returncode == 0 and "usage" in out.stdout.lower()
    run_help = " ".join(cli("run", "--help", db=store).stdout.split())
    assert "--prefetch-depth" in run_help
    assert f"[{'|'.join(NAMES['loaders'])}]" in run_help  # the registry's names, read when help is shown


def test_a_cli_run_imports_torch_in_its_run_child_only(store):
    """torch was imported twice per `run`: by the CLI to check the config, then by the run child (seconds each,
    more with CUDA). The child checks what needs torch; the CLI launches and reports."""
    code = (
        "import sys, engine.cli\n"
        f"rc = engine.cli.main(['run', *{TINY!r}, '--device', 'cpu', '--no-bound', '--quiet', '--db', {str(store)!r}])\n"
        "print('exit', rc, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.stdout.splitlines()[-1] == "exit 0 False", out.stdout + out.stderr
    q = cli("query", "SELECT status, n_epochs FROM runs", "--format", "json", db=store)
    assert json.loads(q.stdout) == [{"status": "done", "n_epochs": 2}]


def test_sweep_fills_the_store(store, tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text(
        'name = "t"\nrepeats = 1\n[base]\nworkload = "tensor"\nn_samples = 64\nimage_size = 8\n'
        'width = 8\nepochs = 2\nbatch_size = 32\ndevice = "cpu"\nbound = false\n'
        '[grid]\nloader = ["sync", "prefetch"]\n'
    )
    out = cli("sweep", str(toml), "--quiet", db=store)
    assert out.returncode == 0, out.stderr
    q = cli("query", "SELECT loader, sweep_id FROM runs ORDER BY loader", "--format", "json", db=store)
    rows = json.loads(q.stdout)
    assert [r["loader"] for r in rows] == ["prefetch", "sync"] and len({r["sweep_id"] for r in rows}) == 1


def test_a_huge_sweep_is_refused_in_one_line_before_it_is_expanded(store, tmp_path):
    """A 200 x 200 x 200 grid printed nothing for a minute (quadratic de-duplication, validated twice)."""
    toml = tmp_path / "huge.toml"
    toml.write_text("[grid]\n" + "".join(f"{k} = {list(range(1, 201))}\n" for k in ("seed", "width", "depth")))
    out = cli("sweep", str(toml), "--quiet", db=store)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("error: sweep.max_runs: 200 × 200 × 200 grid points = 8000000 configs")
    assert nothing_ran(store)


def test_a_sweep_says_its_size_before_building_its_configs_and_max_runs_raises_the_cap(store, tmp_path):
    toml = tmp_path / "big.toml"  # 1001 good grid points, then one bad point: only building the configs finds it
    toml.write_text(f"[grid]\nseed = {list(range(1001))}\n[[points]]\nbatch_size = 0\n")
    capped = cli("sweep", str(toml), "--quiet", db=store)
    assert capped.returncode == 2 and "1002 runs is above the cap of 1000" in capped.stderr, capped.stderr
    out = cli("sweep", str(toml), "--quiet", "--max-runs", "1002", db=store)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "sweep sweep: 1001 grid points + 1 point = 1002 configs × 1 repeat = 1002 runs",
        "error: batch_size: must be >= 1, got 0 (in grid point batch_size=0)",
    ], out.stderr
    assert nothing_ran(store)


def nothing_ran(store: Path) -> bool:
    runs = store.parent / "runs"
    return not (runs.exists() and any(runs.iterdir()))


def test_failed_run_exits_1_with_the_error_and_is_stored(store):
    # every sample takes 3 s but the loader may wait only 1 s: the run must fail with the timeout's message
    out = real_cli(
        "run",
        *TINY,
        "--loader",
        "processes",
        "--workers",
        "1",
        "--latency-ms",
        "3000",
        "--worker-timeout-s",
        "1",
        "--no-bound",
        db=store,
    )
    assert out.returncode == 1, out.stderr
    assert "failed" in out.stderr and "worker_timeout_s" in out.stderr
    q = cli("query", "SELECT status, error FROM runs", "--format", "json", db=store)
    [row] = json.loads(q.stdout)
    assert row["status"] == "failed" and "worker_timeout_s" in row["error"]


def test_run_summary_line_says_overlap_and_never_none(store):
    """A concurrent mode's summary names its overlap (or leaves it out when there is nothing to overlap), and a
    run without a verdict prints no 'None'."""
    out = cli("run", *TINY, "--mode", "dual-threads", "--width", "256", "--depth", "4", db=store)
    assert out.returncode == 0, out.stderr
    last = out.stdout.strip().splitlines()
    summary = next(line for line in last if line.startswith("run "))
    assert "efficiency" in summary and "None" not in out.stdout
    row = json.loads(cli("query", "SELECT overlap FROM runs", "--format", "json", db=store).stdout)[0]
    assert ("overlap" in summary) == (row["overlap"] is not None)


def test_speedups_pair_dual_modes_with_their_sequential_baseline(store):
    """`speedups` (and lab.speedups): each dual-* config against dual-sequential of the same models in the same
    sweep; shared and separate data are two contenders with that one baseline."""
    from engine import lab  # noqa: PLC0415

    base = {
        "workload": "tensor",
        "n_samples": 64,
        "image_size": 8,
        "width": 8,
        "batch_size": 32,
        "epochs": 2,
        "bound": False,
        "sample_hz": 0.0,
        "device": "cpu",
    }
    runs = lab.sweep(
        {"mode": ["dual-sequential", "dual-threads"], "dual_data": ["shared", "separate"]},
        base=base,
        progress=False,
        db=store,
    )
    assert len(runs) == 3 and set(runs["status"]) == {"done"}  # dual-sequential once: dual_data is not its field
    table = lab.speedups(runs, db=store)
    assert sorted(table["dual_data"]) == ["separate", "shared"] and set(table["baseline_n"]) == {1}
    assert table["speedup"].gt(0).all()
    out = cli("speedups", "--sweep", runs["sweep_id"].iloc[0], "--format", "json", db=store)
    assert out.returncode == 0, out.stderr
    assert sorted(r["dual_data"] for r in json.loads(out.stdout)) == ["separate", "shared"]
    empty = cli("speedups", "--sweep", "no-such-sweep", db=store)
    assert empty.returncode == 0 and "no dual-* or fused runs yet in sweep no-such-sweep" in empty.stdout


# a 2 ms sleep per sample: settings differ in what they predict (workers overlap the sleep)
PREDICT = [
    "--workload",
    "tensor",
    "--n-samples",
    "64",
    "--image-size",
    "8",
    "--width",
    "8",
    "--batch-size",
    "16",
    "--latency-ms",
    "2",
    "--device",
    "cpu",
]


def test_predict_ranks_the_tune_space_then_answers_one_setting_from_the_cached_probe(tmp_path):
    db = tmp_path / "store" / "loaderlab.duckdb"
    db.parent.mkdir()
    ranked = cli("predict", *PREDICT, db=db)
    assert ranked.returncode == 0, ranked.stderr
    assert "probing tensor + mlp on cpu" in ranked.stderr  # said before the few seconds it takes
    table, code = ranked.stdout.split("\n\n# --- the code", 1)  # the table (and its notes), then the top as code
    assert "loader = " in code
    table = table.strip().split("\n\n")[0]  # notes, if any, follow a blank line
    header, *rows = table.splitlines()
    assert header.split()[0] == "setting" and "limit" in header and "range (s)" in header and len(rows) >= 4
    # setting ... | epoch | range | samples/s | limit | alike: the epoch is the figure before its range
    epochs = [
        float(t[i - 1])
        for t in (r.split() for r in rows)
        for i, tok in enumerate(t)
        if re.fullmatch(r"~?[\d.]+-[\d.]+", tok)
    ]
    assert len(epochs) == len(rows)
    assert all(e > 0 for e in epochs) and epochs == sorted(epochs)
    assert {r.split(",")[0].strip() for r in rows} >= {"sync", "prefetch", "threads", "processes"}

    one = cli("predict", *PREDICT, "--loader", "processes", "--workers", "2", "--threads", "1", db=db)
    assert one.returncode == 0, one.stderr
    assert "probing" not in one.stderr and "probe from " in one.stdout and " s old" in one.stdout
    [answer] = [line for line in one.stdout.splitlines() if "predicted epoch" in line]
    assert answer.startswith("processes, 2 workers") and "1 thread" in answer and "limit: " in answer
    assert not db.exists() and not db.with_name(db.name + ".wal").exists()  # a command that reads creates no store
    assert list((db.parent / "calibrations").glob("probe-*.json"))  # the probe is cached for the runs to come


def test_predict_of_a_mode_it_does_not_model_is_one_line_naming_mode(tmp_path):
    out = cli("predict", "--mode", "fused", "--device", "cpu", db=tmp_path / "s.duckdb")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: mode:") and "fused" in lines[0], out.stderr
    assert not list(tmp_path.iterdir())  # nothing measured, nothing written
