"""Every store keeps to itself (issue 19, section 1), through the real CLI and real DuckDB files (a run and the
worker in real subprocesses; the reads, refusals and the stores' later writes, a `worker --once` with nothing to
run, through the CLI's main() in this process, tests/_cli.py):
- a RunLog names its store, and only that store ingests it, even with two stores in one folder;
- query, runs, show and export never write: the file's bytes stay the same, what waits is only reported;
- a store path that does not exist is created only by a command that writes, which says so;
- a store that cannot be used (random bytes, a folder, a path that cannot exist) is refused in one line with
  exit 2 before anything runs: no run child, no RunLog.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import RunConfig
from engine.runlog import RunLog, claim, owner
from engine.store import ingest_run
from tests._cli import cli_in_process

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--n-samples", "128", "--epochs", "2", "--image-size", "16", "--width", "8", "--no-bound", "--quiet"]
READERS = [["query", "SELECT count(*) AS n FROM runs"], ["runs"], ["show", "r1"], ["export", "--out", "{out}"]]
WAITING = "waiting to be stored: the results are safe in their RunLogs"


def cli(*args: str, db: Path | str | None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A real `python -m engine` process: for a run and the worker, whose child processes and store writes are
    the point; reads and refusals go through in_process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    flags = ["--db", str(db)] if db is not None else []
    return subprocess.run(
        [sys.executable, "-m", "engine", *args, *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def in_process(*args: str, db: Path | str | None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return cli_in_process(*args, db=db, env=env)


def store_waiting(db: Path) -> subprocess.CompletedProcess:
    """`worker --once` on an empty queue, in this process: a command that writes, which stores what waits for `db`.
    NOTE: LOADERLAB_WARM=0: it has no job to fork, and its warm parent would import torch only to be closed."""
    return in_process("worker", "--once", db=db, env={"LOADERLAB_WARM": "0"})


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def _count(db: Path) -> int:
    out = in_process("query", "SELECT count(*) AS n FROM runs", "--format", "json", db=db)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)[0]["n"]


def _runlog(run_dir: Path, run_id: str, store: Path | None) -> Path:
    """A finished RunLog of one epoch, naming `store` (None: written as before RunLogs named their store)."""
    if store is not None:
        claim(run_dir, store)
    with RunLog(run_dir) as rl:
        rl.write("start", run_id=run_id, config=RunConfig().to_dict(), host={})
        rl.write(
            "epoch", model_idx=0, rank=0, epoch=0, warmup=False, wall_s=1.0, samples=10, steps=[[0, 0.1, 0.0, 0.2, 0.3]]
        )
        rl.write("end", status="done", error=None)
    return run_dir


def test_a_run_lands_only_in_the_store_it_names(tmp_path):
    """The issue's repro: a run into a.duckdb, then b.duckdb beside it: b never gets a's run, and a read of b
    before b exists creates nothing."""
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    out = cli("run", *TINY, db=a)
    assert out.returncode == 0, out.stderr
    assert f"created a new store at {a}" in out.stderr.splitlines()
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir()]
    assert owner(run_dir) == str(a.resolve())
    before = sorted(p.name for p in tmp_path.iterdir())

    line = _one_line(in_process("query", "select count(*) n from runs", db=b))
    assert line.startswith("error: --db: ") and str(b) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no b.duckdb, no lock or version beside it

    # a command that writes: creates b, and stores what waits for b only (no job to fork: no warm parent)
    worker = cli("worker", "--once", db=b, env={"LOADERLAB_WARM": "0"})
    assert worker.returncode == 0, worker.stderr
    assert f"creating a new store at {b}" in worker.stderr
    kept = _sha(b)
    assert _count(b) == 0 and _count(a) == 1
    assert _sha(b) == kept


def test_two_stores_in_one_folder_each_ingest_only_their_own(tmp_path):
    """RunLogs of both stores wait side by side (as when each store was held): each writer takes its own."""
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    for db in (a, b):
        assert store_waiting(db).returncode == 0
    _runlog(tmp_path / "runs" / "ra", "ra", a)
    _runlog(tmp_path / "runs" / "rb", "rb", b)
    _runlog(tmp_path / "runs" / "old", "old", None)  # from before RunLogs named their store: neither a nor b's
    for db, mine in ((a, "ra"), (b, "rb")):
        assert store_waiting(db).returncode == 0
        out = in_process("query", "SELECT run_id FROM runs", "--format", "json", db=db)
        assert [r["run_id"] for r in json.loads(out.stdout)] == [mine], out.stderr
        assert WAITING not in out.stderr  # the other store's RunLog is not this store's to wait for


@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_reads_never_write_and_say_what_waits(store, tmp_path, command):
    """A reader leaves the store byte-identical, ingests nothing, and says in one line that a run waits."""
    ingest_run(_runlog(store.parent / "runs" / "r1", "r1", store), db=store)
    waiting = _runlog(store.parent / "runs" / "r2", "r2", store)  # finished, not stored yet
    before = _sha(store)
    args = [a.format(out=tmp_path / "out.parquet") for a in command]
    out = in_process(*args, db=store)
    assert out.returncode == 0, out.stderr
    (line,) = [line for line in out.stderr.splitlines() if line.strip()]
    assert line.startswith(f"1 run(s) {WAITING} and will be stored by the next command that writes"), line
    assert _sha(store) == before
    assert not store.with_name(store.name + ".wal").exists()
    assert store_waiting(store).returncode == 0  # a writer stores it
    assert _count(store) == 2 and (waiting / "ingested").exists()


@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_reading_a_store_that_does_not_exist_creates_nothing(tmp_path, command):
    args = [a.format(out=tmp_path / "out.parquet") for a in command]
    typo = tmp_path / "typo.duckdb"
    line = _one_line(in_process(*args, db=typo))
    assert line.startswith("error: --db: ") and str(typo) in line
    line = _one_line(in_process(*args, db=None, env={"LOADERLAB_DB": str(typo)}))
    assert line.startswith("error: LOADERLAB_DB: ") and str(typo) in line
    assert list(tmp_path.iterdir()) == []


def _random_bytes(path: Path) -> Path:
    path.write_bytes(os.urandom(64 * 1024))
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


UNUSABLE = {"random bytes": _random_bytes, "a folder": _folder, "under /proc": lambda _: Path("/proc/nope.duckdb")}


@pytest.mark.parametrize("kind", UNUSABLE)
@pytest.mark.parametrize("command", [["run", *TINY], ["sweep", "{sweep}", "--quiet"]], ids=lambda c: c[0])
def test_an_unusable_store_is_refused_before_anything_runs(tmp_path, kind, command):
    db = UNUSABLE[kind](tmp_path / "bad.duckdb")
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        'name = "t"\nrepeats = 1\n[base]\nn_samples = 64\nepochs = 2\nbound = false\n[grid]\nloader = ["sync"]\n'
    )
    before = _sha(db) if db.is_file() else None
    out = in_process(*[a.format(sweep=sweep) for a in command], db=db)
    assert not (tmp_path / "runs").exists(), out.stderr  # no RunLog: nothing ran
    assert (_sha(db) if db.is_file() else None) == before
    line = _one_line(out)
    assert line.startswith("error: --db: ") and str(db) in line, line
