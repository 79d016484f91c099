"""The store's lifecycle through the CLI and the pages: a corrupt file, a file from a newer DuckDB or a newer
LoaderLab, and a schema migration. A broken file gets exit status 2, one line that says how to recover
(backup, export, start fresh) and is left byte-identical; a migration backs the file up first and never
overwrites an earlier backup.

tests/engine/test_store.py covers the same cases at the API level; this file covers what a user sees.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from engine.cli import main
from engine.config import RunConfig
from engine.runlog import RunLog
from engine.store import ingest_run
from engine.store.schema import SCHEMA_VERSION
from tests._markup import seen

ROOT = Path(__file__).resolve().parents[2]
BLOCK, HEADERS = 262_144, 3 * 4096  # DuckDB's block size and its three file headers
COMMANDS = [["runs"], ["show", "r1"], ["query", "SELECT * FROM runs"], ["export", "--out", "{tmp}/x.parquet"]]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _store(path: Path, n_steps: int = 2) -> Path:
    """A real store with one run (r1) of 3 epochs × n_steps steps; checkpointed, so no WAL beside it."""
    with RunLog(path.parent / "runs" / "r1") as rl:
        rl.write("start", run_id="r1", config=RunConfig().to_dict(), host={})
        for ep in range(3):
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=ep,
                warmup=ep == 0,
                wall_s=1.0,
                samples=10,
                steps=[[i, 0.1, 0.0, 0.2, 0.3] for i in range(n_steps)],
            )
        rl.write("end", status="done", error=None)
    ingest_run(path.parent / "runs" / "r1", db=path)
    assert not path.with_name(path.name + ".wal").exists()
    return path


def _duckdb_checksum(block: bytes) -> int:
    """DuckDB's block checksum (src/common/checksum.cpp): xor of each 8-byte word times a constant."""
    out = 5381
    for (word,) in struct.iter_unpack("<Q", block):
        out ^= (word * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return out


def _from_newer_duckdb(path: Path) -> None:
    """Rewrite the main header as a future DuckDB would: a higher storage version, a valid checksum."""
    data = bytearray(path.read_bytes())
    assert data[8:12] == b"DUCK"
    struct.pack_into("<Q", data, 12, 10_000)
    struct.pack_into("<Q", data, 0, _duckdb_checksum(bytes(data[8:4096])))
    path.write_bytes(bytes(data))


def _corrupt_a_data_block(path: Path) -> None:
    """Damage the block holding the runs rows: DuckDB reads it only when a query needs it, so the file opens."""
    good = path.read_bytes()
    for start in range(HEADERS, len(good), BLOCK):
        path.write_bytes(good[: start + 8] + bytes(b ^ 0xFF for b in good[start + 8 : start + 72]) + good[start + 72 :])
        try:
            with duckdb.connect(str(path), read_only=True) as conn:
                conn.execute("SELECT count(*) FROM schema_version").fetchall()
        except duckdb.Error:
            continue  # the catalog itself: fails at open, not what this case is about
        try:
            with duckdb.connect(str(path), read_only=True) as conn:
                conn.execute("SELECT * FROM runs").fetchall()  # what every command below reads
        except duckdb.Error:
            return
    pytest.fail("no data block found whose damage shows only at query time")


def _cli(args: list[str], db: Path) -> tuple[int, str, str]:
    """engine.__main__.main in this process (the CLI's code path), capturing its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--db", str(db)])
    return code, out.getvalue(), err.getvalue()


def _process(args: list[str], db: Path) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", "engine", *args, "--db", str(db)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.returncode, p.stdout, p.stderr


def _beside(db: Path) -> list[str]:
    """What lies beside the store, less its locks (the data version sidecar is the fixture's own ingest's)."""
    return sorted(p.name for p in db.parent.iterdir() if not p.name.endswith((".lock", ".lock.queue")))


def _one_line(code: int, stdout: str, stderr: str) -> str:
    assert code == 2, (code, stdout[-300:], stderr[-3000:])
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


BROKEN = {
    "garbage": lambda p: p.write_bytes(os.urandom(4096) * 8),
    "newer_duckdb": _from_newer_duckdb,
    "newer_loaderlab": lambda p: duckdb.connect(str(p))
    .execute("INSERT INTO schema_version VALUES (99, now())")
    .close(),
    "damaged_block": _corrupt_a_data_block,
}
ADVICE = {  # what the one line must say: what is wrong, and a way out that keeps the file
    "garbage": ("left untouched", "bak-v", "--db"),
    "newer_duckdb": ("newer", "DuckDB", "--db"),
    "newer_loaderlab": ("newer", "upgrade", "--db"),
    "damaged_block": ("left untouched", "bak-v", "--db"),
}


@pytest.fixture(params=list(BROKEN))
def broken(request, tmp_path) -> tuple[str, Path, str]:
    db = _store(tmp_path / "store" / "loaderlab.duckdb", n_steps=20_000 if request.param == "damaged_block" else 2)
    BROKEN[request.param](db)
    return request.param, db, _sha(db)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_broken_store_is_one_line_exit_2_and_left_untouched(broken, command, tmp_path):
    kind, db, before = broken
    args = [a.format(tmp=tmp_path) for a in command]
    line = _one_line(*_cli(args, db))
    for word in ADVICE[kind]:
        assert word in line, f"{kind}: '{word}' missing from: {line}"
    assert _sha(db) == before
    assert not (tmp_path / "x.parquet").exists()
    assert _beside(db) == ["loaderlab.duckdb", "loaderlab.duckdb.version", "runs"]  # no WAL, no backup, no replacement


def test_real_cli_processes_on_broken_stores(tmp_path):
    """The same through `python -m engine` processes: what reaches the terminal, logging included."""
    cases = []
    for kind in ("garbage", "newer_duckdb", "newer_loaderlab"):
        db = _store(tmp_path / kind / "loaderlab.duckdb")
        BROKEN[kind](db)
        cases.append((kind, db, _sha(db)))
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda c: _process(["runs"], c[1]), cases))
    for (kind, db, before), result in zip(cases, results):
        line = _one_line(*result)
        assert all(word in line for word in ADVICE[kind]), (kind, line)
        assert _sha(db) == before


@pytest.mark.parametrize("page", ["explore", "history", "runs"])
def test_pages_on_a_broken_store_show_an_error_not_a_traceback(tmp_path, monkeypatch, page):
    db = _store(tmp_path / "store" / "loaderlab.duckdb")
    BROKEN["garbage"](db)
    before = _sha(db)
    monkeypatch.setenv("LOADERLAB_DB", str(db))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    if page != "explore":
        at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.error and any("left untouched" in seen(e.value) and "--db" in seen(e.value) for e in at.error), [
        e.value for e in at.error
    ]
    assert _sha(db) == before


def _downgrade(db: Path) -> None:
    """Make the file look written by a LoaderLab before schema versions: the tables, no version row."""
    with duckdb.connect(str(db)) as conn:
        conn.execute("DELETE FROM schema_version")


def test_migration_through_the_cli_backs_up_first_and_keeps_every_backup(tmp_path):
    db = _store(tmp_path / "store" / "loaderlab.duckdb")
    _downgrade(db)
    before = _sha(db)
    code, out, err = _cli(["runs"], db)  # a reader reads the old file as it is: it never writes, not even to upgrade
    assert code == 0 and "r1" in out and _sha(db) == before, err
    assert not db.with_name(db.name + ".bak-v0").exists()
    code, out, err = _cli(["demo"], db)  # a command that writes upgrades it first (the demo is skipped: runs exist)
    assert code == 0 and "demo skipped" in out, err
    first = db.with_name(db.name + ".bak-v0")
    with duckdb.connect(str(first), read_only=True) as old:
        assert old.execute("SELECT count(*) FROM schema_version").fetchall() == [(0,)]
        assert old.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
        assert old.execute("SELECT count(*) FROM epochs").fetchall() == [(3,)]
    with duckdb.connect(str(db), read_only=True) as new:
        assert new.execute("SELECT max(version) FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert new.execute("SELECT count(*) FROM epochs").fetchall() == [(3,)]
    kept = _sha(first)
    _downgrade(db)
    assert _cli(["demo"], db)[0] == 0
    assert _sha(first) == kept  # the earlier backup is never overwritten
    assert db.with_name(db.name + ".bak-v0.1").exists()


@pytest.mark.slow
def test_run_against_a_corrupt_store_keeps_the_file_and_the_runlog(tmp_path):
    """A run can still be recorded (its RunLog) but the broken file is not touched, and the user gets one line."""
    db = tmp_path / "store" / "loaderlab.duckdb"
    db.parent.mkdir()
    BROKEN["garbage"](db)
    before = _sha(db)
    line = _one_line(
        *_process(
            [
                "run",
                "--n-samples",
                "32",
                "--image-size",
                "8",
                "--width",
                "8",
                "--epochs",
                "2",
                "--batch-size",
                "16",
                "--no-bound",
                "--quiet",
            ],
            db,
        )
    )
    assert "left untouched" in line and "--db" in line, line
    assert _sha(db) == before
    logs = list((db.parent / "runs").glob("*/events.jsonl"))
    assert len(logs) <= 1  # refusing before the run is fine; a run that did happen keeps its RunLog
    if logs:
        assert sum('"type":"epoch"' in line for line in logs[0].read_text().splitlines()) == 2
