"""RunConfig: one schema, validated once, errors that name the field (sweeps: tests/engine/test_sweep.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import ConfigError, RunConfig, config_fields, field_choices
from engine.names import NAMES
from engine.registry import LOADERS, MODELS, MODES, WORKLOADS, check

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_validate():
    cfg = RunConfig.from_dict({})
    assert cfg.loader == "sync" and cfg.mode == "single"


@pytest.mark.parametrize(
    "data, field",
    [
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
    ],
)
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
    code = (
        "import sys\n"
        "from engine.config import RunConfig, SweepConfig, config_fields, field_choices\n"
        "RunConfig.from_dict({'loader': 'threads', 'workers': 2, 'mode': 'ddp', 'device': 'cuda:99'})\n"
        "SweepConfig.from_dict({'grid': {'loader': ['sync', 'threads'], 'workers': [1, 2]}})\n"
        "[field_choices(f) for f in config_fields()]\n"
        "print('torch' in sys.modules, 'engine.registry' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_strings_are_coerced_like_cli_and_url_values():
    cfg = RunConfig.from_dict({"workers": "2", "loader": "threads", "lr": "0.1", "bound": "false"})
    assert (cfg.workers, cfg.lr, cfg.bound) == (2, 0.1, False)


def test_workerless_loaders_normalise_workers():
    assert RunConfig.from_dict({"loader": "sync", "workers": 4}).workers == 0
