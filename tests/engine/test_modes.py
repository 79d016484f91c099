"""The dual-* modes and the mode registry: real runs through the runner, failures, and config checks.

fused, split and ddp have their own files (test_fused.py, test_split.py, test_ddp.py).

    .venv/bin/python -m pytest tests/engine/test_modes.py -q
"""

from __future__ import annotations

import threading

import pytest
import torch
from _mode_runs import TINY, assert_no_orphans, epochs_of, launch_mode, our_children, run_in_process, summary_of

from engine.config import ConfigError, RunConfig
from engine.models import CNN, MLP
from engine.modes import MODES
from engine.modes._common import FAIL_AT_ENV, build_model
from engine.modes._fanout import FanOut, Stopped
from engine.registry import check

LOADERS = [
    dict(loader="sync"),
    dict(loader="prefetch"),
    dict(loader="threads", workers=2),
    dict(loader="processes", workers=1),
    dict(loader="spdl", workers=2),
]


def test_registry_order():
    assert list(MODES) == [
        "single",
        "dual-sequential",
        "dual-threads",
        "dual-processes",
        "dual-streams",
        "fused",
        "split",
        "ddp",
    ]


def _assert_two_models_trained(events, n_samples=TINY["n_samples"], epochs=TINY["epochs"]):
    by_model = epochs_of(events)
    assert sorted(by_model) == [(0, 0), (1, 0)]
    for rows in by_model.values():
        assert [e["epoch"] for e in rows] == list(range(epochs))
        assert all(e["samples"] == n_samples and e["n_steps"] == len(e["steps"]) > 0 for e in rows)
        assert [e["warmup"] for e in rows] == [True] + [False] * (epochs - 1)


@pytest.mark.parametrize(
    "fields",
    [
        dict(mode="dual-sequential", model_b="cnn", width_b=4),
        dict(mode="dual-threads", dual_data="shared", loader="threads", workers=2),
        dict(mode="dual-processes", loader="processes", workers=1, devices=["cpu", "cpu"]),
    ],
    ids=lambda f: f"{f['mode']}-{f.get('dual_data', '')}",
)
def test_dual_modes_train_both_models_through_the_runner(store, fields):
    result, events = launch_mode(store, **fields)
    assert result.status == "done", result.error
    _assert_two_models_trained(events)
    summary = summary_of(events)
    assert summary["aggregate_samples"] == 2 * TINY["n_samples"]  # both models' steady epoch
    assert summary["aggregate_samples_per_s"] > 0 and summary["wall_s_total"] > 0
    assert len(summary["per_model_samples_per_s"]) == 2
    assert_no_orphans(result)


@pytest.mark.parametrize("loader", LOADERS, ids=lambda f: f["loader"])
@pytest.mark.parametrize(
    "fields",
    [dict(mode="dual-sequential"), dict(mode="dual-threads"), dict(mode="dual-threads", dual_data="separate")],
    ids=["sequential", "threads-shared", "threads-separate"],
)
def test_every_loader_feeds_the_in_process_dual_modes(fields, loader):
    events, summary = run_in_process(**fields, **loader)
    _assert_two_models_trained(events)
    assert summary["n_models_run"] == 2


def test_shared_data_gives_both_threads_the_same_batches_as_sequential():
    # the same seeded models see the same batches in the same order, so their losses match exactly
    threads, _ = run_in_process("dual-threads", dual_data="shared")
    sequential, _ = run_in_process("dual-sequential")
    loss = {k: [e["loss"] for e in v] for k, v in epochs_of(threads).items()}
    expected = {k: [e["loss"] for e in v] for k, v in epochs_of(sequential).items()}
    assert loss.keys() == expected.keys()
    assert all(loss[k] == pytest.approx(expected[k], rel=1e-5) for k in loss)  # intra-op reduction order may vary
    assert loss[(0, 0)] != loss[(1, 0)]  # distinct initial weights (seed + model_idx)


def test_an_error_in_one_thread_fails_the_run_with_its_message(store, monkeypatch):
    monkeypatch.setenv(FAIL_AT_ENV, "1:1")  # model 1 raises when its second epoch starts
    result, events = launch_mode(store, mode="dual-threads", epochs=3)
    assert result.status == "failed"
    assert "injected failure in model/rank 1 at epoch 1" in result.error
    assert (1, 0) in epochs_of(events) and epochs_of(events)[(1, 0)][0]["epoch"] == 0  # finished epochs kept
    assert_no_orphans(result)


def test_an_error_in_one_process_fails_the_mode_and_reaps_the_other(monkeypatch):
    # run in this process, so no runner kills the process group afterwards: the mode must reap its children
    # (the runner turns a mode's exception into status failed + its message, as the thread test shows)
    monkeypatch.setenv(FAIL_AT_ENV, "0:0")
    with pytest.raises(RuntimeError, match="model 0 failed: RuntimeError: injected failure"):
        run_in_process("dual-processes")
    assert our_children() == []


def test_fanout_feeds_every_consumer_every_batch_and_carries_errors():
    class Source:
        def epoch(self, e):
            yield from ((e, i) for i in range(5))
            if e == 1:
                raise ValueError("disk on fire")

    stop = threading.Event()
    with FanOut(Source(), n=2, epochs=2, depth=1, stop=stop) as fan:
        got = [[], []]

        def consume(c):
            got[c].extend(fan.epoch(c, 0))
            with pytest.raises(ValueError, match="disk on fire"):
                list(fan.epoch(c, 1))

        threads = [threading.Thread(target=consume, args=(c,)) for c in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
    assert got[0] == got[1] == [(0, i) for i in range(5)]
    stop = threading.Event()
    fan = FanOut(Source(), n=2, epochs=2, depth=1, stop=stop)
    stop.set()  # another thread failed: a waiting consumer stops instead of hanging
    with pytest.raises(Stopped):
        list(fan.epoch(0, 0)) and list(fan.epoch(0, 1))
    fan.close()


def test_model_b_and_width_b_build_the_second_model():
    cfg = RunConfig.from_dict({**TINY, "mode": "dual-threads", "model_b": "cnn", "width_b": 4})

    class Data:
        sample_shape, num_classes = (3, 8, 8), 10

    a, b = (build_model(cfg, Data(), i, torch.device("cpu"), dual=True) for i in range(2))
    assert isinstance(a, MLP) and isinstance(b, CNN)
    assert b.stem[0].out_channels == 4


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (dict(mode="dual-threads", model_b="resnet"), "model_b"),
        (dict(mode="dual-processes", devices=["cpu"]), "devices"),
        (dict(mode="dual-processes", devices=["cpu", "tpu"]), "devices"),
        (dict(mode="dual-processes", devices=["cpu", "cpu", "cpu"]), "devices"),
    ],
)
def test_bad_dual_configs_name_the_field(fields, field):
    with pytest.raises(ConfigError) as err:
        check(RunConfig.from_dict({**TINY, **fields}))  # schema, then machine
    assert err.value.field == field


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_dual_streams_without_cuda_says_so():
    with pytest.raises(ConfigError, match="needs a CUDA GPU") as err:
        check(RunConfig.from_dict({**TINY, "mode": "dual-streams"}))  # schema, then machine
    assert err.value.field == "mode"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dual_streams_trains_both_models_on_cuda(store):
    result, events = launch_mode(store, mode="dual-streams", device="cuda", loader="prefetch")
    assert result.status == "done", result.error
    _assert_two_models_trained(events)
    assert all(e["compute_s"] > 0 for rows in epochs_of(events).values() for e in rows)
