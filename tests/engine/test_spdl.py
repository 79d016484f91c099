"""The spdl loader beyond what test_loaders holds for every loader: a stuck or failing stage is named, a pipeline
stopped under the loader fails the epoch instead of ending it short, and each epoch builds a fresh pipeline.
Real SPDL pipelines over the tiny dataset.

    .venv/bin/python -m pytest tests/engine/test_spdl.py -q
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
from _loader_fixtures import TinyDataset
from test_loaders import BS, N, SEED, ids_of, leftovers, planned

from engine.config import ConfigError, RunConfig
from engine.loaders import LOADERS, LoaderTimeout, SpdlLoader
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
        assert ids_of(got) == planned(0)[:len(got)] and len(got) < 10
        assert ids_of(loader.epoch(1)) == planned(1)  # the loader still works: each epoch has its own pipeline
    assert leftovers(before) == ([], [])
