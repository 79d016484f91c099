"""Schema v2 (the bound per mode): a v1 file is backed up, then gains the new run columns, data kept."""

from __future__ import annotations

import json

import duckdb
import pytest

from engine.store import schema
from engine.store.tables import (
    EPOCH_COLUMNS_V4,
    SUMMARY_COLUMNS_V2,
    SUMMARY_COLUMNS_V4,
    SUMMARY_COLUMNS_V5,
    SUMMARY_COLUMNS_V6,
)


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


@pytest.mark.parametrize("old, added", [(4, SUMMARY_COLUMNS_V5), (5, SUMMARY_COLUMNS_V6)], ids=["v4", "v5"])
def test_an_older_store_gains_the_next_versions_columns_and_its_old_runs_read_null(tmp_path, old, added):
    """v5 added the prediction's columns (never predicted then), v6 the pools and the plugin's lock (not recorded
    then): NULL for the runs already stored, not a made-up figure or "no pools"."""
    path = tmp_path / "loaderlab.duckdb"
    with duckdb.connect(str(path)) as conn:  # as LoaderLab `old` wrote it: without the columns the next one adds
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.execute("INSERT INTO schema_version VALUES " + ", ".join(f"({v}, now())" for v in range(1, old + 1)))
        for name in added:
            conn.execute(f'ALTER TABLE runs DROP COLUMN "{name}"')
        conn.execute("INSERT INTO runs (run_id, status, epoch_s) VALUES ('old', 'done', 1.5)")
        assert schema.needs_upgrade(conn, path)
        schema.ensure_schema(conn, path)
        runs = conn.execute(f"SELECT epoch_s, {', '.join(added)} FROM runs").fetchall()
        assert conn.execute("SELECT max(version) FROM schema_version").fetchall() == [(schema.SCHEMA_VERSION,)]
    assert runs == [(1.5, *[None] * len(added))]
    assert (tmp_path / f"loaderlab.duckdb.bak-v{old}").exists()


def test_a_v6_store_gets_one_host_per_machine_whatever_threads_its_runs_had(tmp_path):
    """Until v6 the fingerprint hashed the thread settings in: a run at 1 intra-op thread read as another host."""
    from engine.measure import MACHINE_KEYS, machine_id  # noqa: PLC0415

    machine = {k: f"fact {k}" for k in MACHINE_KEYS}
    one, auto = ({**machine, "intra_op_threads": t} for t in (1, 2))
    path = tmp_path / "loaderlab.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        conn.execute("INSERT INTO schema_version VALUES " + ", ".join(f"({v}, now())" for v in range(1, 7)))
        conn.execute(
            "INSERT INTO runs (run_id, status, host_fingerprint, host_json) VALUES "
            "('one', 'done', 'fp-one', ?), ('auto', 'done', 'fp-auto', ?), ('merged', 'done', 'theirs', ?)",
            [json.dumps(one), json.dumps(auto), json.dumps({"hostname": "elsewhere"})],
        )
        schema.ensure_schema(conn, path)
        fps = dict(conn.execute("SELECT run_id, host_fingerprint FROM runs").fetchall())
        kept = json.loads(conn.execute("SELECT host_json FROM runs WHERE run_id = 'one'").fetchone()[0])
    assert fps == {"one": machine_id(machine), "auto": machine_id(machine), "merged": "theirs"}
    assert kept["intra_op_threads"] == 1  # the setting stays recorded with the run
    assert (tmp_path / "loaderlab.duckdb.bak-v6").exists()
