"""SweepConfig: a grid x repeats, seeded and de-duplicated in linear time, sized from its axes before it is
expanded, validated per grid point (a bad point names itself), its configs built once."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import ConfigError, RunConfig, SweepConfig
from engine.registry import check


def test_a_sweeps_machine_check_names_the_grid_point():
    sweep = SweepConfig.from_dict({"base": {"device": "cpu"}, "grid": {"trace": [False, True], "mode": ["ddp"]}})
    check(sweep.configs()[0])
    with pytest.raises(ConfigError) as err:
        check(sweep.configs()[1])
    assert err.value.field == "trace" and err.value.message.endswith("(in grid point trace=True, mode=ddp)")


def test_sweep_plan_is_seeded_and_deduplicated():
    data = {"name": "t", "repeats": 2, "seed": 3, "grid": {"loader": ["sync", "threads"], "workers": [1, 2]}}
    sweep = SweepConfig.from_dict(data)
    assert len(sweep.configs()) == 3  # sync once (workers normalised), threads × 2
    plan = sweep.plan()
    assert len(plan) == 6
    assert plan == SweepConfig.from_dict(data).plan()
    assert [c for _, c in plan] != [c for _, c in SweepConfig.from_dict({**data, "seed": 4}).plan()]


def test_sweep_rejects_a_bad_grid_point_before_running():
    with pytest.raises(ConfigError) as err:
        SweepConfig.from_dict({"grid": {"batch_size": [32, 0]}})
    assert err.value.field == "batch_size" and "grid point" in str(err.value)


def _naive_configs(base: dict, grid: dict) -> list[RunConfig]:
    """The grid as it was de-duplicated before: each config compared with every one kept so far (quadratic)."""
    out: list[RunConfig] = []
    for combo in itertools.product(*grid.values()):
        cfg = RunConfig.from_dict({**base, **dict(zip(grid, combo))})
        if cfg.effective() not in [c.effective() for c in out]:
            out.append(cfg)
    return out


# the fields whose values the loader or the mode may ignore, so that distinct grid points run the same
_AXES = {
    "loader": ["sync", "prefetch", "threads", "processes"],
    "workers": [1, 2, 3],
    "prefetch_depth": [1, 2, 4],
    "start_method": ["fork", "spawn"],
    "persistent_workers": [True, False],
    "mode": ["single", "fused", "ddp", "dual-sequential", "dual-threads"],
    "n_models": [2, 3, 4],
    "world_size": [1, 2],
    "dual_data": ["shared", "separate"],
    "lr_spread": [0.0, 0.5],
    "model_b": ["", "cnn"],
    "width_b": [0, 16],
    "batch_size": [16, 32],
}


@given(st.dictionaries(st.sampled_from(sorted(_AXES)), st.integers(1, 4), min_size=1, max_size=5), st.randoms())
@settings(max_examples=40, deadline=None)
def test_sweep_deduplication_keeps_what_the_naive_one_kept_in_its_order(axes, rnd):
    base = {"n_samples": 64, "workers": 1}
    grid = {k: rnd.sample(_AXES[k], min(n, len(_AXES[k]))) for k, n in axes.items()}
    try:
        naive = _naive_configs(base, grid)
    except ConfigError as e:  # a combination no mode allows: the sweep refuses it on the same field
        with pytest.raises(ConfigError) as err:
            SweepConfig.from_dict({"base": base, "grid": grid})
        assert err.value.field == e.field
        return
    sweep = SweepConfig.from_dict({"base": base, "grid": grid})
    assert [c.to_dict() for c in sweep.configs()] == [c.to_dict() for c in naive]
    assert sweep.size() == len(list(itertools.product(*grid.values())))


def test_a_huge_grid_is_refused_from_its_axes_lengths_and_the_cap_can_be_raised():
    """200 x 200 x 200 printed nothing for a minute: refused now from the axes' lengths, naming the cap."""
    huge = {"grid": {"seed": list(range(200)), "width": list(range(1, 201)), "depth": list(range(1, 201))}}
    with pytest.raises(ConfigError) as err:
        SweepConfig.from_dict(huge)
    assert err.value.field == "sweep.max_runs"
    assert "200 × 200 × 200 grid points = 8000000 configs" in err.value.message
    assert "max_runs" in err.value.message and "--max-runs" in err.value.message
    seeds = {"grid": {"seed": list(range(600))}, "repeats": 2}
    with pytest.raises(ConfigError, match="1200 runs is above the cap of 1000"):
        SweepConfig.from_dict(seeds)
    assert len(SweepConfig.from_dict({**seeds, "max_runs": 1200}).plan()) == 1200
    with pytest.raises(ConfigError, match="^sweep.max_runs: must be a whole number"):
        SweepConfig.from_dict({**seeds, "max_runs": "lots"})


def test_a_sweep_builds_its_configs_once():
    """from_dict validated the grid, and the CLI asked for it twice more: plan() and configs() reuse it now."""
    sweep = SweepConfig.from_dict({"grid": {"loader": ["sync", "threads"], "workers": [1, 2]}, "repeats": 2})
    first = sweep.configs()
    assert all(a is b for a, b in zip(first, sweep.configs()))
    assert all(any(cfg is c for c in first) for _, cfg in sweep.plan())
    sweep.grid["workers"] = [1, 2, 3]  # a changed grid is built again
    assert len(sweep.configs()) == 4 and sweep.size() == 6
