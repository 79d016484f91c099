"""Schema v2 (the bound per mode): a v1 file is backed up, then gains the new run columns, data kept."""

from __future__ import annotations

import duckdb

from engine.store import schema
from engine.store.tables import (EPOCH_COLUMNS_V4, SUMMARY_COLUMNS_V2, SUMMARY_COLUMNS_V4, SUMMARY_COLUMNS_V5,
                                 SUMMARY_COLUMNS_V6_STREAMS)


def _v1_file(path) -> None:
    """A store as LoaderLab v1 wrote it: the v1 migration only, without the columns v2 adds."""
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.execute("INSERT INTO schema_version VALUES (1, now())")
        for name in SUMMARY_COLUMNS_V2:
            conn.execute(f'ALTER TABLE runs DROP COLUMN "{name}"')
        conn.execute("INSERT INTO runs (run_id, status, efficiency) VALUES ('old', 'done', 0.9)")


def test_a_v1_store_is_backed_up_and_gains_the_bound_columns(tmp_path):
    path = tmp_path / "loaderlab.duckdb"
    _v1_file(path)
    with duckdb.connect(str(path)) as conn:
        assert schema.needs_upgrade(conn, path)
        schema.ensure_schema(conn, path)
        cols = {r[0] for r in conn.execute("SELECT name FROM pragma_table_info('runs')").fetchall()}
        assert set(SUMMARY_COLUMNS_V2) <= cols
        assert conn.execute("SELECT max(version) FROM schema_version").fetchall() == [(schema.SCHEMA_VERSION,)]
        assert conn.execute("SELECT efficiency, overlap, bound_error FROM runs").fetchall() == [(0.9, None, None)]
    with duckdb.connect(str(tmp_path / "loaderlab.duckdb.bak-v1"), read_only=True) as old:
        cols = {r[0] for r in old.execute("SELECT name FROM pragma_table_info('runs')").fetchall()}
        assert not set(SUMMARY_COLUMNS_V2) & cols


def test_a_new_store_is_made_at_v2_directly(tmp_path):
    path = tmp_path / "new.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("SET python_enable_replacements = false")  # as the store's connect() does
        schema.ensure_schema(conn, path)
        assert conn.execute("SELECT max(version) FROM schema_version").fetchall() == [(schema.SCHEMA_VERSION,)]
        assert not schema.needs_upgrade(conn, path)
    assert not list(tmp_path.glob("*.bak-v*"))


def test_a_v3_store_gains_the_gpu_idle_and_start_up_columns_and_its_old_runs_read_null(tmp_path):
    path = tmp_path / "loaderlab.duckdb"
    with duckdb.connect(str(path)) as conn:  # as LoaderLab v3 wrote it: without the columns v4 adds
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.execute("INSERT INTO schema_version VALUES (1, now()), (2, now()), (3, now())")
        for name in SUMMARY_COLUMNS_V4:
            conn.execute(f'ALTER TABLE runs DROP COLUMN "{name}"')
        for name in EPOCH_COLUMNS_V4:
            conn.execute(f'ALTER TABLE epochs DROP COLUMN "{name}"')
        conn.execute("INSERT INTO runs (run_id, status, epoch_s) VALUES ('old', 'done', 1.5)")
        conn.execute("INSERT INTO epochs (run_id, model_idx, rank, epoch, wall_s) VALUES ('old', 0, 0, 0, 1.5)")
        assert schema.needs_upgrade(conn, path)
        schema.ensure_schema(conn, path)
        runs = conn.execute(f"SELECT epoch_s, {', '.join(SUMMARY_COLUMNS_V4)} FROM runs").fetchall()
        epochs = conn.execute(f"SELECT wall_s, {', '.join(EPOCH_COLUMNS_V4)} FROM epochs").fetchall()
    # not measured then, so NULL: a 0 would say the GPU never waited
    assert runs == [(1.5, *[None] * len(SUMMARY_COLUMNS_V4))]
    assert epochs == [(1.5, *[None] * len(EPOCH_COLUMNS_V4))]
    assert (tmp_path / "loaderlab.duckdb.bak-v3").exists()


def test_a_v4_store_gains_the_prediction_columns_and_its_old_runs_read_null(tmp_path):
    path = tmp_path / "loaderlab.duckdb"
    with duckdb.connect(str(path)) as conn:  # as LoaderLab v4 wrote it: without the columns v5 adds
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.execute("INSERT INTO schema_version VALUES (1, now()), (2, now()), (3, now()), (4, now())")
        for name in SUMMARY_COLUMNS_V5:
            conn.execute(f'ALTER TABLE runs DROP COLUMN "{name}"')
        conn.execute("INSERT INTO runs (run_id, status, epoch_s) VALUES ('old', 'done', 1.5)")
        assert schema.needs_upgrade(conn, path)
        schema.ensure_schema(conn, path)
        runs = conn.execute(f"SELECT epoch_s, {', '.join(SUMMARY_COLUMNS_V5)} FROM runs").fetchall()
        assert conn.execute("SELECT max(version) FROM schema_version").fetchall() == [(schema.SCHEMA_VERSION,)]
    assert runs == [(1.5, None, None, None)]  # never predicted: NULL, not a made-up figure
    assert (tmp_path / "loaderlab.duckdb.bak-v4").exists()


def test_a_v5_store_gains_the_stream_columns_and_its_old_runs_read_null(tmp_path):
    path = tmp_path / "loaderlab.duckdb"
    with duckdb.connect(str(path)) as conn:  # as LoaderLab v5 wrote it: without the stream columns v6 adds
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.executemany("INSERT INTO schema_version VALUES (?, now())", [[v] for v in range(1, 6)])
        conn.execute("ALTER TABLE runs DROP COLUMN stream_split; ALTER TABLE runs DROP COLUMN stream_note")
        conn.execute("INSERT INTO runs (run_id, status, epoch_s) VALUES ('old', 'done', 1.5)")
        schema.ensure_schema(conn, path)
        columns = ", ".join(SUMMARY_COLUMNS_V6_STREAMS)
        assert conn.execute(f"SELECT epoch_s, {columns} FROM runs").fetchall() == [(1.5, None, None)]  # map-style
