"""The run page's GPU block and start-up line (ui/run_costs.py), and Explore's GPU idle metric, on a store holding a
recorded GPU run (tests/engine/_gpu_runlog.py) and a real CPU run."""

from __future__ import annotations

from engine.config import RunConfig
from engine.run.runner import launch
from engine.store import ingest_run
from tests.engine._gpu_runlog import write_gpu_run


def _store_with_a_gpu_run(store) -> str:
    ingest_run(write_gpu_run(store.parent / "runs", "gpu1"), db=store)
    return "gpu1"


def test_the_run_page_shows_gpu_idle_by_cause_beside_nvml_and_the_start_up(store, open_page, no_problems):
    run_id = _store_with_a_gpu_run(store)
    at = open_page("runs", run=run_id)
    no_problems(at)
    figures = {m.label: m.value for m in at.metric}
    assert {k: figures[k] for k in ("GPU idle", "waiting on data", "waiting on copies", "other host time")} == {
        "GPU idle": "42%",
        "waiting on data": "38%",
        "waiting on copies": "2%",
        "other host time": "2%",
    }
    assert figures["GPU utilisation (NVML)"] == "52 %" and figures["peak GPU memory"] == "3,242 MiB"
    text = " ".join(m.value for m in [*at.markdown, *at.caption])
    assert "GPU idle 0.210 s" in text and "waited 0.015 s for side-stream copies" in text
    assert "Start-up: **12.40 s** from launch to the first batch (interpreter and imports 6.10 s" in text
    assert "CUDA initialisation 2.40 s" in text and "the bound's passes took 1.70 s" in text


def test_a_cpu_runs_page_has_no_gpu_block_and_its_cuda_phase_is_a_dash(store, open_page, no_problems):
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
    at = open_page("runs", run=result.run_id)
    no_problems(at)
    assert "GPU idle" not in {m.label for m in at.metric}  # not measured: no block, rather than zeros
    text = " ".join(m.value for m in at.markdown)
    assert "CUDA initialisation –" in text and "the bound's passes took –" in text


def test_explore_offers_gpu_idle_share_and_charts_it(store, open_page, no_problems):
    _store_with_a_gpu_run(store)
    at = open_page("explore", metric="gpu_idle_data_share", x="loader")
    no_problems(at)
    metric = at.selectbox(key="explore.metric")
    assert {"GPU idle share", "GPU idle share: waiting on data"} <= set(metric.options)
    assert metric.value == "gpu_idle_data_share"
    table = at.dataframe[0].value
    assert table["median GPU idle share: waiting on data"].tolist() == ["0.380"]  # 3 significant figures, as shown
    assert table["run_ids"].tolist() == ["gpu1"]
