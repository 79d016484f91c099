"""The DuckDB store: ingest round trip, idempotence, killed runs, locking between processes, schema
migrations and broken files, and the read/edit/export/share functions. Real DuckDB files in tmp_path."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from engine.config import RunConfig, config_fields
from engine.runlog import RunLog
from engine.store import (
    BUILTIN_QUERIES,
    StoreBusy,
    StoreCorrupt,
    StoreHeld,
    StoreVersionError,
    connect,
    delete_saved_query,
    epoch_time_by,
    export,
    get_epochs,
    get_run,
    get_steps,
    ingest_pending,
    ingest_run,
    list_runs,
    list_saved_queries,
    load_view,
    purge,
    restore,
    save_query,
    save_view,
    set_notes,
    set_tags,
    soft_delete,
    table_schema,
)
from engine.store import schema

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("runs", "epochs", "steps", "samples", "calibrations")


def write_run(
    root: Path,
    run_id: str,
    *,
    epochs: int = 3,
    end: str | None = "done",
    warmup: int = 1,
    wall: float = 1.0,
    loader: str = "sync",
    **start_extra,
) -> Path:
    """A RunLog as the runner writes it: start, epochs with steps, samples, a calibration, summary, end."""
    cfg = RunConfig(loader=loader, workers=2 if loader != "sync" else 0, devices=["cpu", "cpu"]).to_dict()
    with RunLog(root / run_id) as rl:
        rl.write(
            "start",
            run_id=run_id,
            config=cfg,
            pid=os.getpid(),
            **start_extra,
            host={"hostname": "box", "cpu_model": "Test CPU", "cores": 8, "torch_version": "2.11"},
        )
        rl.write("calibration", kind="loader", seconds=0.5, ttfb_s=0.05, cached=False)
        for ep in range(epochs):
            w = wall * (1 + ep)  # epochs 1.0, 2.0, 3.0 s: steady-state median 2.5 with one warm-up
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=ep,
                warmup=ep < warmup,
                wall_s=w,
                samples=100,
                samples_per_s=100 / w,
                ttfb_s=0.1,
                data_wait_s=0.2 * w,
                h2d_s=0.1 * w,
                compute_s=0.7 * w,
                n_steps=2,
                t_start=10.0 * ep,
                t_end=10.0 * ep + w,
                steps=[[0, 0.1, 0.05, 0.3, 0.45], [1, 0.1, 0.05, 0.4, 0.55]],
            )
            rl.write("samples", rows=[[float(ep), 50.0 + ep, 1000 * (ep + 1), None, None]])
        if end:
            rl.write("summary", efficiency=0.8, verdict="data-bound", bound_s=2.0, peak_rss=123)
            rl.write("end", status=end, error=None if end == "done" else "boom")
    return root / run_id


def dump(db: Path) -> dict[str, list]:
    with connect(db, read_only=True) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------- ingest


def test_round_trip(store):
    run_dir = write_run(store.parent / "runs", "r1", sweep_id="s1", config_idx=2, repeat_idx=1)
    assert ingest_run(run_dir, db=store, job_id="j9") == "r1"
    run = get_run("r1", db=store)
    assert run["status"] == "done" and run["error"] is None
    assert (run["sweep_id"], run["config_idx"], run["repeat_idx"], run["job_id"]) == ("s1", 2, 1, "j9")
    assert run["loader"] == "sync" and run["workers"] == 0 and json.loads(run["devices"]) == ["cpu", "cpu"]
    assert run["config"] == RunConfig(loader="sync", workers=0, devices=["cpu", "cpu"]).to_dict()
    assert (run["host"], run["cpu_model"], run["cores"], run["torch_version"]) == ("box", "Test CPU", 8, "2.11")
    assert len(run["host_fingerprint"]) == 12
    assert run["epoch_s"] == pytest.approx(2.5) and run["n_epochs"] == 3  # warm-up epoch 0 excluded
    assert run["samples_per_s"] == pytest.approx(200 / (23.0 - 10.0))  # steady samples / first start to last end
    assert run["data_wait_share"] == pytest.approx(0.2) and run["compute_share"] == pytest.approx(0.7)
    assert (run["efficiency"], run["verdict"], run["bound_s"]) == (0.8, "data-bound", 2.0)
    assert run["summary"]["peak_rss"] == 123 and run["peak_rss_bytes"] == 3000  # from the samples
    epochs = get_epochs("r1", db=store)
    assert list(epochs["epoch"]) == [0, 1, 2] and list(epochs["warmup"]) == [True, False, False]
    assert list(epochs["wall_s"]) == [1.0, 2.0, 3.0]
    steps = get_steps("r1", db=store)
    assert len(steps) == 6 and list(get_steps("r1", epoch=1, db=store)["compute_s"]) == [0.3, 0.4]
    rows = dump(store)
    assert len(rows["samples"]) == 3 and rows["calibrations"] == [("r1", "loader", 0.5, 0.05, False)]


def test_reingest_is_idempotent_and_keeps_user_edits(store):
    run_dir = write_run(store.parent / "runs", "r1")
    ingest_run(run_dir, db=store)
    set_tags("r1", "keep, me", db=store)
    first = dump(store)
    ingest_run(run_dir, db=store)
    assert dump(store) == first
    assert get_run("r1", db=store)["tags"] == "keep,me"


def test_killed_run_keeps_finished_epochs(store):
    run_dir = write_run(store.parent / "runs", "dead", epochs=2, end=None)
    assert get_run(ingest_run(run_dir, db=store, stale_after_s=30), db=store)["status"] == "running"
    old = time.time() - 600
    for name in ("heartbeat", "events.jsonl"):
        os.utime(run_dir / name, (old, old))
    assert ingest_pending(db=store, stale_after_s=30) == ["dead"]  # a stale running run is looked at again
    run = get_run("dead", db=store)
    assert run["status"] == "killed" and "no heartbeat for 6" in run["error"] and "died" in run["error"]
    assert len(get_epochs("dead", db=store)) == 2
    assert ingest_pending(db=store, stale_after_s=30) == []
    ingest_run(run_dir, db=store, stale_after_s=30)
    assert get_run("dead", db=store)["error"] == run["error"]  # same log, same row


def test_torn_last_line_is_ignored(store):
    run_dir = write_run(store.parent / "runs", "torn", end=None)
    with open(run_dir / "events.jsonl", "a") as fh:
        fh.write('{"type":"epoch","epoch":3,"wall_s":')  # the writer died mid-line
    ingest_run(run_dir, db=store)
    assert list(get_epochs("torn", db=store)["epoch"]) == [0, 1, 2]


def test_ingest_pending_only_touches_grown_logs(store):
    root = store.parent / "runs"
    write_run(root, "a")
    write_run(root, "b")
    (root / "empty").mkdir()  # a run that has not written its start event yet
    (root / "empty" / "events.jsonl").touch()
    assert sorted(ingest_pending(db=store)) == ["a", "b"]
    assert ingest_pending(db=store) == []
    with RunLog(root / "b") as rl:
        rl.write("note", text="more")
    assert ingest_pending(db=store) == ["b"]


# ---------------------------------------------------------------------------- processes and locks


def _writer(db: str, root: str, run_ids: list[str], errors) -> None:
    try:
        for _ in range(2):
            for run_id in run_ids:
                ingest_run(Path(root) / run_id, db=db)
    except Exception as e:  # noqa: BLE001 - reported to the parent
        errors.put(f"writer: {e!r}")


def _reader(db: str, stop, errors) -> None:
    try:
        while not stop.is_set():
            list_runs(db=db)
    except Exception as e:  # noqa: BLE001
        errors.put(f"reader: {e!r}")


def test_concurrent_writers_and_readers(store):
    root = store.parent / "runs"
    ids = [[f"w{w}r{i}" for i in range(4)] for w in range(4)]
    for group in ids:
        for run_id in group:
            write_run(root, run_id)
    list_runs(db=store)  # create the file first
    ctx = mp.get_context("spawn")
    errors, stop = ctx.Queue(), ctx.Event()
    readers = [ctx.Process(target=_reader, args=(str(store), stop, errors)) for _ in range(2)]
    writers = [ctx.Process(target=_writer, args=(str(store), str(root), group, errors)) for group in ids]
    for p in readers + writers:
        p.start()
    for p in writers:
        p.join(240)
    stop.set()
    for p in readers:
        p.join(60)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert problems == [] and all(p.exitcode == 0 for p in readers + writers)
    with connect(store, read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT run_id) FROM runs").fetchall() == [(16, 16)]
        assert conn.execute("SELECT count(*) FROM epochs").fetchall() == [(48,)]


_HOLD = """
import sys, duckdb
conn = duckdb.connect(sys.argv[1], read_only=True)
print("holding", flush=True)
sys.stdin.read()
conn.close()
"""


def test_external_duckdb_session_makes_writer_wait_then_succeed(store):
    run_dir = write_run(store.parent / "runs", "r1")
    list_runs(db=store)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreBusy, match=rf"pid {holder.pid}.*close the other DuckDB session or retry"):
            with connect(store, read_only=False, timeout_s=0.3):
                pass
        assert len(list_runs(db=store)) == 0  # readers share the file with the external reader
        with pytest.raises(StoreHeld, match=rf"pid {holder.pid}") as held:  # ingest leaves the log for later
            ingest_run(run_dir, db=store, outside_wait_s=0.2)
        assert held.value.holder.startswith(f"pid {holder.pid} (")
        done = threading.Event()

        def write() -> None:
            with connect(store, read_only=False):  # any other write waits for the session to close
                done.set()

        thread = threading.Thread(target=write)
        thread.start()
        assert not done.wait(1.0)  # the writer waits while the external session is open ...
        holder.stdin.close()
        thread.join(30)
        assert done.is_set()  # ... and succeeds once it closes
    finally:
        holder.kill()
        holder.wait()
    assert get_run("r1", db=store) is None
    assert ingest_pending(db=store) == ["r1"]  # the next ingest stores what waited
    assert get_run("r1", db=store)["status"] == "done"


_PROJECT_READER = """
import sys
from engine.store import connect
with connect(sys.argv[1], read_only=True):
    print("holding", flush=True)
    sys.stdin.read()
