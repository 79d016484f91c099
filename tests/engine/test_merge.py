"""Merging histories (engine.store.merge): another host's DuckDB store or a Parquet bundle lands whole, once;
older schemas and extra columns are tolerated; a bad source changes nothing. Real runs and real files."""

from __future__ import annotations

import os

import duckdb
import pytest

from engine import cli
from engine.config import RunConfig
from engine.run.runner import launch
from engine.runlog import RunLog, claim, owner
from engine.store import connect, export, ingest_pending, ingest_run, list_runs, set_tags, soft_delete
from engine.store.merge import CARRIED, RUN_TABLES, export_bundle, import_results
from engine.store.tunes import record_tune, tune_answers
from tests.engine.test_store_tunes import tune_row

HOST_ONLY = ("run_dir", "ingested_bytes")


def _dump(db, exclude=HOST_ONLY) -> dict[str, list]:
    with connect(db, read_only=True) as conn:
        out = {}
        for t in RUN_TABLES:
            cols = [
                r[0]
                for r in conn.execute(f"SELECT name FROM pragma_table_info('{t}')").fetchall()
                if r[0] not in exclude
            ]
            where = (
                "WHERE NOT deleted" if t == "runs" else "WHERE run_id IN (SELECT run_id FROM runs WHERE NOT deleted)"
            )
            quoted = ", ".join(f'"{c}"' for c in cols)  # quoted: a config field may be an SQL keyword (collate)
            out[t] = conn.execute(f"SELECT {quoted} FROM {t} {where} ORDER BY ALL").fetchall()
    return out


def _count(db) -> dict[str, int]:
    with connect(db, read_only=True) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in RUN_TABLES}


def _other_host_run(root, run_id: str) -> None:
    """A run logged on another machine (its own host facts and fingerprint)."""
    with RunLog(root / run_id) as rl:
        rl.write(
            "start",
            run_id=run_id,
            config=RunConfig(loader="threads", workers=4).to_dict(),
            pid=1,
            host={"hostname": "gpu-box", "cpu_model": "Other CPU", "cores": 64, "fingerprint": "feedfacecafe"},
        )
        for ep in range(3):
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=ep,
                warmup=ep == 0,
                wall_s=1.0,
                samples=100,
                samples_per_s=100.0,
                ttfb_s=0.1,
                data_wait_s=0.2,
                h2d_s=0.1,
                compute_s=0.7,
                n_steps=1,
                t_start=float(ep),
                t_end=ep + 1.0,
                steps=[[0, 0.2, 0.1, 0.7, 1.0]],
            )
        rl.write("end", status="done", error=None)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Another host's store: one real run (with calibrations), one from a GPU box, one soft-deleted."""
    db = tmp_path_factory.mktemp("hostA") / "loaderlab.duckdb"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOADERLAB_DATA", str(tmp_path_factory.getbasetemp() / "data"))
        real = launch(
            RunConfig.from_dict(
                {
                    "workload": "tensor",
                    "n_samples": 64,
                    "image_size": 8,
                    "width": 8,
                    "epochs": 2,
                    "batch_size": 32,
                    "loader": "sync",
                    "device": "cpu",
                }
            ),
            db=db,
        )
    assert real.status == "done"
    _other_host_run(db.parent / "runs", "gpu-run")
    ingest_run(db.parent / "runs" / "gpu-run", db=db)
    _other_host_run(db.parent / "runs", "junk-run")
    ingest_run(db.parent / "runs" / "junk-run", db=db)
    soft_delete("junk-run", db=db)
    record_tune(db, tune_row())  # a script's tune answered on that host
    return db


def test_store_import_twice_adds_nothing_the_second_time(source, tmp_path):
    db = tmp_path / "mine.duckdb"
    first = import_results(source, db=db)
    assert (first.runs_added, first.runs_present) == (2, 0)  # the deleted run stays behind
    assert _dump(db) == _dump(source)  # every row of every run table, figures and host columns included
    assert set(list_runs(db=db)["host_fingerprint"]) == set(list_runs(db=source)["host_fingerprint"])
    assert len(set(list_runs(db=db)["host_fingerprint"])) == 2  # two hosts, still told apart
    assert first.rows["calibrations"] > 0 and first.rows["samples"] > 0
    counts = _count(db)
    second = import_results(source, db=db)
    assert (second.runs_added, second.runs_present) == (0, 2)
    assert _count(db) == counts
    assert list_runs(db=db)["run_dir"].isna().all()  # the other host's paths are not this host's RunLogs


def test_a_tune_answered_on_the_other_host_comes_along_once_by_store_or_bundle_and_one_here_keeps_its_answer(
    source, tmp_path
):
    theirs = tune_answers(source)
    assert len(theirs) == 1
    via_store, via_bundle = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    assert import_results(source, db=via_store).rows["tunes"] == 1
    assert import_results(export_bundle(tmp_path / "bundle", db=source), db=via_bundle).rows["tunes"] == 1
    assert tune_answers(via_store) == tune_answers(via_bundle) == theirs  # every field as it was stored there
    assert import_results(source, db=via_store).rows["tunes"] == 0  # twice adds nothing
    mine = tmp_path / "mine.duckdb"
    record_tune(mine, tune_row(answer="answered here"))  # the same tune_id, answered on this host
    assert import_results(source, db=mine).rows["tunes"] == 0
    assert [a["answer"] for a in tune_answers(mine)] == ["answered here"]


def test_runs_already_here_keep_local_edits(source, tmp_path):
    db = tmp_path / "mine.duckdb"
    import_results(source, db=db)
    set_tags("gpu-run", "checked", db=db)
    import_results(source, db=db)
    assert list_runs(db=db).set_index("run_id").loc["gpu-run", "tags"] == "checked"


