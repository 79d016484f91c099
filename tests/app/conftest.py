"""AppTest fixtures: an empty store, and a store seeded once per session with real tiny runs plus
synthetic repeats (copied per test, so a test may change it freely).

    def test_x(seeded, open_page, no_problems):
        at = open_page("runs", run=seeded[1][0])      # app.py routed to pages/runs.py with ?run=<id>
        no_problems(at)
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"


def _tiny(**over):
    from engine.config import RunConfig

    base = {
        "workload": "tensor",
        "n_samples": 64,
        "image_size": 8,
        "width": 8,
        "epochs": 2,
        "batch_size": 32,
        "loader": "sync",
        "tag": "seed",
        "device": "cpu",
    }
    return RunConfig.from_dict({**base, **over})


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory) -> tuple[Path, list[str]]:
    """Two real runs through the runner (forked from one warm parent), then 6 synthetic repeats of the first (other
    ids, jittered times)."""
    from engine.measure.verdicts import VERDICTS
    from engine.run.runner import launch
    from engine.run.warm import WarmParent
    from engine.store import connect

    db = tmp_path_factory.mktemp("seeded") / "loaderlab.duckdb"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOADERLAB_DATA", str(tmp_path_factory.getbasetemp() / "data"))
        # NOTE: both forked from one warm parent (one torch import, not one per run); gone before any test counts
        # this process's children
        with WarmParent() as warm:
            real = [
                launch(_tiny(), db=db, warm=warm),
                launch(_tiny(loader="threads", workers=2, bound=False), db=db, warm=warm),
            ]
    assert [r.status for r in real] == ["done", "done"], [r.error for r in real]
    with connect(db, read_only=False) as conn:
        # NOTE: a 2-batch epoch of milliseconds has a bound that is noise (efficiency 0.08-1.34 seen on a loaded
        # machine, over 1.1 giving a stale note and no verdict): the pages' tests get a bound that explains the run
        conn.execute(
            "UPDATE runs SET bound_s = 0.9 * epoch_s, efficiency = 0.9, verdict = 'data-bound', "
            "verdict_help = ?, bound_note = NULL WHERE run_id = ?",
            [VERDICTS["data-bound"], real[0].run_id],
        )
        conn.execute("CREATE TEMP TABLE src AS SELECT * FROM runs WHERE run_id = ?", [real[0].run_id])
        conn.execute("UPDATE src SET run_id = 'syn-' || run_id")
        for i in range(6):
            conn.execute(
                "INSERT INTO runs SELECT * REPLACE (run_id || '-' || ? AS run_id, epoch_s * (1 + ? / 20.0) "
                "AS epoch_s, 'other-host' AS host) FROM src",
                [str(i), i],
            )
    ids = [r.run_id for r in real] + [f"syn-{real[0].run_id}-{i}" for i in range(6)]
    return db, ids


@pytest.fixture
def seeded(seeded_template, tmp_path, monkeypatch) -> tuple[Path, list[str]]:
    """A private copy of the seeded store, set as LOADERLAB_DB; returns (path, run ids: real first)."""
    src, ids = seeded_template
    db = tmp_path / "store" / "loaderlab.duckdb"
    db.parent.mkdir()
    for p in src.parent.glob(src.name + "*"):
        shutil.copy2(p, db.parent / p.name)
    monkeypatch.setenv("LOADERLAB_DB", str(db))
    return db, ids


def _open_page(page: str = "explore", **params: str) -> AppTest:
    """Run app.py, switch to `page` and run it with the given query parameters."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    if page == "explore":
        at.query_params.update(params)
        return at.run()
    at.run()
    at.switch_page(f"pages/{page}.py")
    at.query_params.clear()
    at.query_params.update(params)
    return at.run()


def _no_problems(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _file_hash(db: Path) -> str:
    """Hash of the store file and its WAL (if any): equal before and after means nothing was written."""
    h = hashlib.sha256()
    for p in sorted(db.parent.glob(db.name + "*")):
        if p.suffix != ".lock":
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(autouse=True)
def _stop_worker(monkeypatch, tmp_path_factory):
    """The launch page starts a job worker for the test's store; stop it when the test ends.
    (Depends on monkeypatch so that LOADERLAB_DB still names the test's store at teardown; only
    a store under pytest's temporary folder is touched, never a user's.)"""
    yield
    if os.environ.get("LOADERLAB_DB", "").startswith(str(tmp_path_factory.getbasetemp())):
        from engine.jobs import stop_worker

        stop_worker(os.environ["LOADERLAB_DB"])


@pytest.fixture
def open_page():
    """open_page(page, **query_params) -> AppTest: app.py routed to pages/<page>.py, run once."""
    return _open_page


@pytest.fixture
def no_problems():
    """no_problems(at): asserts the page rendered with no exception and no st.error."""
    return _no_problems


@pytest.fixture
def file_hash():
    """file_hash(db) -> str over the store file and its WAL; unchanged means nothing was written."""
    return _file_hash
