"""One run's advice names a setting from what was measured, and flags steady epochs that spread widely.

.venv/bin/python -m pytest tests/engine/test_run_advice.py -q
"""

from __future__ import annotations

import json

import pandas as pd

from engine.advice.run_advice import run_advice
from engine.store import connect

from tests.engine.test_advisor import _rows, _seed, _seven


def _epochs(db, run_id: str, walls: list[float]) -> None:
    rows = pd.DataFrame(
        {
            "run_id": run_id,
            "model_idx": 0,
            "rank": 0,
            "epoch": range(len(walls) + 1),
            "warmup": [True] + [False] * len(walls),
            "wall_s": [5.0, *walls],
        }
    )
    with connect(db, read_only=False) as conn:
        conn.register("e", rows)
        conn.execute("INSERT INTO epochs BY NAME SELECT * FROM e")
        conn.unregister("e")


def _gil_store(store) -> str:
    """The issue's gil-contention runs: threads 1.4-1.9 s, processes at torch's default threads 3.85 s, processes at
    1 intra-op thread the fastest. Returns a threads run's id."""
    rows = (
        _rows(_seven(1.6), loader="threads", workers=2, verdict="gil-contention")
        + _rows(_seven(3.85), loader="processes", workers=2, verdict="cpu-bound")
        + _rows(_seven(0.9), loader="processes", workers=2, threads=1, verdict="compute-bound")
    )
    for r in rows:
        r["host_json"] = json.dumps({"machine": "m1"})
    _seed(store, rows)
    return rows[0]["run_id"]


def test_a_gil_contention_run_is_told_the_setting_that_won_with_its_threads(store):
    run_id = _gil_store(store)
    said = run_advice(run_id, db=store).suggestion
    assert said.startswith("Try processes, 2 workers") and "1 intra-op thread" in said, said
    assert "1.78x faster than this setting (95% CI" in said


def test_the_fastest_setting_is_told_so_and_a_lone_run_without_a_probe_gets_no_made_up_setting(store):
    _gil_store(store)
    with connect(store, read_only=True) as conn:
        [(fastest,)] = conn.execute("SELECT run_id FROM runs WHERE threads = 1 LIMIT 1").fetchall()
    assert run_advice(fastest, db=store).suggestion.startswith("This setting is the fastest of the 3 measured")
    lone = _rows([1.0], loader="sync", n_samples=999)
    _seed(store, lone)
    assert run_advice(lone[0]["run_id"], db=store).suggestion is None  # nothing measured beside it, no probe


def test_steady_epochs_that_spread_widely_are_flagged_and_steady_ones_are_not(store):
    rows = _rows([1.4, 1.4], loader="threads", workers=2)
    _seed(store, rows)
    _epochs(store, rows[0]["run_id"], [2.2, 0.6, 0.65, 1.9])
    _epochs(store, rows[1]["run_id"], [1.40, 1.42, 1.38])
    spread = run_advice(rows[0]["run_id"], db=store).spread
    assert spread.startswith("Its steady epochs spread 3.7x (0.6-2.2 s)"), spread
    assert run_advice(rows[1]["run_id"], db=store).spread is None


def test_a_run_with_nothing_measured_beside_it_is_told_the_predicted_best_with_its_threads(store):
    """No other setting measured: the probe's prediction names one, and the intra-op threads it needs."""
    from engine.config import RunConfig  # noqa: PLC0415
    from engine.paths import calibrations_dir  # noqa: PLC0415
    from engine.predict import probe_path, save_probe  # noqa: PLC0415

    from tests.engine.test_predict_terms import _probe  # noqa: PLC0415

    [row] = _rows([1.0], loader="threads", workers=2, n_samples=512, batch_size=64)
    row["host_json"] = json.dumps({"machine": "m1", "cores": 4})
    _seed(store, [row])
    cfg = RunConfig.from_dict(json.loads(row["config_json"]))
    # a GIL-held transform (threads take turns) and a step that slows beside other threads: processes win
    save_probe(
        probe_path(calibrations_dir(store), cfg, "m1", "cpu"),
        _probe(0.1, 0.1, (0.01, 0.01), many=(0.02, 0.04), threads=4, cores=4.0, gil_share=0.9),
    )
    said = run_advice(row["run_id"], db=store).suggestion
    assert said.startswith("Not measured yet; predicted best: processes") and "intra-op thread" in said, said
