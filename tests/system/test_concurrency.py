"""Everything at once on one store: 4 CLI sweeps, the dashboard's job worker with queued jobs, dashboard
readers (the store API in a thread and the Explore page in AppTest), exports, and a user's own read-only
DuckDB session. No process may show a lock error, and no epoch or step row may be lost or duplicated:
the store must hold exactly what every RunLog recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from engine import jobs
from engine.config import RunConfig
from engine.paths import runs_dir
from engine.run.runner import kill_group
from engine.runlog import read_events
from engine.store import connect, epoch_time_by, get_epochs, list_runs, run_query

ROOT = Path(__file__).resolve().parents[2]
BASE = dict(
    workload="tensor",
    n_samples=64,
    image_size=8,
    width=8,
    epochs=3,
    batch_size=16,
    latency_ms=2.0,
    bound=False,
    sample_hz=5.0,
    device="cpu",
)
SWEEP = """name = "c{i}"
seed = {i}
[base]
{base}
[grid]
loader = ["sync", "threads"]
workers = [2]
"""
N_SWEEPS, RUNS_PER_SWEEP, N_JOBS = 4, 2, 3
LOCK_WORDS = ("lock", "busy", "traceback", "could not")
# A user's own DuckDB session: brief read-only looks with pauses. It fails while a writer holds the
# file (DuckDB's rule, not ours) and simply tries again, as a person would.
EXTERNAL = textwrap.dedent("""
    import duckdb, json, os, sys, time
    db, stop = sys.argv[1], sys.argv[2]
    ok = busy = 0
    while not os.path.exists(stop):
        try:
            with duckdb.connect(db, read_only=True) as conn:
                conn.execute("SELECT count(*) FROM runs").fetchall()
                time.sleep(0.3)
            ok += 1
        except duckdb.Error as e:
            busy += 1
        time.sleep(0.7)
    print(json.dumps({"ok": ok, "busy": busy}))
""")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _popen(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=_env(), stdout=out, stderr=out, start_new_session=True
        )


class _Readers(threading.Thread):
    """The dashboard's reads in a loop: run list, chart aggregate, SQL page, one run's epochs."""

    def __init__(self, db: Path):
        super().__init__(daemon=True)
        self.db, self.stop, self.errors, self.reads = db, threading.Event(), [], 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                runs = list_runs(self.db)
                epoch_time_by(["loader"], db=self.db)
                run_query("SELECT run_id, count(*) FROM steps GROUP BY run_id", db=self.db)
                if len(runs):
                    get_epochs(runs["run_id"].iloc[0], db=self.db)
                self.reads += 1
            except Exception as e:  # noqa: BLE001 - collected and asserted empty
                self.errors.append(f"{type(e).__name__}: {e}")
            self.stop.wait(0.2)


def _explore_page(db: Path) -> list[str]:
    """One dashboard session on Explore: its exceptions and errors."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    return [str(e.value) for e in at.exception] + [e.value for e in at.error]


