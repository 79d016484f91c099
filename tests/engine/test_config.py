"""RunConfig/SweepConfig: one schema, validated once, errors that name the field."""

from __future__ import annotations

import pytest

from engine.config import ConfigError, RunConfig, SweepConfig, config_fields, field_choices
from engine.registry import LOADERS, MODES


def test_defaults_validate():
    cfg = RunConfig.from_dict({})
    assert cfg.loader == "sync" and cfg.mode == "single"


@pytest.mark.parametrize("data, field", [
    ({"loader": "thread"}, "loader"),
    ({"workers": -1}, "workers"),
    ({"batch_size": 0}, "batch_size"),
    ({"device": "cuda:99"}, "device"),
    ({"device": "tpu"}, "device"),
    ({"workload": "folder", "folder": "/no/such/folder"}, "folder"),
    ({"workload": "folder"}, "folder"),
    ({"epochs": 2, "warmup_epochs": 2}, "warmup_epochs"),
    ({"loader": "threads", "workers": 0}, "workers"),
    ({"lr": "fast"}, "lr"),
    ({"bogus": 1}, "bogus"),
    ({"epochs": 1.5}, "epochs"),
    ({"lr": float("nan")}, "lr"),
    ({"mode": "quantum"}, "mode"),
])
def test_bad_input_names_the_field(data, field):
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(data)
    assert err.value.field == field
    assert field in str(err.value)


def test_unknown_loader_lists_choices():
    with pytest.raises(ConfigError, match="choose one of: sync, prefetch, threads, processes"):
        RunConfig.from_dict({"loader": "thread"})


def test_choices_come_from_the_registries():
    by_name = {f.name: f for f in config_fields()}
    assert field_choices(by_name["loader"]) == tuple(LOADERS)
    assert field_choices(by_name["mode"]) == tuple(MODES)


def test_strings_are_coerced_like_cli_and_url_values():
    cfg = RunConfig.from_dict({"workers": "2", "loader": "threads", "lr": "0.1", "bound": "false"})
    assert (cfg.workers, cfg.lr, cfg.bound) == (2, 0.1, False)


def test_workerless_loaders_normalise_workers():
    assert RunConfig.from_dict({"loader": "sync", "workers": 4}).workers == 0


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
