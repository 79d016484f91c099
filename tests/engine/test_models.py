"""Tests for engine/models: shapes, learning, split_stages, torch.func (fused mode) and the vmap check.

.venv/bin/python -m pytest tests/engine/test_models.py -q
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

from engine.config import ConfigError
from engine.models import CNN, MLP, Transformer, check_vmappable, loss_fn, make_optimizer, split_stages
from engine.models._base import _balanced_bounds

MODELS = [MLP, CNN, Transformer]


def _perturb(model: nn.Module) -> nn.Module:
    # noise breaks the symmetric init (zero biases, unit norm scales) so every parameter shapes the output
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("size", [8, 32, 64])
@pytest.mark.parametrize(("width", "depth"), [(1, 1), (6, 3), (32, 2)])
def test_output_shape(cls, size, width, depth):
    torch.manual_seed(0)
    model = cls((3, size, size), 7, width, depth)
    out = model(torch.randn(2, 3, size, size))
    assert out.shape == (2, 7)
    assert torch.isfinite(out).all()
    # every parameter lives inside a block, so splitting and stacking see all of them
    assert list(model.named_parameters(recurse=False)) == []
    assert len(model) >= depth + 1


@pytest.mark.parametrize("cls", MODELS)
def test_odd_shapes_and_size_knobs(cls):
    torch.manual_seed(0)
    assert cls((1, 9, 13), 3, 8, 2)(torch.randn(2, 1, 9, 13)).shape == (2, 3)
    count = [sum(p.numel() for p in cls((3, 8, 8), 10, w, d).parameters()) for w, d in [(8, 1), (64, 1), (8, 4)]]
    assert count[1] > 5 * count[0] and count[2] > count[0]


@pytest.mark.parametrize("cls", MODELS)
def test_overfits_a_fixed_batch(cls):
    torch.manual_seed(0)
    model = cls((3, 8, 8), 10, 32, 2)
    x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))
    opt = make_optimizer(model.parameters(), "sgd", lr=0.05)
    losses = []
    for _ in range(30):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("cls", MODELS)
def test_split_stages_compose_to_the_model(cls):
    torch.manual_seed(0)
    model = _perturb(cls((3, 16, 16), 10, 16, 4)).eval()
    x = torch.randn(3, 3, 16, 16)
    expected = model(x)
    sizes = [sum(p.numel() for p in m.parameters()) for m in model]
    for n in range(1, len(model) + 1):
        stages = split_stages(model, n)
        assert len(stages) == n and all(len(s) > 0 for s in stages)
        # the same module objects, in order: training the stages trains the model
        assert [id(m) for s in stages for m in s] == [id(m) for m in model]
        out = x
        for stage in stages:
            out = stage(out)
        assert torch.equal(out, expected)
        largest = max(sum(p.numel() for p in s.parameters()) for s in stages)
        assert largest == _best_largest(sizes, n)


def _best_largest(sizes: list[int], k: int) -> int:
    """Brute force: the smallest possible largest group over all contiguous cuts."""
    return min(_groups(sizes, cuts)[0] for cuts in itertools.combinations(range(1, len(sizes)), k - 1))


def _groups(sizes: list[int], cuts: tuple[int, ...]) -> tuple[int, int]:
    bounds = [0, *cuts, len(sizes)]
    sums = [sum(sizes[a:b]) for a, b in zip(bounds, bounds[1:])]
    return max(sums), sum(s * s for s in sums)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=8), st.data())
def test_balanced_bounds_is_optimal(sizes, data):
    k = data.draw(st.integers(1, len(sizes)))
    bounds = _balanced_bounds(sizes, k)
    assert bounds[0] == 0 and bounds[-1] == len(sizes) and len(bounds) == k + 1
    assert all(a < b for a, b in zip(bounds, bounds[1:]))
    got = _groups(sizes, tuple(bounds[1:-1]))
    # smallest largest group first, then the most even among those
    best = min(_groups(sizes, cuts) for cuts in itertools.combinations(range(1, len(sizes)), k - 1))
    assert got == best


@pytest.mark.parametrize("n_stages", [0, 5])
def test_split_stages_rejects_bad_counts(n_stages):
    model = MLP((3, 8, 8), 10, 8, 3)  # 4 blocks
    with pytest.raises(ConfigError) as err:
        split_stages(model, n_stages)
    assert err.value.field == "n_stages"
    assert "4" in err.value.message


@pytest.mark.parametrize("cls", MODELS)
def test_stacked_copies_under_vmap_match_separate_models(cls):
    torch.manual_seed(0)
    models = [_perturb(cls((3, 8, 8), 5, 8, 2)) for _ in range(3)]
    check_vmappable(models[0])
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))

    def loss_of(p, b, x, y):
        return loss_fn(functional_call(base, (p, b), (x,)), y)

    out = vmap(lambda p, b, x: functional_call(base, (p, b), (x,)), in_dims=(0, 0, None))(params, buffers, x)
    torch.testing.assert_close(out, torch.stack([m(x) for m in models]), atol=1e-5, rtol=1e-5)
    grads = vmap(grad(loss_of), in_dims=(0, 0, None, None))(params, buffers, x, y)
    for i, model in enumerate(models):
        loss_fn(model(x), y).backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(grads[name][i], p.grad, atol=1e-5, rtol=1e-4)


def test_check_vmappable_rejects_batchnorm():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten())
    with pytest.raises(ConfigError) as err:
        check_vmappable(model)
    assert err.value.field == "model"
    assert "BatchNorm2d" in err.value.message
    check_vmappable(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, track_running_stats=False)))


def test_make_optimizer():
    params = [nn.Parameter(torch.zeros(2))]
    sgd = make_optimizer(params, "sgd", 0.1)
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.9 and sgd.defaults["lr"] == 0.1
    assert isinstance(make_optimizer(params, "adamw", 1e-3), torch.optim.AdamW)
    with pytest.raises(ConfigError) as err:
        make_optimizer(params, "lion", 0.1)
    assert err.value.field == "optimizer" and "sgd" in err.value.message
