"""Incremental ingest: a RunLog that grows is read from the byte offset the store holds, whole lines only,
and ends up exactly as one ingest of the whole log would store it. Real RunLogs, real DuckDB files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import RunConfig
from engine.runlog import RunLog, claim, owner
from engine.store import connect, get_epochs, get_run, ingest_pending, ingest_run, pending_summary

TABLES = ("epochs", "steps", "samples", "calibrations")
SKIP = {"run_id", "created_at", "started_at", "ended_at"}


def _epoch(rl: RunLog, ep: int, wall: float, *, model_idx: int = 0, steps: int = 3) -> None:
    rl.write(
        "epoch",
        model_idx=model_idx,
        rank=0,
        epoch=ep,
        warmup=ep == 0,
        wall_s=wall,
        samples=30,
        samples_per_s=30 / wall,
        ttfb_s=0.01 * (ep + 1),
        data_wait_s=0.2 * wall,
        h2d_s=0.1 * wall,
        compute_s=0.6 * wall,
        n_steps=steps,
        t_start=10.0 * ep,
        t_end=10.0 * ep + wall,
        steps=[[s, 0.01 * (s + ep + model_idx), 0.002, 0.03, 0.05] for s in range(steps)],
    )


def _pieces(run_dir: Path):
    """The log written in four pieces, as a run writes it over time; yields after each piece."""
    rl = RunLog(run_dir)
    rl.write("start", run_id="grow", config=RunConfig(loader="threads", workers=2).to_dict(), host={"cores": 2})
    rl.write("calibration", kind="loader", seconds=0.4, ttfb_s=0.02, cached=False)
    _epoch(rl, 0, 1.0)
    yield
    for ep in (1, 2):
        _epoch(rl, ep, 1.0 + ep)
        _epoch(rl, ep, 0.5 + ep, model_idx=1, steps=5)
        rl.write("samples", rows=[[float(ep), 40.0 + ep, 1000 * ep, None, None]])
    yield
    _epoch(rl, 2, 9.0)  # epoch 2 of model 0 written again: the last one wins, steps included
    _epoch(rl, 3, 4.0, steps=2)
    rl.write("summary", efficiency=0.7, verdict="data-bound")
    yield
    rl.write("samples", rows=[[4.0, 90.0, 5000, None, None]])
    rl.write("summary", bound_s=2.5)
    rl.write("end", status="done", error=None)
    rl.close()
    yield


def _dump(db: Path) -> dict:
    with connect(db, read_only=True) as conn:
        out = {t: conn.execute(f"SELECT * EXCLUDE (run_id) FROM {t} ORDER BY ALL").fetchall() for t in TABLES}
        cur = conn.execute("SELECT * FROM runs")
        row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    out["runs"] = {k: v for k, v in row.items() if k not in SKIP}
    return out


def test_growing_log_ends_as_one_whole_ingest(tmp_path):
    run_dir, step_db, whole_db = tmp_path / "runs" / "grow", tmp_path / "step.duckdb", tmp_path / "whole.duckdb"
    statuses = []
    for _ in _pieces(run_dir):
        ingest_run(run_dir, db=step_db)
        statuses.append(get_run("grow", db=step_db)["status"])
    ingest_run(run_dir, db=whole_db)
    assert statuses == ["running", "running", "running", "done"]
    stepwise, whole = _dump(step_db), _dump(whole_db)
    assert stepwise == whole
    assert len(whole["epochs"]) == 6 and len(whole["steps"]) == 3 + 3 + 5 + 3 + 5 + 2
    assert [e[4] for e in whole["epochs"] if e[0] == 0 and e[2] == 2] == [9.0]  # (model 0, epoch 2) last one
    assert json.loads(whole["runs"]["summary_json"])["verdict"] == "data-bound"
    assert (
        whole["runs"]["bound_s"] == 2.5 and whole["runs"]["ingested_bytes"] == (run_dir / "events.jsonl").stat().st_size
    )


def test_ingest_resumes_from_the_stored_offset(tmp_path):
    run_dir, db = tmp_path / "runs" / "grow", tmp_path / "loaderlab.duckdb"
    pieces = _pieces(run_dir)
    next(pieces)
    ingest_run(run_dir, db=db)
    offset = get_run("grow", db=db)["ingested_bytes"]
    log_file = run_dir / "events.jsonl"
    # Blank out the bytes already stored: a re-read would lose epoch 0; a resumed read never sees them.
    data = log_file.read_bytes()
    head = data[:offset].index(b"\n") + 1  # keep the start event line
    log_file.write_bytes(data[:head] + b" " * (offset - head - 1) + b"\n" + data[offset:])
    next(pieces)
    ingest_run(run_dir, db=db)
    assert sorted(get_epochs("grow", db=db)["epoch"]) == [0, 1, 1, 2, 2]
    assert get_run("grow", db=db)["ingested_bytes"] == log_file.stat().st_size


def test_a_line_being_written_waits_for_the_next_ingest(tmp_path):
    run_dir, db = tmp_path / "runs" / "grow", tmp_path / "loaderlab.duckdb"
    pieces = _pieces(run_dir)
    next(pieces)
    ingest_run(run_dir, db=db)
    log_file = run_dir / "events.jsonl"
    whole = (
        json.dumps(
            {
                "type": "epoch",
                "t": 1.0,
                "model_idx": 0,
                "rank": 0,
                "epoch": 7,
                "warmup": False,
                "wall_s": 2.0,
                "samples": 3,
                "steps": [[0, 0.1, 0.0, 0.2, 0.3]],
            }
        )
        + "\n"
    )
    with open(log_file, "a") as fh:
        fh.write(whole[:40])  # the run is mid-write: no newline yet
    before = log_file.stat().st_size - 40
    assert ingest_pending(db=db) == []  # nothing whole to add
    assert get_run("grow", db=db)["ingested_bytes"] == before
    with open(log_file, "a") as fh:
        fh.write(whole[40:])
    assert ingest_pending(db=db) == ["grow"]
    assert 7 in set(get_epochs("grow", db=db)["epoch"])


def test_pending_summary_counts_finished_logs_the_store_lacks(tmp_path):
    db = tmp_path / "loaderlab.duckdb"
    run_dir = tmp_path / "runs" / "grow"
    pieces = _pieces(run_dir)
    next(pieces)
    assert pending_summary(db) == {"count": 0, "holder": None}  # running: not waiting, being written
    for _ in pieces:
        pass
    assert pending_summary(db) == {"count": 1, "holder": None}
    ingest_pending(db=db)
    assert pending_summary(db) == {"count": 0, "holder": None}


def test_an_event_appended_after_a_torn_line_is_not_lost(tmp_path):
    run_dir, db = tmp_path / "runs" / "grow", tmp_path / "loaderlab.duckdb"
    pieces = _pieces(run_dir)
    next(pieces)
    with open(run_dir / "events.jsonl", "a") as fh:
        fh.write('{"type":"epoch","epoch":1,"wall_s":')  # the run was killed mid-write
    with RunLog(run_dir) as rl:  # the parent records how it ended, as runner._close_log does
        rl.write("end", status="killed", error="the run process ended with signal 9")
    ingest_run(run_dir, db=db)
    run = get_run("grow", db=db)
    assert run["status"] == "killed" and "signal 9" in run["error"]
    assert list(get_epochs("grow", db=db)["epoch"]) == [0]
    assert pending_summary(db)["count"] == 0


_WRITER = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('holding', flush=True); sys.stdin.read()"


def test_pending_summary_names_an_outside_writer_without_waiting_for_it(tmp_path):
    """A read-write session blocks even readers: the count then comes from the `ingested` markers."""
    db, root = tmp_path / "loaderlab.duckdb", tmp_path / "runs"
    for _ in _pieces(root / "grow"):
        pass
    ingest_run(root / "grow", db=db)
    for _ in _pieces(root / "waits"):
        pass
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "holding"
        summary = pending_summary(db)
        assert summary["count"] == 1 and summary["holder"].startswith(f"pid {proc.pid} (")
    finally:
        proc.stdin.close()
        proc.wait(30)
    assert pending_summary(db) == {"count": 1, "holder": None}


def test_an_offset_in_mid_line_is_not_resumed_from(tmp_path):
    """A store written before offsets were whole lines may hold one inside a line: that log is read whole."""
    run_dir, db, whole_db = tmp_path / "runs" / "grow", tmp_path / "loaderlab.duckdb", tmp_path / "whole.duckdb"
    pieces = _pieces(run_dir)
    next(pieces)
    ingest_run(run_dir, db=db)
    with connect(db, read_only=False) as conn:
        # as the old ingest could store it: the size seen while the next line was being written
        conn.execute("UPDATE runs SET ingested_bytes = ingested_bytes + 5")
    for _ in pieces:
        pass
    ingest_run(run_dir, db=db)
    ingest_run(run_dir, db=whole_db)
    assert _dump(db) == _dump(whole_db)


# ---------------------------------------------------------------------------- one store per RunLog (issue 19)


def _finished(run_dir: Path, run_id: str, store: Path | None = None) -> Path:
    """A finished RunLog naming `store`, or none (as RunLogs were written before they named their store)."""
    if store is not None:
        claim(run_dir, store)
    with RunLog(run_dir) as rl:
        rl.write("start", run_id=run_id, config=RunConfig().to_dict(), host={})
        _epoch(rl, 0, 1.0)
        rl.write("end", status="done", error=None)
    return run_dir


def test_a_store_ingests_only_the_runlogs_that_name_it(tmp_path):
    """Two stores in one folder share its runs/: each stores and counts its own RunLogs, never the other's."""
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    _finished(tmp_path / "runs" / "ra", "ra", a)
    _finished(tmp_path / "runs" / "rb", "rb", b)
    assert pending_summary(a)["count"] == 1 and pending_summary(b)["count"] == 1
    assert ingest_pending(db=a) == ["ra"]
    assert ingest_pending(db=b) == ["rb"]
    assert ingest_pending(db=a) == [] and ingest_pending(db=b) == []
    assert get_run("rb", db=a) is None and get_run("ra", db=b) is None
    with pytest.raises(ValueError, match=f"belongs to the store {a}"):
        ingest_run(tmp_path / "runs" / "ra", db=b)  # an explicit ingest of another store's RunLog is refused too
    assert get_run("ra", db=b) is None


