"""split mode: the pipelined model computes the unsplit model's loss and gradients; placement; real runs.

.venv/bin/python -m pytest tests/engine/test_split.py -q
"""

from __future__ import annotations

import copy

import pytest
import torch
from _mode_runs import TINY, epochs_of, launch_mode, run_in_process, summary_of

from engine.config import ConfigError, RunConfig
from engine.models import CNN, MLP, Transformer, loss_fn, split_stages
from engine.modes.split import Pipeline, stage_devices
from engine.registry import check


def _check_equivalent(cls, n_stages, micro_batches, devices):
    torch.manual_seed(0)
    model = cls((3, 8, 8), 5, 8, 3)
    with torch.no_grad():  # break the zero-init symmetry so every gradient is non-trivial
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    reference = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    # 10 samples in 4 micro-batches: chunks of 3, 3, 3, 1, so the batch-share weighting is tested too
    x, y = torch.randn(10, 3, 8, 8, generator=g), torch.randint(5, (10,), generator=g)
    expected = loss_fn(reference(x), y)
    expected.backward()
    pipe = Pipeline(split_stages(model, n_stages), [torch.device(d) for d in devices], micro_batches)
    loss = pipe.forward_backward(x.to(devices[0]), y.to(devices[0]))
    torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    ref = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), ref[name].grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("micro_batches", [1, 4])
@pytest.mark.parametrize(("cls", "n_stages"), [(MLP, 2), (CNN, 3), (Transformer, 2)])
def test_split_model_has_the_unsplit_loss_and_gradients(cls, n_stages, micro_batches):
    _check_equivalent(cls, n_stages, micro_batches, ["cpu"] * n_stages)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("micro_batches", [1, 4])
def test_split_on_cuda_streams_has_the_unsplit_gradients(micro_batches, monkeypatch):
    # the reference is fp32 on the CPU; cuDNN convolutions default to TF32 on Ampere and later (10-bit mantissa)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    n = torch.cuda.device_count()
    _check_equivalent(CNN, 3, micro_batches, [f"cuda:{s % n}" for s in range(3)])


def test_stage_devices_place_contiguous_blocks():
    cfg = RunConfig(n_stages=4, devices=["cpu", "cpu"])
    assert stage_devices(cfg, torch.device("cpu")) == [torch.device("cpu")] * 4
    assert stage_devices(RunConfig(n_stages=3), torch.device("cpu")) == [torch.device("cpu")] * 3


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (dict(n_stages=9, depth=2), "n_stages"),  # an mlp of depth 2 has 3 blocks to cut
        (dict(micro_batches=64, batch_size=32), "micro_batches"),
        (dict(devices=["gpu0"]), "devices"),
        (dict(n_stages=2, devices=["cpu", "cpu", "cpu"]), "devices"),
    ],
)
def test_bad_split_configs_name_the_field(fields, field):
    with pytest.raises(ConfigError) as err:
        check(RunConfig.from_dict({**TINY, "mode": "split", **fields}))  # schema, then machine
    assert err.value.field == field


def test_split_run_through_the_runner(store):
    result, events = launch_mode(store, mode="split", model="cnn", n_stages=3, micro_batches=4, devices=["cpu", "cpu"])
    assert result.status == "done", result.error
    rows = epochs_of(events)[(0, 0)]
    assert [e["epoch"] for e in rows] == [0, 1] and all(e["samples"] == TINY["n_samples"] for e in rows)
    assert summary_of(events)["aggregate_samples"] == TINY["n_samples"]


@pytest.mark.parametrize(
    "loader",
    [
        dict(loader="sync"),
        dict(loader="prefetch"),
        dict(loader="threads", workers=2),
        dict(loader="processes", workers=1),
    ],
    ids=lambda f: f["loader"],
)
def test_split_runs_with_every_loader(loader):
    events, _ = run_in_process("split", micro_batches=2, **loader)
    assert [e["epoch"] for e in epochs_of(events)[(0, 0)]] == [0, 1]
