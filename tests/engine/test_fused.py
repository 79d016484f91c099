"""fused mode: one vmapped step equals N separate steps; config checks; a real run through the runner.

.venv/bin/python -m pytest tests/engine/test_fused.py -q
"""

from __future__ import annotations

import copy

import pytest
import torch
from _mode_runs import TINY, epochs_of, launch_mode, run_in_process, summary_of
from torch import nn

from engine.config import ConfigError, RunConfig
from engine.models import CNN, MLP, Transformer, loss_fn, make_optimizer
from engine.modes.fused import FusedStep, model_lrs
from engine.registry import check


def _models(cls, n):
    out = []
    for i in range(n):
        torch.manual_seed(i)
        model = cls((3, 8, 8), 5, 8, 2)
        with torch.no_grad():  # break the zero-init symmetry so every parameter moves
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        out.append(model)
    return out


def _batches(n):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(6, 3, 8, 8, generator=g), torch.randint(5, (6,), generator=g)) for _ in range(n)]


def _assert_same_params(fused, separate):
    for i, model in enumerate(separate):
        state = fused.state_dict(i)
        for name, p in model.named_parameters():
            torch.testing.assert_close(state[name], p.detach(), rtol=1e-4, atol=1e-6, msg=f"model {i} {name}")
    first = next(iter(fused.params.values()))
    assert not torch.allclose(first[0], first[1])  # the models differ (distinct seeds and learning rates)


@pytest.mark.parametrize(("cls", "lr_spread"), [(MLP, 0.0), (MLP, 0.75), (CNN, 0.75), (Transformer, 0.75)])
def test_fused_sgd_steps_equal_separate_steps(cls, lr_spread):
    cfg = RunConfig(n_models=3, lr=0.05, lr_spread=lr_spread)
    models = _models(cls, cfg.n_models)
    separate = [copy.deepcopy(m) for m in models]
    opts = [make_optimizer(m.parameters(), "sgd", lr) for m, lr in zip(separate, model_lrs(cfg))]
    fused = FusedStep(models, "sgd", model_lrs(cfg))
    for x, y in _batches(3):  # three steps: the momentum carried between steps is compared too
        losses = fused(x, y)
        for i, (model, opt) in enumerate(zip(separate, opts)):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            torch.testing.assert_close(losses[i], loss.detach(), rtol=1e-5, atol=1e-6)
    _assert_same_params(fused, separate)


@pytest.mark.parametrize("cls", [MLP, CNN])
def test_fused_adamw_per_model_lr_equals_separate_adamw(cls):
    # NOTE: the same gradients go into both sides. AdamW divides by sqrt(v): a gradient that is pure
    # rounding noise (~1e-8, e.g. a bias in front of a norm) becomes a full +-lr step, so end-to-end runs
    # differ in those elements by design; what must match exactly is the per-model-lr update itself.
    cfg = RunConfig(n_models=3, lr=0.01, lr_spread=2.0)
    models = _models(cls, cfg.n_models)
    separate = [copy.deepcopy(m) for m in models]
    opts = [make_optimizer(m.parameters(), "adamw", lr) for m, lr in zip(separate, model_lrs(cfg))]
    fused = FusedStep(models, "adamw", model_lrs(cfg))
    for x, y in _batches(3):
        grads, losses = fused.grads(x, y)
        fused.step(grads)
        for i, (model, opt) in enumerate(zip(separate, opts)):
            for name, p in model.named_parameters():
                p.grad = grads[name][i].clone()
            opt.step()
    _assert_same_params(fused, separate)


def test_a_model_that_cannot_be_vmapped_is_refused_by_name():
    models = [nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(5)) for _ in range(2)]
    with pytest.raises(ConfigError, match="running statistics") as err:
        FusedStep(models, "sgd", [0.1, 0.1])
    assert err.value.field == "model"


def test_fused_needs_two_models():
    with pytest.raises(ConfigError) as err:
        check(RunConfig.from_dict({**TINY, "mode": "fused", "n_models": 1}))  # schema, then machine
    assert err.value.field == "n_models"


def test_fused_run_through_the_runner(store):
    result, events = launch_mode(store, mode="fused", n_models=3, lr_spread=0.5, model="cnn")
    assert result.status == "done", result.error
    by_model = epochs_of(events)
    assert sorted(by_model) == [(0, 0), (1, 0), (2, 0)]
    assert all([e["epoch"] for e in rows] == [0, 1] for rows in by_model.values())
    assert len({rows[-1]["loss"] for rows in by_model.values()}) == 3  # three distinct models
    summary = summary_of(events)
    assert summary["aggregate_samples"] == 3 * TINY["n_samples"]
    assert len(summary["per_model_samples_per_s"]) == 3


@pytest.mark.parametrize(
    "loader",
    [dict(loader="prefetch"), dict(loader="threads", workers=2), dict(loader="processes", workers=1)],
    ids=lambda f: f["loader"],
)
def test_fused_runs_with_every_loader(loader):
    events, summary = run_in_process("fused", n_models=2, **loader)
    assert sorted(epochs_of(events)) == [(0, 0), (1, 0)] and summary["n_models_run"] == 2
