"""Hostile SQL through the two places a user types it: `python -m engine query` (real subprocesses) and the
History page's console (AppTest). Nothing may succeed, the store file stays byte-identical, and each gets a
clear message: the CLI exits 2 with one line on stderr, the page shows one st.error.

tests/engine/test_sandbox.py tests run_query itself; this file tests the surfaces a user touches. All CLI
statements run once, concurrently, in a module fixture; the page runs them one after another in one session.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.cli import main
from engine.store import save_view
from tests._markup import seen
from tests.engine._stores import one_run_store

ROOT = Path(__file__).resolve().parents[2]

# {out}: a writable folder an attack would write into. Every statement must be refused.
HOSTILE = [
    # writes and DDL
    "INSERT INTO runs (run_id) VALUES ('evil')",
    "UPDATE runs SET status = 'done', error = NULL",
    "DELETE FROM epochs WHERE true",
    "TRUNCATE steps",
    "DROP TABLE IF EXISTS runs CASCADE",
    "CREATE OR REPLACE VIEW runs2 AS SELECT 1",
    "ALTER TABLE runs RENAME TO old_runs",
    "INSERT INTO views VALUES ('aaaa', now(), '{{}}')",
    "uPdAtE jobs SET status = 'queued'",
    "-- looks like a comment\nDELETE FROM runs",
    # files and other databases
    "ATTACH '{out}/other.duckdb' AS other",
    "ATTACH ':memory:' AS scratch",
    "COPY runs TO '{out}/runs.csv'",
    "COPY (SELECT * FROM runs) TO '{out}/runs.json' (FORMAT json)",
    "EXPORT DATABASE '{out}/dump' (FORMAT parquet)",
    "IMPORT DATABASE '{out}/dump'",
    # system files through table functions, however spelled
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv(['/etc/passwd', '/etc/group'], header = false)",
    "SeLeCt * FrOm ReAd_TeXt('/etc/passwd')",
    "SELECT * FROM read_text /* sneaky */ ('/etc/hostname')",
    "SELECT content FROM main.read_blob('/etc/passwd')",
    "SELECT (SELECT count(*) FROM glob('/etc/*')) AS n",
    "WITH x AS (SELECT * FROM read_parquet('{out}/x.parquet')) SELECT * FROM x",
    "SELECT * FROM read_json('/etc/passwd')",
    "SELECT * FROM read_ndjson_objects('/etc/passwd')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM parquet_metadata('{out}/x.parquet')",
    "SELECT * FROM parquet_schema('{out}/x.parquet')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM 'https://example.com/data.parquet'",
    "DESCRIBE SELECT * FROM read_csv_auto('/etc/passwd')",
    "EXPLAIN SELECT * FROM read_text('/etc/passwd')",
    "SELECT getenv('HOME') AS home",
    "FROM \"read_text\"('/etc/passwd')",
    "SELECT * FROM read_text('/etc/pass' || 'wd')",
    "SELECT r.run_id, f.content FROM runs r, read_text('/etc/passwd') f",
    "SELECT * FROM (VALUES ('/etc/passwd')) t(f), LATERAL (SELECT * FROM read_blob(t.f))",
    "SUMMARIZE SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM query('DELETE FROM runs')",
    "SELECT * FROM sqlite_scan('/etc/passwd', 'x')",
    # extensions
    "INSTALL httpfs",
    "FORCE INSTALL sqlite FROM community",
    "LOAD '{out}/evil.duckdb_extension'",
    # loosening the sandbox
    "SET enable_external_access = true",
    "SET GLOBAL enable_external_access TO true",
    "RESET lock_configuration",
    "SET allowed_directories = ['/']",
    "PRAGMA enable_profiling = 'json'",
    "PRAGMA threads = 1",
    "CALL enable_logging()",
    # more than one statement
    "SELECT 1; DROP TABLE runs",
    "SELECT 1;\nSELECT * FROM read_text('/etc/passwd');",
    # transactions, secrets, prepared statements
    "BEGIN TRANSACTION; DELETE FROM runs; COMMIT",
    "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "PREPARE p AS DELETE FROM runs",
    "CHECKPOINT",
]
RUNAWAY = "SELECT count(*) FROM range(100000000) a, range(100000000) b WHERE a.range + b.range = -1"
HUGE = "SELECT * FROM range(100000000) AS t(i)"


def _sha(db: Path) -> str:
    """The store file and its WAL: equal before and after means nothing was written."""
    h = hashlib.sha256()
    for p in sorted(db.parent.glob(db.name + "*")):
        if not p.name.endswith((".lock", ".lock.queue")):
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """A store with one run and one saved view, shared by the module (nothing here may change it)."""
    root = tmp_path_factory.mktemp("hostile")
    path = one_run_store(root)
    save_view({"page": "explore", "params": {}}, db=path)
    return path


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile-out")
    yield out
    assert sorted(p.name for p in out.iterdir()) == [], "a hostile statement wrote a file"


def _one_core() -> list[str]:
    """A command prefix that keeps a process on one core (taskset), where the machine has the command."""
    taskset = shutil.which("taskset")
    return [taskset, "-c", str(min(os.sched_getaffinity(0)))] if taskset else []


def _cli(db: Path, sql: str, *extra: str, one_core: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # NOTE: one_core: on one core the sandbox gives DuckDB one thread (it takes no more than the usable cores), so
    # the runaway join burns its 10 s on one core, not on every core; the time limit it checks is the same
    return subprocess.run(
        [*(_one_core() if one_core else []), sys.executable, "-m", "engine", "query", sql, "--db", str(db), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _main(db: Path, sql: str) -> tuple[int, str, str]:
    """engine.cli.main in this process: the same code path as the CLI, without a torch import per call."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["query", sql, "--db", str(db)])
    return code, out.getvalue(), err.getvalue()


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _refused(code: int, stdout: str, stderr: str) -> None:
    assert code == 2, (code, stdout[-500:], stderr[-2000:])
    line = _one_line(stderr)
    assert line.startswith("error: ") and len(line) > 25, line
    assert "root:" not in stdout + stderr  # nothing of /etc/passwd leaked


