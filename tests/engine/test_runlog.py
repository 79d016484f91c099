"""engine.runlog, the append-only event log a run writes instead of the store: a writer that died mid-line loses
that line only, a reader never half-reads a line being written, a run that died before its `start` is still
stored with its reason, and a RunLog names its store (claim/owner) and its launcher (launching)."""

from __future__ import annotations

import json
import subprocess
import sys

from engine.config import RunConfig
from engine.runlog import (
    RunLog,
    claim,
    dead_end,
    end_dead_run,
    end_traceback,
    first_event,
    held_by_launcher,
    launching,
    owner,
    read_events,
    read_span,
)
from engine.status import RunStatus


def test_a_torn_last_line_is_skipped_and_the_next_writer_starts_a_fresh_line(tmp_path):
    with RunLog(tmp_path) as rl:
        rl.write("start", run_id="r")
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(b'{"type": "epoch", "epo')  # the writer died mid-write
    assert [e["type"] for e in read_events(tmp_path)] == ["start"]
    with RunLog(tmp_path) as rl:  # the parent writes the end of a killed child
        rl.write("end", status="killed")
    assert [e["type"] for e in read_events(tmp_path)] == ["start", "end"]


def test_read_span_leaves_a_line_being_written_for_the_next_read(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"type": "a"}\n{"type": "b"')
    events, offset = read_span(path, 0, path.stat().st_size)
    assert [e["type"] for e in events] == ["a"] and offset == len(b'{"type": "a"}\n')
    with open(path, "ab") as fh:
        fh.write(b"}\n")
    events, _ = read_span(path, offset, path.stat().st_size)
    assert [e["type"] for e in events] == ["b"]


def test_a_run_that_died_before_its_start_gets_a_start_and_an_end_from_its_launcher_files(tmp_path):
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(RunConfig(loader="threads", workers=2).to_dict()))
    (run_dir / "meta.json").write_text(json.dumps({"run_id": "r1", "sweep_id": "s", "repeat_idx": 0}))
    status, error = dead_end("killed by signal 9", killed=True)
    assert status == RunStatus.KILLED and error.endswith("finished epochs kept")
    assert dead_end("exited with code 1", killed=False)[0] == RunStatus.FAILED
    assert end_dead_run(run_dir, status, error) == []
    start, end = read_events(run_dir)
    assert (start["type"], start["run_id"], start["config"]["loader"], start["sweep_id"]) == (
        "start",
        "r1",
        "threads",
        "s",
    )
    assert (end["type"], end["status"], end["error"]) == ("end", status, error)
    assert first_event(run_dir / "events.jsonl")["type"] == "start"


def test_the_end_keeps_the_traceback_and_the_log_names_its_store(tmp_path):
    claim(tmp_path, tmp_path / "a.duckdb")
    assert owner(tmp_path) == str(tmp_path / "a.duckdb")
    assert owner(tmp_path / "elsewhere") is None  # a RunLog from before RunLogs named their store
    with RunLog(tmp_path) as rl:
        rl.write("start", run_id="r")
        rl.write("end", status="failed", error="ValueError: x", traceback="Traceback ...\nValueError: x")
    assert end_traceback(tmp_path).endswith("ValueError: x")


def test_the_launcher_lock_is_held_only_while_its_process_lives(tmp_path):
    assert not held_by_launcher(tmp_path)
    with launching(tmp_path):
        probe = [
            sys.executable,
            "-c",
            "import sys; from engine.runlog import held_by_launcher; print(held_by_launcher(sys.argv[1]))",
            str(tmp_path),
        ]
        assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip() == "True"
    assert not held_by_launcher(tmp_path)
