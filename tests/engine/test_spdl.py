"""The spdl loader beyond what test_loaders holds for every loader: a stuck or failing stage is named, a pipeline
stopped under the loader fails the epoch instead of ending it short, and each epoch builds a fresh pipeline.
Real SPDL pipelines over the tiny dataset.

    .venv/bin/python -m pytest tests/engine/test_spdl.py -q
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from _loader_fixtures import TinyDataset
from test_loaders import BS, N, SEED, ids_of, leftovers, planned

from engine.config import ConfigError, RunConfig
from engine.loaders import LOADERS, LoaderTimeout, SpdlLoader, open_loader
from engine.loaders.spdl import STOP_S


def make(dataset: TinyDataset, workers: int = 2, **extra) -> SpdlLoader:
    return SpdlLoader(dataset, "cpu", workers=workers, batch_size=BS, seed=SEED, **extra)


def slow_collate(samples):
    """A user's collate (cfg.collate = 'test_spdl:slow_collate') that hangs on the batch holding sample 0."""
    if any(int(x[0, 0, 0]) == 0 for x, _ in samples):
        time.sleep(5.0)
    return torch.utils.data.default_collate(samples)


def failing_collate(samples):
    raise KeyError("the user's collate cannot stack these samples")


def test_the_config_refuses_spdl_without_workers_naming_the_field():
    assert LOADERS["spdl"] is SpdlLoader
    with pytest.raises(ConfigError, match="needs workers >= 1") as err:
        RunConfig.from_dict({"loader": "spdl", "workers": 0})
    assert err.value.field == "workers"


def test_a_stuck_fetch_is_named_within_the_timeout():
    first = planned(0)[0][0]
    before = set(threading.enumerate())
    t0 = time.monotonic()
    with make(TinyDataset(N, sleep_at=first, sleep_s=5.0), timeout_s=1.0) as loader:
        with pytest.raises(LoaderTimeout, match=r"spdl loader: .*within 1 s .*stuck in stage 'fetch'"):
            list(loader.epoch(0))
        raised = time.monotonic() - t0
    assert raised < 1.0 + STOP_S + 1.0, f"the stuck stage was reported after {raised:.1f} s"
    assert leftovers(before) == ([], [])


def test_a_stuck_collate_is_named_not_fetch():
    with make(TinyDataset(N), collate="test_spdl:slow_collate", timeout_s=1.0) as loader:
        batches = loader.epoch(0)
        got = []
        with pytest.raises(LoaderTimeout, match=r"stuck in stage 'collate'"):
            for x, _ in batches:
                got.append(x)
    where = [i for i, b in enumerate(planned(0)) if 0 in b][0]
    assert len(got) == where  # every batch before the stuck one arrived, in order


def test_a_failing_collate_reraises_the_users_error_naming_the_stage():
    with make(TinyDataset(N), collate="test_spdl:failing_collate") as loader:
        with pytest.raises(KeyError, match="the user's collate cannot stack these samples") as err:
            list(loader.epoch(0))
    assert "'collate' stage" in str(err.value)


def test_a_pipeline_stopped_under_the_loader_fails_the_epoch():
    """Stopping the pipeline (what a killed stage or a cancelled event loop looks like from outside) ends SPDL's
    output with EOF: the loader must not pass that off as a finished, shorter epoch."""
    before = set(threading.enumerate())
    with make(TinyDataset(N, jitter_s=0.01)) as loader:
        it = loader.epoch(0)
        got = [next(it)]
        loader.pipeline.stop(timeout=STOP_S)
        with pytest.raises(RuntimeError, match=r"spdl loader: the pipeline ended after \d+ of 10 batches"):
            for batch in it:
                got.append(batch)
        assert ids_of(got) == planned(0)[: len(got)] and len(got) < 10
        assert ids_of(loader.epoch(1)) == planned(1)  # the loader still works: each epoch has its own pipeline
    assert leftovers(before) == ([], [])


# ---------------------------------------------------------------------------- SPDL's own decoders


def _jpeg(tmp_path, monkeypatch, **fields):
    from engine.config import RunConfig
    from engine.workloads import build_dataset

    monkeypatch.setenv("LOADERLAB_DATA", str(tmp_path))
    cfg = RunConfig.from_dict(
        {
            "workload": "jpeg",
            "n_samples": 16,
            "image_size": 32,
            "device": "cpu",
            "loader": "spdl",
            "workers": 2,
            "batch_size": 8,
            **fields,
        }
    )
    return cfg, build_dataset(cfg)


def test_where_spdl_io_loads_the_jpeg_workload_under_spdl_decodes_with_spdls_decoders_the_same_sample(
    tmp_path, monkeypatch
):
    """The same crop and flip from the same per-sample seed, decoded and resized by FFmpeg: close to PIL's, the
    same label; and the spdl loader fetches through it (GIL-free), every batch whole."""
    from engine.workloads import _spdl_decode

    if not _spdl_decode.available():
        assert os.environ.get("LOADERLAB_REQUIRE_SPDL_IO") != "1", "spdl_io's decoders do not load: `make media-deps`"
        pytest.skip("spdl_io or its FFmpeg libraries are not installed here (requirements.txt says which)")
    cfg, ds = _jpeg(tmp_path, monkeypatch)
    fetch = ds.spdl_fetch()
    for key in [(1, 3), (2, 3), (1, 11)]:
        (mine, label), (pil, pil_label) = fetch(key), ds[key]
        assert mine.shape == pil.shape == (3, 32, 32) and mine.dtype == pil.dtype and label == pil_label
        # bilinear resampling differs between FFmpeg and PIL, not the crop: far below an unrelated image's distance
        assert (mine - pil).abs().mean() < 0.25 * (mine - ds[(key[0], (key[1] + 1) % 16)][0]).abs().mean()
    with open_loader(ds, cfg, torch.device("cpu"), loader="spdl") as loader:
        assert loader.decoders and loader.fetch_one is not ds.__getitem__
        assert [x.shape[0] for x, _ in loader.epoch(1)] == [8, 8]


def test_the_spdl_loader_reads_a_dataset_without_decoders_through_its_own_getitem(tmp_path, monkeypatch):
    """A plugin's dataset (no spdl_fetch), and the jpeg workload with SPDL's decoders turned off: __getitem__."""
    from engine.workloads._spdl_decode import OFF_ENV

    monkeypatch.setenv(OFF_ENV, "0")
    cfg, ds = _jpeg(tmp_path, monkeypatch)
    assert ds.spdl_fetch() is None
    plugin = torch.utils.data.TensorDataset(torch.zeros(16, 3), torch.zeros(16, dtype=torch.long))
    for dataset in (ds, plugin):
        with open_loader(dataset, cfg, torch.device("cpu"), loader="spdl") as loader:
            assert not loader.decoders and loader.fetch_one == dataset.__getitem__