def test_at_least_thirty_hostile_statements():
    assert len(set(HOSTILE)) == len(HOSTILE) >= 30


@pytest.mark.parametrize("sql", HOSTILE)
def test_cli_main_refuses_with_exit_2_and_one_line(db, out_dir, sql):
    before = _sha(db)
    _refused(*_main(db, sql.format(out=out_dir)))
    assert _sha(db) == before


# One of each kind, plus the runaway join and the huge result, as real `python -m engine query` processes.
SUBPROCESS = [
    "INSERT INTO runs (run_id) VALUES ('evil')",
    "DROP TABLE IF EXISTS runs CASCADE",
    "ATTACH '{out}/other.duckdb' AS other",
    "COPY runs TO '{out}/runs.csv'",
    "EXPORT DATABASE '{out}/dump' (FORMAT parquet)",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM '/etc/passwd'",
    "INSTALL httpfs",
    "SET enable_external_access = true",
    "SELECT 1; DROP TABLE runs",
]
assert set(SUBPROCESS) <= set(HOSTILE)


@pytest.fixture(scope="module")
def cli_results(db, out_dir) -> dict[str, subprocess.CompletedProcess]:
    """The SUBPROCESS statements, the runaway join and the huge result through the CLI, 3 at a time."""
    before = _sha(db)
    jobs = {RUNAWAY: (RUNAWAY,), HUGE: (HUGE, "--max-rows", "50")}  # the 10 s one first, so it overlaps
    jobs.update({sql: (sql.format(out=out_dir),) for sql in SUBPROCESS})
    with ThreadPoolExecutor(3) as pool:
        futures = {key: pool.submit(_cli, db, *args, one_core=key == RUNAWAY) for key, args in jobs.items()}
        results = {key: f.result() for key, f in futures.items()}
    assert _sha(db) == before, "a CLI query changed the store file"
    return results


@pytest.mark.slow
@pytest.mark.parametrize("sql", SUBPROCESS)
def test_cli_process_refuses_with_exit_2_and_one_line(cli_results, sql):
    out = cli_results[sql]
    _refused(out.returncode, out.stdout, out.stderr)


@pytest.mark.slow
def test_cli_runaway_join_is_cut_off_by_the_time_limit(cli_results):
    out = cli_results[RUNAWAY]
    assert out.returncode == 2, out.stderr
    assert "longer than 10 s and was stopped" in _one_line(out.stderr)


@pytest.mark.slow
def test_cli_huge_result_is_truncated_with_a_note(cli_results):
    out = cli_results[HUGE]
    assert out.returncode == 0, out.stderr
    assert _one_line(out.stderr) == "(truncated at 50 rows)"
    assert len(out.stdout.strip().splitlines()) == 51  # header + 50 rows


# ---------------------------------------------------------------------------- the History page


@pytest.fixture(scope="module")
def page_results(db, out_dir) -> dict[str, tuple[list[str], list[str], bool]]:
    """Each statement typed into one History session: (errors, exceptions, store unchanged) per statement."""
    results = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOADERLAB_DB", str(db))
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        at.switch_page("pages/history.py").run()
        for sql in [*HOSTILE, HUGE]:
            before = _sha(db)
            at.text_area(key="history.editor").set_value(sql.format(out=out_dir))
            at.button(key="history.run").click().run()
            results[sql] = (
                [seen(e.value) for e in at.error],
                [str(e.value) for e in at.exception],
                _sha(db) == before,
                [c.value for c in at.caption],
            )
        at.text_area(key="history.editor").set_value("SELECT run_id FROM runs")
        at.button(key="history.run").click().run()
        results["after"] = (
            [seen(e.value) for e in at.error],
            [str(e.value) for e in at.exception],
            True,
            at.dataframe[-1].value["run_id"].tolist(),
        )
    return results


@pytest.mark.parametrize("sql", HOSTILE)
def test_history_console_refuses_with_one_error(page_results, sql):
    errors, exceptions, unchanged, _ = page_results[sql]
    assert not exceptions, exceptions
    assert len(errors) == 1 and errors[0].startswith("Query not run:") and len(errors[0]) > 25, errors
    assert "root:" not in errors[0]
    assert unchanged, "the store file changed"


def test_history_huge_result_is_truncated_with_a_note(page_results):
    errors, exceptions, unchanged, captions = page_results[HUGE]
    assert not errors and not exceptions and unchanged
    assert any("10000 rows" in c and "only the first rows" in c for c in captions), captions


def test_history_still_answers_after_the_attacks(page_results):
    errors, exceptions, _, run_ids = page_results["after"]
    assert not errors and not exceptions
    assert run_ids == ["r1"]


@pytest.mark.parametrize("sql", ["DROP TABLE runs", "SELECT * FROM read_text('/etc/passwd')", "SELECT 1; SELECT 2"])
def test_hostile_sql_in_a_link_is_refused(db, sql):
    """`/history?sql=...` reruns a shared query: a tampered link gets the same sandbox."""
    before = _sha(db)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOADERLAB_DB", str(db))
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        at.switch_page("pages/history.py")
        at.query_params["sql"] = sql
        at.run()
    assert not at.exception
    assert [e.value[:14] for e in at.error] == ["Query not run:"]
    assert _sha(db) == before