"""


def test_project_reader_blocks_writer_with_a_helpful_error(store):
    list_runs(db=store)
    holder = subprocess.Popen(
        [sys.executable, "-c", _PROJECT_READER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreBusy, match=rf"pid {holder.pid}.*retry"):
            with connect(store, read_only=False, timeout_s=0.3):
                pass
        with connect(store, read_only=True, timeout_s=0.3):  # other readers are fine
            pass
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_connection_is_closed_after_each_operation(store):
    list_runs(db=store)
    conn = duckdb.connect(str(store))  # read-write in this process: fails if a reader were still open
    conn.close()


# ---------------------------------------------------------------------------- schema and broken files


def test_reader_of_missing_file_creates_schema(store):
    assert not store.exists()
    assert list_runs(db=store).empty
    assert {
        "runs",
        "epochs",
        "steps",
        "samples",
        "calibrations",
        "jobs",
        "views",
        "saved_queries",
        "schema_version",
    } <= set(table_schema(db=store))


def test_migration_backs_up_the_file_first(store, monkeypatch):
    ingest_run(write_run(store.parent / "runs", "r1"), db=store)
    now = schema.SCHEMA_VERSION
    monkeypatch.setattr(schema, "SCHEMA_VERSION", now + 1)
    monkeypatch.setattr(
        schema, "MIGRATIONS", [*schema.MIGRATIONS, (now + 1, lambda c: c.execute("CREATE TABLE extra (a INTEGER)"))]
    )
    assert "extra" in table_schema(db=store)  # a reader triggers the upgrade too
    backup = store.with_name(store.name + f".bak-v{now}")
    with duckdb.connect(str(backup), read_only=True) as old:
        assert old.execute("SELECT max(version) FROM schema_version").fetchall() == [(now,)]
        assert old.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
        assert "extra" not in {r[0] for r in old.execute("SHOW TABLES").fetchall()}
    with connect(store, read_only=True) as conn:
        assert conn.execute("SELECT max(version) FROM schema_version").fetchall() == [(now + 1,)]


def test_newer_schema_version_is_refused(store):
    list_runs(db=store)
    with duckdb.connect(str(store)) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, now())")
    for read_only in (True, False):
        with pytest.raises(StoreVersionError, match=r"newer LoaderLab \(schema v99.*--db"):
            with connect(store, read_only=read_only):
                pass


def test_corrupt_file_is_reported_and_left_untouched(store):
    store.write_bytes(os.urandom(4096) * 4)
    before = sha(store)
    for call in (lambda: list_runs(db=store), lambda: ingest_run(write_run(store.parent / "runs", "r"), db=store)):
        with pytest.raises(StoreCorrupt, match=r"left untouched.*(mv |bak-v).*--db"):
            call()
    assert sha(store) == before


def test_new_config_field_becomes_a_column(store, monkeypatch):
    ingest_run(write_run(store.parent / "runs", "old"), db=store)

    @dataclasses.dataclass(kw_only=True)
    class Bigger(RunConfig):
        new_knob: int = 7

    monkeypatch.setattr(schema, "config_fields", lambda: config_fields(Bigger))
    assert ("new_knob", "BIGINT") in table_schema(db=store)["runs"]
    assert get_run("old", db=store)["new_knob"] is None


# ---------------------------------------------------------------------------- reads, edits, export, views


def test_list_filter_delete_restore_purge(store):
    root = store.parent / "runs"
    for i, loader in enumerate(["sync", "threads", "threads"]):
        ingest_run(write_run(root, f"r{i}", loader=loader), db=store)
    assert set(list_runs(db=store, filters={"loader": ["threads"]})["run_id"]) == {"r1", "r2"}
    with pytest.raises(ValueError, match="not a runs column"):
        list_runs(db=store, filters={"nope": 1})
    assert soft_delete(["r0", "missing"], db=store) == 1
    assert "r0" not in set(list_runs(db=store)["run_id"])
    assert "r0" in set(list_runs(db=store, include_deleted=True)["run_id"])
    assert restore("r0", db=store) == 1 and soft_delete("r0", db=store) == 1
    assert purge(db=store) == 1
    assert get_run("r0", db=store) is None and not (root / "r0").exists()
    assert dump(store)["epochs"] and all(row[0] != "r0" for row in dump(store)["epochs"])
    assert ingest_pending(db=store) == []  # the purged run does not come back
    set_notes("r1", "slow disk", db=store)
    assert get_run("r1", db=store)["notes"] == "slow disk"
    with pytest.raises(ValueError, match="not in the store"):
        set_tags("missing", "x", db=store)


def test_epoch_time_by_aggregates_in_duckdb(store):
    root = store.parent / "runs"
    for i, (loader, wall) in enumerate([("sync", 1.0), ("sync", 2.0), ("sync", 3.0), ("threads", 0.5)]):
        ingest_run(write_run(root, f"r{i}", loader=loader, wall=wall), db=store)
    ingest_run(write_run(root, "failed", loader="sync", end="failed"), db=store)
    df = epoch_time_by(["loader"], db=store).set_index("loader")
    assert df.loc["sync", "n_runs"] == 3 and df.loc["threads", "n_runs"] == 1
    assert df.loc["sync", "epoch_s_median"] == pytest.approx(5.0)  # median of 2.5, 5.0, 7.5
    assert df.index[0] == "threads"  # fastest first
    assert len(epoch_time_by([], db=store, filters={"loader": "threads"})) == 1


def test_export_parquet_and_csv(store, tmp_path):
    ingest_run(write_run(store.parent / "runs", "r1"), db=store)
    parquet = export(tmp_path / "out" / "runs.parquet", "parquet", db=store)
    csv = export(tmp_path / "epochs.csv", "csv", db=store, table="epochs")
    assert duckdb.sql(f"SELECT run_id FROM '{parquet}'").fetchall() == [("r1",)]
    assert duckdb.sql(f"SELECT count(*) FROM read_csv('{csv}')").fetchall() == [(3,)]
    with pytest.raises(ValueError, match="parquet or csv"):
        export(tmp_path / "x.json", "json", db=store)


def test_views_round_trip_and_bad_ids(store):
    state = {"x": "workers", "color": "loader", "filters": {"workload": ["jpeg"]}}
    view_id = save_view(state, db=store)
    assert len(view_id) == 8 and save_view(state, db=store) == view_id
    assert load_view(view_id, db=store) == state
    with pytest.raises(ValueError, match="malformed"):
        load_view("../../etc", db=store)
    with pytest.raises(ValueError, match="not in the store"):
        load_view("AAAAAAAA", db=store)


def test_builtin_query_names_cannot_be_taken_by_a_users_query(store):
    """One list of built-ins: each shown once, first; the engine refuses their names, whoever saves."""
    saved = list_saved_queries(db=store)
    assert list(saved["name"]) == sorted(BUILTIN_QUERIES) and saved["builtin"].all()
    assert dict(zip(saved["name"], saved["sql"])) == BUILTIN_QUERIES
    for name in BUILTIN_QUERIES:
        with pytest.raises(ValueError, match="is a built-in query; save yours under another name"):
            save_query(f"  {name} ", "SELECT 1", db=store)
    save_query("mine", "SELECT 1", db=store)
    assert list(list_saved_queries(db=store)["name"]) == [*sorted(BUILTIN_QUERIES), "mine"]
    assert delete_saved_query("mine", db=store) and not delete_saved_query("recent runs", db=store)
