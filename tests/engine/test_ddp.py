"""ddp mode: disjoint shards that cover each epoch once, real runs over gloo, failures, torchrun's env.

.venv/bin/python -m pytest tests/engine/test_ddp.py -q
"""

from __future__ import annotations

import pytest
import torch
from _mode_runs import TINY, assert_no_orphans, epochs_of, launch_mode, summary_of

from engine.config import ConfigError, RunConfig
from engine.modes._common import FAIL_AT_ENV
from engine.modes._ddp import cuda_ranks, free_port, torchrun_env
from engine.registry import check
from engine.workloads import ShardDataset


class _Indices:
    sample_shape, num_classes = (3, 8, 8), 10

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        return key


@pytest.mark.parametrize(("n", "world"), [(n, w) for n in (1, 7, 128, 129) for w in (1, 2, 3) if w <= n])
def test_shards_are_disjoint_and_cover_every_sample_once(n, world):
    base = _Indices(n)
    seen = [
        ShardDataset(base, r, world)[(5, i)] for r in range(world) for i in range(len(ShardDataset(base, r, world)))
    ]
    assert sorted(index for _, index in seen) == list(range(n))
    assert {epoch for epoch, _ in seen} == {5}


def test_ddp_trains_every_sample_once_per_epoch_over_gloo(store):
    # 65 samples in batches of 32: rank 0 gets 33 (two steps), rank 1 gets 32 (one step), so join() is needed
    result, events = launch_mode(
        store, mode="ddp", device="cpu", world_size=2, n_samples=65, loader="threads", workers=1
    )
    assert result.status == "done", result.error
    by_rank = epochs_of(events)
    assert sorted(by_rank) == [(0, 0), (0, 1)]
    for epoch in range(TINY["epochs"]):
        assert sum(rows[epoch]["samples"] for rows in by_rank.values()) == 65
    assert [e["n_steps"] for e in (by_rank[(0, 0)][0], by_rank[(0, 1)][0])] == [2, 1]
    assert all(e["allreduce_s"] > 0 for rows in by_rank.values() for e in rows)
    summary = summary_of(events)
    assert summary["world_size_run"] == 2 and summary["allreduce_s_total"] > 0
    assert len(summary["per_rank_samples_per_s"]) == 2
    assert_no_orphans(result)


def test_an_error_in_one_rank_fails_the_run_with_its_message(store, monkeypatch):
    monkeypatch.setenv(FAIL_AT_ENV, "1:1")  # rank 1 raises at its second epoch; rank 0 waits in an all-reduce
    result, events = launch_mode(store, mode="ddp", device="cpu", world_size=2, epochs=3)
    assert result.status == "failed"
    assert "rank 1 failed" in result.error and "injected failure in model/rank 1 at epoch 1" in result.error
    assert {e["epoch"] for e in events if e["type"] == "epoch"} == {0}  # finished epochs kept
    assert_no_orphans(result)


def test_under_torchrun_the_run_joins_the_group_instead_of_spawning(store, monkeypatch):
    # what torchrun sets for a one-process group; the run must use it, not world_size = 2
    port = free_port()
    for key, value in dict(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    ).items():
        monkeypatch.setenv(key, value)
    result, events = launch_mode(store, mode="ddp", device="cpu", world_size=2)
    assert result.status == "done", result.error
    assert sorted(epochs_of(events)) == [(0, 0)]
    assert all(e["samples"] == TINY["n_samples"] for e in epochs_of(events)[(0, 0)])
    assert summary_of(events)["world_size_run"] == 1
    start = next(e for e in events if e["type"] == "start")
    assert start["config"]["world_size"] == 1  # the stored config is what ran: torchrun's WORLD_SIZE


def test_world_size_beyond_the_samples_is_refused():
    with pytest.raises(ConfigError) as err:
        check(RunConfig.from_dict({**TINY, "mode": "ddp", "world_size": 200}))  # schema, then machine
    assert err.value.field == "world_size"


def test_cuda_ranks_start_at_the_configured_gpu_and_must_fit():
    assert cuda_ranks(0, 2, 2) == ["cuda:0", "cuda:1"]
    assert cuda_ranks(2, 2, 4) == ["cuda:2", "cuda:3"]  # device cuda:2 is honoured, not replaced by cuda:0
    with pytest.raises(ConfigError) as err:
        cuda_ranks(0, 2, 1)  # two NCCL ranks cannot share one GPU
    assert err.value.field == "world_size" and "sees 1" in str(err.value)
    with pytest.raises(ConfigError) as err:
        cuda_ranks(1, 2, 2, field="WORLD_SIZE")
    assert err.value.field == "WORLD_SIZE"


def test_torchrun_env_reads_the_ranks_on_this_node(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert torchrun_env() is None
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert torchrun_env() == (5, 8, 1, 8)  # no LOCAL_WORLD_SIZE: one node
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert torchrun_env() == (5, 8, 1, 4)  # two nodes of 4: 4 GPUs per node are enough


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_torchrun_world_beyond_the_gpus_is_refused_before_running(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", str(torch.cuda.device_count() + 1))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError) as err:
        check(RunConfig.from_dict({**TINY, "mode": "ddp", "device": "cuda"}))  # schema, then machine
    assert err.value.field == "WORLD_SIZE"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_ddp_one_rank_over_nccl(store):
    result, events = launch_mode(store, mode="ddp", device="cuda", world_size=1)
    assert result.status == "done", result.error
    assert all(e["samples"] == TINY["n_samples"] for e in epochs_of(events)[(0, 0)])
    assert_no_orphans(result)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (one NCCL rank each)")
def test_ddp_trains_every_sample_once_per_epoch_over_nccl(store):
    result, events = launch_mode(
        store, mode="ddp", device="cuda", world_size=2, n_samples=65, loader="threads", workers=1
    )
    assert result.status == "done", result.error
    by_rank = epochs_of(events)
    for epoch in range(TINY["epochs"]):
        assert sum(rows[epoch]["samples"] for rows in by_rank.values()) == 65
    assert all(e["allreduce_s"] > 0 for rows in by_rank.values() for e in rows)
    assert_no_orphans(result)
