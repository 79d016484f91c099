"""Schema v8's `tunes` table (engine/store/tunes.py): a script's tune answered round-trips, a bad row is refused
naming its field with nothing stored, and a v7 store gains the table keeping its runs. Real DuckDB files."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import duckdb
import pytest

from engine.runlog import RunLog

from engine.store import connect, get_run, ingest_run, record_tune, tune_answers, tune_ranking
from engine.store import schema


def tune_row(tune_id: str = "tune-0123456789ab", **over) -> dict:
    row = {
        "tune_id": tune_id,
        "created_at": datetime(2026, 11, 28, 2, 0),
        "kind": "script",
        "command": json.dumps(["python", "train.py", "--epochs", "1"]),
        "site": "train.py:42",
        "budget_s": 90.0,
        "spent_s": 71.5,
        "stop_reason": "confirmed",
        "best_config_idx": 2,
        "speedup": 1.8,
        "speedup_lo": 1.6,
        "speedup_hi": 2.0,
        "difference": "faster",
        "diff": "--- train.py\n+++ train.py\n@@ -42 +42 @@\n-DataLoader(ds, num_workers=0)\n"
        "+DataLoader(ds, num_workers=2)\n",
        "answer": "num_workers=2: 1.8x",
        "settings_json": json.dumps([{"workers": 0}, {"workers": 1}, {"workers": 2}]),
    }
    return {**row, **over}


def test_a_tune_row_round_trips_and_answers_come_newest_first(store):
    old, new = (
        tune_row(),
        tune_row(
            "tune-ffffffffffff",
            created_at=datetime(2026, 11, 28, 3, 0),
            best_config_idx=None,
            speedup_lo=None,
            speedup_hi=None,
            diff="",
        ),
    )
    record_tune(store, old)
    record_tune(store, new)
    answers = tune_answers(store)
    assert [a["tune_id"] for a in answers] == ["tune-ffffffffffff", "tune-0123456789ab"]
    assert answers[1] == old
    assert (answers[0]["best_config_idx"], answers[0]["speedup_lo"], answers[0]["diff"]) == (None, None, "")
    assert tune_answers(store, "tune-0123456789ab") == [old]
    assert tune_answers(store, "tune-000000000000") == []


def test_lists_for_command_and_settings_are_stored_as_json_and_a_missing_created_at_is_now(store):
    row = tune_row(command=["python", "t.py"], settings_json=[{"workers": 0}])
    del row["created_at"]
    before = datetime.utcnow() - timedelta(seconds=1)
    record_tune(store, row)
    (got,) = tune_answers(store)
    assert json.loads(got["command"]) == ["python", "t.py"] and json.loads(got["settings_json"]) == [{"workers": 0}]
    assert got["created_at"] >= before


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"site": None}, "site"),
        ({"speedup": "fast"}, "speedup"),
        ({"tune_id": "sweep-1"}, "tune_id"),
        ({"command": "python train.py"}, "command"),
        ({"best_config_idx": -1}, "best_config_idx"),
        ({"colour": "red"}, "colour"),
    ],
    ids=["none-where-required", "text-for-a-number", "bad-id", "command-not-json", "negative-index", "unknown"],
)
def test_a_bad_row_is_refused_naming_its_field_and_nothing_is_stored(store, bad, field):
    record_tune(store, tune_row("tune-aaaaaaaaaaaa"))
    with pytest.raises(ValueError, match=f"'{field}'"):
        record_tune(store, tune_row(**bad))
    assert [a["tune_id"] for a in tune_answers(store)] == ["tune-aaaaaaaaaaaa"]


def test_a_missing_field_is_refused_naming_it_and_nothing_is_stored(store):
    row = tune_row()
    del row["diff"]
    with pytest.raises(ValueError, match="'diff' is missing"):
        record_tune(store, row)
    assert tune_answers(store) == []


def test_a_v7_store_gains_the_tunes_table_and_keeps_its_runs(tmp_path):
    path = tmp_path / "loaderlab.duckdb"
    with duckdb.connect(str(path)) as conn:  # as LoaderLab v7 wrote it: every table but tunes
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.execute("DROP TABLE tunes")
        conn.execute("INSERT INTO schema_version VALUES " + ", ".join(f"({v}, now())" for v in range(1, 8)))
        conn.execute("INSERT INTO runs (run_id, status, epoch_s, sweep_id) VALUES ('old', 'done', 1.5, 's1')")
    assert tune_answers(path) == []  # a reader opens it: upgraded as writer, then read
    record_tune(path, tune_row())
    assert [a["tune_id"] for a in tune_answers(path)] == ["tune-0123456789ab"]
    run = get_run("old", db=path)
    assert (run["status"], run["epoch_s"], run["sweep_id"]) == ("done", 1.5, "s1")
    with connect(path, read_only=True) as conn:
        assert conn.execute("SELECT max(version) FROM schema_version").fetchall() == [(schema.SCHEMA_VERSION,)]
    with duckdb.connect(str(tmp_path / "loaderlab.duckdb.bak-v7"), read_only=True) as old:
        assert "tunes" not in {r[0] for r in old.execute("SELECT table_name FROM duckdb_tables()").fetchall()}


def test_a_v8_store_keeps_its_tunes_comparison_under_the_name_difference(tmp_path):
    """'verdict' names only what limits a run: a v8 file's tunes.verdict (the answer against the script's own
    setting) becomes tunes.difference, its value kept, and the v8 file is backed up as it was."""
    path = tmp_path / "loaderlab.duckdb"
    with duckdb.connect(str(path)) as conn:  # as LoaderLab v8 wrote it: the comparison in a column named verdict
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.execute("ALTER TABLE tunes RENAME COLUMN difference TO verdict")
        conn.execute("INSERT INTO schema_version VALUES " + ", ".join(f"({v}, now())" for v in range(1, 9)))
    with duckdb.connect(str(path)) as conn:
        conn.execute("INSERT INTO tunes (tune_id, verdict) VALUES ('tune-old', 'B faster')")
    answers = tune_answers(path)  # a reader opens it: upgraded as writer, then read
    assert [(a["tune_id"], a["difference"]) for a in answers] == [("tune-old", "B faster")]
    assert "verdict" not in answers[0]
    with duckdb.connect(str(tmp_path / "loaderlab.duckdb.bak-v8"), read_only=True) as old:
        assert old.execute("SELECT verdict FROM tunes").fetchall() == [("B faster",)]


def _trial(db, run_id: str, idx: int, repeat: int, s_per_batch: float | None, error: str | None = None) -> None:
    with RunLog(db.parent / "runs" / run_id) as rl:
        rl.write("start", run_id=run_id, config={"tag": "tune"}, host={"hostname": "box"})
        rl.write("summary", source="observed", s_per_batch=s_per_batch, trial_rung=0, tune_site="train.py:42")
        rl.write("end", status="failed" if error else "done", error=error)
    ingest_run(
        db.parent / "runs" / run_id,
        db=db,
        sweep_meta={"sweep_id": "tune-0123456789ab", "config_idx": idx, "repeat_idx": repeat},
    )


def test_a_tunes_candidates_rank_by_median_seconds_per_batch_then_failed_then_untried(store):
    """A candidate with a failed trial beside finished ones ranks by its finished ones and keeps its error; one
    whose every trial failed comes after those that finished; one never tried comes last, said as such."""
    settings = [{"num_workers": w} for w in (0, 1, 2, 3, 4)]
    _trial(store, "own", 0, 0, 0.010)
    _trial(store, "two-a", 2, 0, 0.004)
    _trial(store, "two-b", 2, 1, None, "worker died")
    _trial(store, "two-c", 2, 2, 0.006)
    _trial(store, "one", 1, 0, None, "PicklingError: lambda")
    _trial(store, "three", 3, 0, 0.008)
    record_tune(store, tune_row(settings_json=json.dumps(settings), best_config_idx=2))
    ranked = tune_ranking("tune-0123456789ab", store)
    assert list(ranked["config_idx"]) == [2, 3, 0, 1, 4]
    two = ranked.iloc[0]
    assert (two["trials"], two["finished"], two["failed"], two["first_error"]) == (3, 2, 1, "worker died")
    assert two["median_s"] == pytest.approx(0.005) and two["interval"] == "no interval: 2 runs"
    assert two["setting"] == "num_workers=2" and two["call"] == "the answer"
    assert ranked.iloc[1]["interval"] == "one run: no interval"
    assert ranked.iloc[2]["setting"] == "the script's own (num_workers=0)"
    assert (ranked.iloc[3]["first_error"], ranked.iloc[3]["finished"]) == ("PicklingError: lambda", 0)
    assert (ranked.iloc[4]["trials"], ranked.iloc[4]["interval"]) == (0, "not tried")
