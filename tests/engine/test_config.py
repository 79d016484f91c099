"""RunConfig/SweepConfig: one schema, validated once, errors that name the field."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import ConfigError, RunConfig, SweepConfig, config_fields, field_choices
from engine.names import NAMES
from engine.registry import LOADERS, MODELS, MODES, WORKLOADS, check

ROOT = Path(__file__).resolve().parents[2]


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
        check(RunConfig.from_dict(data))  # the schema, then the machine's rules: what every launcher checks
    assert err.value.field == field
    assert field in str(err.value)


def test_unknown_loader_lists_choices():
    with pytest.raises(ConfigError, match="choose one of: sync, prefetch, threads, processes"):
        RunConfig.from_dict({"loader": "thread"})


def test_the_form_offers_what_a_user_may_launch():
    """Every choice a select box offers is one the schema knows (it may still need another field, or a GPU), and a
    name it does not offer is refused, naming that field."""
    for f in config_fields():
        offered = field_choices(f)
        if offered is None:
            continue
        assert offered, f.name
        for value in offered:
            try:
                RunConfig.from_dict({f.name: value})
            except ConfigError as e:
                assert "unknown" not in e.message, (f.name, value, e.message)
        with pytest.raises(ConfigError) as refused:
            RunConfig.from_dict({f.name: "not-offered"})
        assert refused.value.field == f.name and "unknown" in refused.value.message


def test_the_static_names_are_the_registries_keys_in_order():
    """The schema offers and checks the names without importing the registries (torch): they must agree."""
    registries = {"workloads": WORKLOADS, "loaders": LOADERS, "models": MODELS, "modes": MODES}
    assert set(NAMES) == set(registries)
    assert {kind: tuple(registry) for kind, registry in registries.items()} == NAMES


def test_the_schema_imports_no_torch():
    """A fresh interpreter validates a config, a sweep and every field's choices without loading torch."""
    code = ("import sys\n"
            "from engine.config import RunConfig, SweepConfig, config_fields, field_choices\n"
            "RunConfig.from_dict({'loader': 'threads', 'workers': 2, 'mode': 'ddp', 'device': 'cuda:99'})\n"
            "SweepConfig.from_dict({'grid': {'loader': ['sync', 'threads'], 'workers': [1, 2]}})\n"
            "[field_choices(f) for f in config_fields()]\n"
            "print('torch' in sys.modules, 'engine.registry' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_a_sweeps_machine_check_names_the_grid_point():
    sweep = SweepConfig.from_dict({"base": {"device": "cpu"}, "grid": {"trace": [False, True], "mode": ["ddp"]}})
    check(sweep.configs()[0])
    with pytest.raises(ConfigError) as err:
        check(sweep.configs()[1])
    assert err.value.field == "trace" and err.value.message.endswith("(in grid point trace=True, mode=ddp)")


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


# ---------------------------------------------------------------------------- sweep size and de-duplication


def _naive_configs(base: dict, grid: dict) -> list[RunConfig]:
    """The grid as it was de-duplicated before: each config compared with every one kept so far (quadratic)."""
    out: list[RunConfig] = []
    for combo in itertools.product(*grid.values()):
        cfg = RunConfig.from_dict({**base, **dict(zip(grid, combo))})
        if cfg.effective() not in [c.effective() for c in out]:
            out.append(cfg)
    return out


# the fields whose values the loader or the mode may ignore, so that distinct grid points run the same
_AXES = {"loader": ["sync", "prefetch", "threads", "processes"], "workers": [1, 2, 3], "prefetch_depth": [1, 2, 4],
         "start_method": ["fork", "spawn"], "persistent_workers": [True, False], "mode": ["single", "fused", "ddp",
         "dual-sequential", "dual-threads"], "n_models": [2, 3, 4], "world_size": [1, 2], "dual_data":
         ["shared", "separate"], "lr_spread": [0.0, 0.5], "model_b": ["", "cnn"], "width_b": [0, 16],
         "batch_size": [16, 32]}


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
