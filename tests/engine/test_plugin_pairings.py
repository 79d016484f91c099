"""Every workload with every kind of model: the lab's data with the user's model, the user's data with the lab's.

.venv/bin/python -m pytest tests/engine/test_plugin_pairings.py -q
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from engine.cli import main
from engine.config import RunConfig
from engine.run._plugin_check import preflight

from examples.own_pipeline.data import make_folder

USER_DATA = "examples.own_pipeline.data:build"
USER_MODEL = "examples.own_pipeline.nets:resnet"
BUILT_IN_WORKLOADS = ["tensor", "jpeg", "pyloop", "folder"]
TINY = {
    "n_samples": 16,
    "num_classes": 4,
    "image_size": 16,
    "width": 8,
    "depth": 1,
    "batch_size": 8,
    "epochs": 2,
    "bound": False,
}

pytestmark = pytest.mark.usefixtures("warm_runs")  # runs forked warm: these check what a pairing runs, not start-up


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return str(make_folder(tmp_path_factory.mktemp("folder") / "images", 16, 4, 0))


@pytest.mark.parametrize("model", ["cnn", USER_MODEL])
@pytest.mark.parametrize("workload", [*BUILT_IN_WORKLOADS, USER_DATA])
def test_preflight_passes_every_workload_with_every_kind_of_model(workload, model, folder):
    """The check of every label read `dataset.inner`, which only a plugin's dataset has: any plugin model on a
    built-in workload failed before it ran."""
    cfg = RunConfig.from_dict(
        {**TINY, "workload": workload, "model": model, **({"folder": folder} if workload == "folder" else {})}
    )
    meta = preflight(cfg)
    assert ("code_hash" in meta) == (USER_MODEL == model or USER_DATA == workload)


@pytest.mark.parametrize("workload, model", [("jpeg", USER_MODEL), (USER_DATA, "cnn")])
def test_the_users_model_runs_on_the_labs_data_and_back_from_the_cli(store, workload, model):
    """`python -m engine run --workload jpeg --model examples.own_pipeline.nets:resnet`, the project's own example."""
    args = [
        "run",
        "--workload",
        workload,
        "--model",
        model,
        "--n-samples",
        "16",
        "--num-classes",
        "4",
        "--image-size",
        "16",
        "--width",
        "8",
        "--depth",
        "1",
        "--batch-size",
        "8",
        "--epochs",
        "2",
        "--no-bound",
        "--quiet",
        "--db",
        str(store),
    ]
    assert main(args) == 0
    with duckdb.connect(str(store), read_only=True) as conn:
        rows = conn.execute("SELECT status, workload, model FROM runs").fetchall()
    assert rows == [("done", workload, model)]


def test_the_pairings_cover_every_built_in_workload():
    from engine.workloads import WORKLOADS  # noqa: PLC0415

    assert set(WORKLOADS) == set(BUILT_IN_WORKLOADS), Path(__file__).name + " must pair every built-in workload"
