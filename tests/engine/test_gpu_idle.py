"""GPU idle as store columns, on CPU from a recorded GPU run (tests/engine/_gpu_runlog.py): RunLog -> real DuckDB ->
the epochs and runs columns, their parts adding up, Explore's metric and the advisor's line; and a real CPU run,
whose GPU columns are NULL (not measured), never 0."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.advice.advisor import advise, render_advice
from engine.cli.launch import print_summary
from engine.config import RunConfig
from engine.run.runner import launch
from engine.runlog import GPU_EPOCH_FIELDS
from engine.store import explore_summary, get_epochs, get_run, ingest_run
from tests.engine._gpu_runlog import STEADY, WARMUP, write_gpu_run

_SHARES = ("gpu_idle_share", "gpu_idle_data_share", "gpu_idle_copy_share", "gpu_idle_other_share")


def test_each_epochs_gpu_idle_and_its_parts_are_columns_and_the_run_summarises_its_steady_epochs(store):
    ingest_run(write_gpu_run(store.parent / "runs", "gpu1"), db=store)
    epochs = get_epochs("gpu1", db=store)
    for field in GPU_EPOCH_FIELDS:
        assert epochs[field].tolist() == pytest.approx([WARMUP[field], STEADY[field], STEADY[field]]), field
    run = get_run("gpu1", db=store)
    assert run["gpu_idle_share"] == pytest.approx(0.21 / 0.50)  # the warm-up epoch left out
    assert run["gpu_idle_data_share"] == pytest.approx(0.19 / 0.50)
    assert run["gpu_idle_copy_share"] == pytest.approx(0.012 / 0.50)
    assert run["gpu_idle_other_share"] == pytest.approx(0.008 / 0.50)
    assert (run["gpu_idle_s"], run["copy_wait_s"]) == pytest.approx((0.21, 0.015))
    assert run["mean_gpu_util"] == pytest.approx(52.0) and run["peak_gpu_mem_bytes"] == 3_400_000_000
    assert (run["startup_s"], run["startup_cuda_s"], run["calibration_s"]) == pytest.approx((12.4, 2.4, 1.7))


_PART = st.floats(0.0, 0.3, allow_nan=False)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.tuples(_PART, _PART, _PART, st.floats(0.0, 0.5, allow_nan=False)), min_size=2, max_size=4))
def test_the_stored_parts_add_up_to_the_idle_per_epoch_and_per_run(parts):
    epochs = [
        {
            "gpu_idle_s": d + c + o,
            "gpu_idle_data_s": d,
            "gpu_idle_copy_s": c,
            "gpu_idle_other_s": o,
            "copy_wait_s": c,
            "wall_s": d + c + o + busy + 0.01,
        }
        for d, c, o, busy in parts
    ]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "loaderlab.duckdb"
        ingest_run(write_gpu_run(Path(tmp) / "runs", "p", epochs=epochs), db=db)
        stored, run = get_epochs("p", db=db), get_run("p", db=db)
    whole = stored["gpu_idle_data_s"] + stored["gpu_idle_copy_s"] + stored["gpu_idle_other_s"]
    assert whole.tolist() == pytest.approx(stored["gpu_idle_s"].tolist())
    assert sum(run[k] for k in _SHARES[1:]) == pytest.approx(run["gpu_idle_share"])
    assert 0.0 <= run["gpu_idle_share"] <= 1.0


def test_a_cpu_run_stores_null_gpu_columns_not_zero(store):
    result = launch(
        RunConfig.from_dict(
            {
                "workload": "tensor",
                "n_samples": 64,
                "image_size": 8,
                "width": 8,
                "epochs": 2,
                "batch_size": 16,
                "device": "cpu",
                "bound": False,
            }
        ),
        db=store,
    )
    assert result.status == "done", result.error
    epochs, run = get_epochs(result.run_id, db=store), get_run(result.run_id, db=store)
    assert len(epochs) == 2 and epochs[list(GPU_EPOCH_FIELDS)].isna().all().all()
    assert [run[k] for k in (*_SHARES, "gpu_idle_s", "copy_wait_s", "mean_gpu_util", "peak_gpu_mem_bytes")] == [
        None
    ] * 8


def test_explore_charts_the_gpu_idle_share_of_the_runs_that_measured_it(store):
    runs = store.parent / "runs"
    ingest_run(write_gpu_run(runs, "gpu1"), db=store)
    ingest_run(write_gpu_run(runs, "gpu2", loader="processes"), db=store)
    cpu = write_gpu_run(
        runs, "cpu1", loader="sync", device="cpu", epochs=[{"wall_s": 0.4, **{k: None for k in GPU_EPOCH_FIELDS}}] * 2
    )
    ingest_run(cpu, db=store)
    out = explore_summary("loader", metric="gpu_idle_data_share", db=store)
    assert dict(zip(out["loader"], out["median"])) == pytest.approx({"processes": 0.38, "threads": 0.38})
    assert "sync" not in set(out["loader"])  # the CPU run has no GPU idle: not a 0 on the chart


def test_the_advisor_says_what_the_gpu_waits_on_and_what_would_cut_it(store):
    runs = store.parent / "runs"
    for i in range(3):
        ingest_run(write_gpu_run(runs, f"gpu{i}"), db=store)
    text = render_advice(advise("jpeg", "cnn", host="any", db=store))
    assert "GPU: it waits on data 38% of each step; more workers would cut it" in text, text


def test_the_advisor_names_the_host_when_launches_keep_the_gpu_waiting(store):
    host_bound = {**STEADY, "gpu_idle_data_s": 0.01, "gpu_idle_other_s": 0.188}
    ingest_run(write_gpu_run(store.parent / "runs", "g", epochs=[WARMUP, host_bound, host_bound]), db=store)
    text = render_advice(advise("jpeg", "cnn", host="any", db=store))
    assert "waits on the host (launches, Python, syncs) 38% of each step; bigger batches" in text, text


def test_the_advisor_says_nothing_of_a_gpu_for_cpu_runs(store):
    cpu = write_gpu_run(
        store.parent / "runs", "c", device="cpu", epochs=[{"wall_s": 0.4, **{k: None for k in GPU_EPOCH_FIELDS}}] * 2
    )
    ingest_run(cpu, db=store)
    assert "GPU" not in render_advice(advise("jpeg", "cnn", host="any", db=store))


def test_the_cli_summary_says_what_the_gpu_waited_on(store, capsys):
    ingest_run(write_gpu_run(store.parent / "runs", "gpu1"), db=store)
    print_summary("gpu1", store)
    out = capsys.readouterr().out
    assert "GPU idle 42% of the steady epochs, waiting on data 38%, copies 2%, the host 2%" in out, out
    assert "start-up 12.4 s to the first batch (interpreter and imports 6.1 s)" in out