def test_a_store_with_no_runlog_of_its_own_is_not_created_by_ingest(tmp_path):
    _finished(tmp_path / "runs" / "ra", "ra", tmp_path / "a.duckdb")
    assert ingest_pending(db=tmp_path / "b.duckdb") == []
    assert not (tmp_path / "b.duckdb").exists()


def test_a_runlog_naming_no_store_goes_to_the_default_store_beside_it_only(tmp_path):
    """RunLogs from before RunLogs named their store: loaderlab.duckdb beside runs/ takes them, as it always
    did; a store of another name in that folder takes one only when `import` names it."""
    old = _finished(tmp_path / "runs" / "old", "old")
    other = tmp_path / "a.duckdb"
    assert ingest_pending(db=other) == [] and pending_summary(other)["count"] == 0
    assert ingest_pending(db=tmp_path / "loaderlab.duckdb") == ["old"]
    assert owner(old) is None  # pending ingest does not rename it: nothing but its own store looks at it


_LAUNCHER = (
    "import sys; from engine.runlog import launching\n"
    "with launching(sys.argv[1]):\n    print('holding', flush=True); sys.stdin.read()"
)


def test_a_run_its_launcher_is_still_storing_is_not_waiting(tmp_path):
    """While the process that launched a run holds it (it is about to store it), readers do not report it as
    waiting; once that process is gone, killed or not, it is."""
    db = tmp_path / "loaderlab.duckdb"
    run_dir = _finished(tmp_path / "runs" / "r", "r", db)
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "holding"
        assert pending_summary(db)["count"] == 0
    finally:
        proc.kill()  # no clean exit: the kernel drops the lock with the process
        proc.wait(30)
    assert pending_summary(db)["count"] == 1