def test_parquet_bundle_matches_the_store_import(source, tmp_path):
    bundle = export_bundle(tmp_path / "bundle", db=source)
    assert sorted(p.name for p in bundle.iterdir()) == sorted(f"{t}.parquet" for t in CARRIED)
    via_store, via_bundle = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    import_results(source, db=via_store)
    assert import_results(bundle, db=via_bundle).runs_added == 2
    assert _dump(via_bundle) == _dump(via_store)
    assert import_results(bundle, db=via_bundle).runs_added == 0
    assert _dump(via_bundle) == _dump(via_store)


def test_lone_runs_file_then_bundle_fills_the_rows(source, tmp_path):
    db = tmp_path / "mine.duckdb"
    runs_only = export(tmp_path / "results.parquet", "parquet", db=source)  # what `engine export` writes
    assert import_results(runs_only, db=db).runs_added == 2
    assert _count(db)["epochs"] == 0
    files = [export(tmp_path / f"loaderlab-{t}.parquet", "parquet", db=source, table=t) for t in RUN_TABLES]
    again = import_results(files, db=db)  # the same runs, now with their epochs and steps
    assert again.runs_added == 0 and again.rows["epochs"] > 0
    assert _dump(db) == _dump(source)


def test_older_schema_is_null_and_extra_columns_ignored(source, tmp_path):
    bundle = export_bundle(tmp_path / "bundle", db=source)
    old = tmp_path / "old.duckdb"
    with duckdb.connect(str(old)) as conn:  # an older LoaderLab: fewer columns, one the store lacks, no steps
        conn.execute(
            f"CREATE TABLE runs AS SELECT * EXCLUDE (verdict, efficiency, tag), 42 AS future_col "
            f"FROM read_parquet('{bundle / 'runs.parquet'}')"
        )
        conn.execute(
            f"CREATE TABLE epochs AS SELECT * EXCLUDE (ttfb_s) FROM read_parquet('{bundle / 'epochs.parquet'}')"
        )
    db = tmp_path / "mine.duckdb"
    result = import_results(old, db=db)
    assert result.runs_added == 2 and "steps" not in result.rows
    runs = list_runs(db=db)
    assert runs["verdict"].isna().all() and runs["efficiency"].isna().all() and "future_col" not in runs
    assert runs["epoch_s"].notna().all()
    with connect(db, read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(ttfb_s) FROM epochs").fetchall()[0] == (
            _count(source)["epochs"] - 3,
            0,
        )


def test_a_bad_source_imports_nothing(source, tmp_path):
    bundle = export_bundle(tmp_path / "bundle", db=source)
    with duckdb.connect() as conn:  # epochs whose epoch numbers are not numbers
        conn.execute(
            f"COPY (SELECT * REPLACE ('x' || epoch AS epoch) FROM read_parquet('{bundle / 'epochs.parquet'}')) "
            f"TO '{bundle / 'epochs.parquet'}' (FORMAT parquet)"
        )
    db = tmp_path / "mine.duckdb"
    with pytest.raises(ValueError, match="nothing was imported"):
        import_results(bundle, db=db)
    assert _count(db)["runs"] == 0  # the runs went in first, and were rolled back with the rest
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    for bad, message in [
        (tmp_path / "notes.txt", "neither a DuckDB store nor a Parquet"),
        (tmp_path / "missing.duckdb", "does not exist"),
        (db, "this store itself"),
        (tmp_path / "empty", "no runs.parquet"),
    ]:
        with pytest.raises(ValueError, match=message):
            import_results(bad, db=db)


def test_cli_entry_point(source, tmp_path, capsys):
    assert cli.main(["import", str(source), "--db", str(tmp_path / "mine.duckdb")]) == 0
    assert capsys.readouterr().out.startswith("imported 2 runs (0 already here); rows: ")
    assert os.path.exists(tmp_path / "mine.duckdb")


def _runlog(run_dir, run_id: str):
    with RunLog(run_dir) as rl:
        rl.write("start", run_id=run_id, config=RunConfig(loader="threads", workers=2).to_dict(), host={})
        rl.write(
            "epoch", model_idx=0, rank=0, epoch=0, warmup=False, wall_s=1.0, samples=10, steps=[[0, 0.1, 0.0, 0.2, 0.3]]
        )
        rl.write("end", status="done", error=None)
    return run_dir


def test_import_of_a_runlog_folder_stores_it_and_makes_it_this_stores(tmp_path):
    """A RunLog naming no store (written before RunLogs named theirs) goes by pending ingest only to
    loaderlab.duckdb beside it; `import RUN_DIR` stores it in a store of another name, which owns it from then."""
    old = _runlog(tmp_path / "runs" / "old", "old")
    mine, default = tmp_path / "mine.duckdb", tmp_path / "loaderlab.duckdb"
    assert cli.main(["import", str(old), "--db", str(mine)]) == 0
    assert list_runs(db=mine)["run_id"].tolist() == ["old"]
    assert owner(old) == str(mine)
    assert ingest_pending(db=default) == []  # the default store beside it no longer takes it
    result = import_results(old, db=mine)
    assert (result.runs_added, result.runs_present) == (0, 1)  # twice adds nothing


def test_import_refuses_another_stores_runlog(tmp_path):
    theirs = tmp_path / "theirs.duckdb"
    run_dir = tmp_path / "runs" / "r"
    claim(run_dir, theirs)
    _runlog(run_dir, "r")
    with pytest.raises(ValueError, match=f"belongs to the store {theirs}"):
        import_results(run_dir, db=tmp_path / "mine.duckdb")
    assert owner(run_dir) == str(theirs)
