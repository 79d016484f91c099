"""The stored config and host facts say what ran: fields a mode ignores are normalised, a folder's real
counts are stored, and the thread settings are recorded as the run's, never part of its host's fingerprint."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from engine.config import ConfigError, RunConfig, SweepConfig
from engine.run.runner import launch
from engine.store import get_run

pytestmark = pytest.mark.usefixtures("warm_runs")  # runs forked warm: these check what a run measures

TINY = {
    "workload": "tensor",
    "n_samples": 64,
    "image_size": 8,
    "width": 8,
    "batch_size": 32,
    "epochs": 2,
    "device": "cpu",
    "sample_hz": 0.0,
    "bound": False,
}


def test_threads_is_a_checked_field_with_auto_as_default():
    assert RunConfig().threads == 0
    assert RunConfig.from_dict({"threads": "auto"}).threads == 0 == RunConfig.from_dict({"threads": " Auto "}).threads
    with pytest.raises(ConfigError, match="^workers: expected int"):
        RunConfig.from_dict({"workers": "auto"})  # only a field that says what auto means takes the word
    with pytest.raises(ConfigError, match="^threads: must be >= 0"):
        RunConfig.from_dict({"threads": -1})


@pytest.mark.parametrize(
    "mode, kept",
    [
        ("single", {"n_models": 1, "world_size": 1, "n_stages": 1, "model_b": "", "lr_spread": 0.0}),
        ("fused", {"n_models": 5, "lr_spread": 0.5, "world_size": 1}),
        ("dual-threads", {"n_models": 2, "model_b": "cnn", "dual_data": "separate", "world_size": 1}),
        ("dual-sequential", {"n_models": 2, "dual_data": "shared"}),
        ("ddp", {"n_models": 1, "world_size": 3, "n_stages": 1}),
        ("split", {"n_stages": 2, "micro_batches": 2, "world_size": 1}),
    ],
)
def test_effective_config_normalises_what_the_mode_ignores(mode, kept):
    # on the CPU: ddp's 3 ranks on CUDA would need 3 GPUs, and this is about the stored copy, not the machine
    cfg = RunConfig.from_dict(
        {
            "mode": mode,
            "n_models": 5,
            "lr_spread": 0.5,
            "model_b": "cnn",
            "dual_data": "separate",
            "world_size": 3,
            "n_stages": 2,
            "micro_batches": 2,
            "device": "cpu",
        }
    )
    out = cfg.effective()
    assert {k: out[k] for k in kept} == kept
    assert cfg.n_models == 5  # the config itself keeps what was asked: replace(mode="fused") still finds it


def test_a_single_run_is_stored_with_what_ran(tmp_path):
    db = tmp_path / "s.duckdb"
    result = launch(
        RunConfig.from_dict(
            {
                **TINY,
                "n_models": 4,
                "world_size": 3,
                "device": "auto",
                "prefetch_depth": 8,
                "start_method": "spawn",
                "persistent_workers": False,
            }
        ),
        db=db,
    )
    row = get_run(result.run_id, db=db)
    assert (row["n_models"], row["world_size"]) == (1, 1)
    assert json.loads(row["config_json"])["n_models"] == 1
    # sync keeps no queue and starts no workers; auto ran on the first GPU where there is one (pinned, as asked),
    # else on the CPU, where nothing is pinned
    assert (row["prefetch_depth"], row["start_method"], row["persistent_workers"]) == (2, "fork", True)
    gpu = torch.cuda.is_available()
    assert (row["device"], row["pin_memory"]) == (("cuda:0", True) if gpu else ("cpu", False))
    assert json.loads(row["config_json"])["device"] == row["device"]


def test_a_cpu_run_is_stored_unpinned_on_every_machine(tmp_path):
    db = tmp_path / "s.duckdb"
    row = get_run(launch(RunConfig.from_dict({**TINY, "pin_memory": True}), db=db).run_id, db=db)
    assert (row["device"], row["pin_memory"]) == ("cpu", False)  # pinning only helps a copy to a GPU


@pytest.mark.parametrize(
    "loader, kept",
    [
        ("sync", {"prefetch_depth": 2, "start_method": "fork", "persistent_workers": True}),
        ("threads", {"prefetch_depth": 8, "start_method": "fork", "persistent_workers": True}),
        ("processes", {"prefetch_depth": 8, "start_method": "spawn", "persistent_workers": False}),
    ],
)
def test_effective_config_normalises_what_the_loader_ignores(loader, kept):
    cfg = RunConfig.from_dict(
        {"loader": loader, "workers": 2, "prefetch_depth": 8, "start_method": "spawn", "persistent_workers": False}
    )
    assert {k: cfg.effective()[k] for k in kept} == kept


def test_a_sweep_runs_what_ignored_fields_make_equal_once():
    sweep = SweepConfig.from_dict(
        {"name": "s", "base": {"workers": 2}, "grid": {"loader": ["sync", "threads"], "prefetch_depth": [2, 8]}}
    )
    assert sorted((c.loader, c.prefetch_depth) for c in sweep.configs()) == [
        ("sync", 2),
        ("threads", 2),
        ("threads", 8),
    ]


def test_a_folder_run_is_stored_with_the_images_it_found(tmp_path):
    for cls, n in (("cat", 3), ("dog", 2)):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(tmp_path / "imgs" / cls / f"{i}.png")
    db = tmp_path / "s.duckdb"
    cfg = RunConfig.from_dict({**TINY, "workload": "folder", "folder": str(tmp_path / "imgs"), "batch_size": 2})
    result = launch(cfg, db=db)
    assert result.status == "done", result.error
    row = get_run(result.run_id, db=db)
    assert (row["n_samples"], row["num_classes"]) == (5, 2)


def test_thread_settings_are_recorded_as_the_runs_and_the_host_is_the_machine(tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    one = get_run(launch(RunConfig.from_dict({**TINY, "threads": 1}), db=db).run_id, db=db)
    two = get_run(launch(RunConfig.from_dict({**TINY, "threads": 2}), db=db).run_id, db=db)
    facts = json.loads(one["host_json"]), json.loads(two["host_json"])
    assert [f["intra_op_threads"] for f in facts] == [1, 2]
    assert facts[0]["mkl_num_threads"] == "1" and facts[0]["inter_op_threads"] >= 1
    assert facts[0]["affinity"] >= 1 and facts[0]["affinity_cpus"]
    # one machine is one host: the threads are a field of each run (its config and host_json), never hashed in
    assert one["host_fingerprint"] == two["host_fingerprint"] == facts[0]["machine"]
    assert (one["threads"], two["threads"]) == (1, 2)


def test_auto_threads_records_what_torch_chose(tmp_path):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    db = tmp_path / "s.duckdb"
    row = get_run(launch(RunConfig.from_dict(TINY), db=db).run_id, db=db)
    assert row["threads"] == 0
    # torch's default in a fresh interpreter under the same environment, as the run's process was
    default = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert json.loads(row["host_json"])["intra_op_threads"] == int(default)


def test_wait_percentiles_have_one_definition_in_the_store_and_in_stats(tmp_path):
    """The runs table and run detail read the stored p50/p90/p99; engine.analysis.stats recomputes them from the
    stored steps: the same numbers, so no page can show two different p99s for one run."""
    from engine.analysis.stats import time_breakdown  # noqa: PLC0415
    from engine.store import get_epochs, get_steps  # noqa: PLC0415

    db = tmp_path / "s.duckdb"
    result = launch(
        RunConfig.from_dict(
            {
                **TINY,
                "n_samples": 256,
                "batch_size": 8,
                "epochs": 3,
                "loader": "threads",
                "workers": 1,
                "latency_ms": 0.5,
            }
        ),
        db=db,
    )
    row = get_run(result.run_id, db=db)
    steps = get_steps(result.run_id, db=db).assign(run_id=result.run_id)
    figures = time_breakdown(get_epochs(result.run_id, db=db).assign(run_id=result.run_id), steps)[result.run_id]
    for q in (50, 90, 99):
        assert row[f"data_wait_p{q}_s"] == pytest.approx(figures[f"data_wait_p{q}_s"], rel=1e-6)
    assert figures["n_steps"] == 2 * (256 // 8 - 1)  # steady epochs, each epoch's first step left out
