"""GPU idle by cause on a real GPU: short CUDA runs through the runner into a real store. Skipped without CUDA
(the CPU side of the same path, from a recorded GPU run: tests/engine/test_gpu_idle.py, tests/app/test_run_costs.py).

    .venv/bin/python -m pytest tests/system/test_gpu_idle_on_cuda.py -q
"""

from __future__ import annotations

import pytest
import torch

from engine.config import RunConfig
from engine.run.runner import launch
from engine.store import get_epochs, get_run

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TINY = dict(
    workload="tensor",
    n_samples=256,
    image_size=8,
    width=8,
    batch_size=32,
    epochs=3,
    device="cuda",
    bound=False,
    sample_hz=20.0,
)


def _run(store, **fields):
    result = launch(RunConfig.from_dict({**TINY, **fields}), db=store)
    assert result.status == "done", result.error
    return get_run(result.run_id, db=store), get_epochs(result.run_id, db=store)


@pytest.mark.gpu
@cuda
def test_a_slow_loader_keeps_the_gpu_waiting_on_data(store):
    # about 64 ms of host work per batch against a tiny model: the GPU idles through nearly every wait
    run, epochs = _run(store, loader="sync", work_us=2000)
    steady = epochs[~epochs["warmup"]]
    parts = steady["gpu_idle_data_s"] + steady["gpu_idle_copy_s"] + steady["gpu_idle_other_s"]
    assert parts.tolist() == pytest.approx(steady["gpu_idle_s"].tolist(), rel=1e-6)
    assert (steady["gpu_idle_data_s"] > 0.8 * steady["gpu_idle_s"]).all(), steady.to_dict("records")
    assert run["gpu_idle_data_share"] > 0.5  # most of each step
    assert run["gpu_idle_data_share"] > 5 * (run["gpu_idle_copy_share"] + run["gpu_idle_other_share"])
    assert run["startup_cuda_s"] > 0  # the context, timed on its own


@pytest.mark.gpu
@cuda
def test_prefetchs_side_stream_copy_is_split_too(store):
    # the compute stream waits for each batch's copy on prefetch's copy stream: those stalls are the copy part
    run, epochs = _run(store, loader="prefetch", width=256, image_size=32)
    steady = epochs[~epochs["warmup"]]
    assert steady["copy_wait_s"].notna().all() and (steady["gpu_idle_copy_s"] >= 0).all()
    parts = steady["gpu_idle_data_s"] + steady["gpu_idle_copy_s"] + steady["gpu_idle_other_s"]
    assert parts.tolist() == pytest.approx(steady["gpu_idle_s"].tolist(), rel=1e-6)
    assert run["gpu_idle_share"] == pytest.approx(sum(run[f"gpu_idle_{k}_share"] for k in ("data", "copy", "other")))