@pytest.fixture
def everything(store, tmp_path):
    """Starts it all, waits for the sweeps and the jobs, stops the rest; returns what each part reported."""
    procs: list[subprocess.Popen] = []
    stop_file = tmp_path / "stop-external"
    try:
        external = subprocess.Popen(
            [sys.executable, "-c", EXTERNAL, str(store), str(stop_file)],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(external)
        worker = _popen(["-m", "engine", "worker", "--db", str(store), "--poll-s", "0.2"], tmp_path / "worker.log")
        procs.append(worker)
        job_ids = [
            jobs.submit(
                RunConfig.from_dict({**BASE, "loader": "threads", "workers": 1, "seed": i}), db=store, origin="cli"
            )
            for i in range(N_JOBS)
        ]
        readers = _Readers(store)
        readers.start()
        sweeps = []
        for i in range(N_SWEEPS):
            toml = tmp_path / f"sweep{i}.toml"
            toml.write_text(SWEEP.format(i=i, base="\n".join(f"{k} = {json.dumps(v)}" for k, v in BASE.items())))
            sweeps.append(
                _popen(["-m", "engine", "sweep", str(toml), "--db", str(store), "--quiet"], tmp_path / f"sweep{i}.log")
            )
        procs.extend(sweeps)
        exports, page_problems = [], []
        deadline = time.monotonic() + 400
        while any(p.poll() is None for p in sweeps) and time.monotonic() < deadline:
            target = tmp_path / f"export{len(exports)}.parquet"
            exports.append(
                (
                    subprocess.run(
                        [sys.executable, "-m", "engine", "export", "--db", str(store), "--out", str(target)],
                        cwd=ROOT,
                        env=_env(),
                        capture_output=True,
                        text=True,
                        timeout=120,
                    ),
                    target,
                )
            )
            page_problems += _explore_page(store)
        while time.monotonic() < deadline:
            if all(s in ("done", "failed", "cancelled") for s in jobs.list_jobs(store)["status"]):
                break
            time.sleep(0.5)
        page_problems += _explore_page(store)
        readers.stop.set()
        readers.join(60)
        worker.send_signal(signal.SIGTERM)
        stop_file.touch()
        yield {
            "sweeps": [(p.wait(60), (tmp_path / f"sweep{i}.log").read_text()) for i, p in enumerate(sweeps)],
            "worker": (worker.wait(60), (tmp_path / "worker.log").read_text()),
            "external": external.communicate(timeout=60),
            "exports": exports,
            "readers": readers,
            "pages": page_problems,
            "job_ids": job_ids,
        }
    finally:
        stop_file.touch()
        for p in procs:
            if p.poll() is None:
                kill_group(p.pid)
                p.wait()
        jobs.stop_worker(store, timeout_s=10)
        for pid_file in runs_dir(store).glob("*/pid"):
            kill_group(int(pid_file.read_text()))


def _no_lock_error(text: str, who: str) -> None:
    low = text.lower()
    assert not any(word in low for word in LOCK_WORDS), f"{who} showed the user:\n{text[-3000:]}"


@pytest.mark.slow
def test_sweeps_worker_readers_exports_and_an_external_session_at_once(store, everything):
    # --- nobody saw a lock error; every command succeeded ---
    for i, (code, output) in enumerate(everything["sweeps"]):
        assert code == 0, f"sweep {i} exited {code}:\n{output[-3000:]}"
        _no_lock_error(output, f"sweep {i}")
    code, log = everything["worker"]
    assert code == 0, log[-3000:]
    assert "Traceback" not in log and "busy" not in log.lower(), log[-3000:]
    assert len(everything["exports"]) >= 1
    for out, target in everything["exports"]:
        assert out.returncode == 0 and not out.stderr.strip(), out.stderr
        assert pd.read_parquet(target)["run_id"].is_unique
    readers = everything["readers"]
    assert readers.errors == [] and readers.reads > 0
    assert everything["pages"] == []
    external_out, external_err = everything["external"]
    assert json.loads(external_out)["ok"] >= 1, external_err  # the user's own session got its turns

    # --- every job ran; every run is stored once, done, with exactly the rows its RunLog recorded ---
    queue = jobs.list_jobs(store).set_index("job_id")
    assert queue.loc[everything["job_ids"], "status"].tolist() == ["done"] * N_JOBS, queue["error"].tolist()
    run_dirs = sorted(d for d in runs_dir(store).iterdir() if (d / "events.jsonl").exists())
    assert len(run_dirs) == N_SWEEPS * RUNS_PER_SWEEP + N_JOBS
    with connect(store, read_only=True) as conn:
        runs = dict(conn.execute("SELECT run_id, status FROM runs").fetchall())
        epochs = dict(conn.execute("SELECT run_id, count(*) FROM epochs GROUP BY run_id").fetchall())
        steps = dict(conn.execute("SELECT run_id, count(*) FROM steps GROUP BY run_id").fetchall())
    assert sorted(runs) == sorted(d.name for d in run_dirs)
    for d in run_dirs:
        logged = [e for e in read_events(d) if e["type"] == "epoch"]
        keys = [(e["model_idx"], e["rank"], e["epoch"]) for e in logged]
        assert len(keys) == len(set(keys)) == BASE["epochs"], d.name
        assert runs[d.name] == "done", d.name
        assert epochs.get(d.name) == len(logged), d.name
        assert steps.get(d.name) == sum(len(e["steps"]) for e in logged), d.name
