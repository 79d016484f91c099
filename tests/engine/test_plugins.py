"""The user's own dataset and model ('module.path:callable' specs): the contract, every guarantee, bad plugins.

.venv/bin/python -m pytest tests/engine/test_plugins.py -q
"""

from __future__ import annotations

import importlib
import importlib.metadata
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import torch

from engine.cli import main
from engine.config import ConfigError, RunConfig
from engine.plugins import code_hash, registered
from engine.run.preflight import preflight
from engine.workloads import build_dataset

from tests.engine._mode_runs import launch_mode, run_in_process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = {
    "workload": "examples.own_pipeline.data:build",
    "model": "examples.own_pipeline.nets:resnet",
    "n_samples": 32,
    "num_classes": 4,
    "image_size": 16,
    "width": 8,
    "depth": 1,
    "batch_size": 16,
}

PLUGIN = '''
import random
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, default_collate


class Noisy(Dataset):
    """Random transforms from all three global generators: only per-item seeding makes them repeatable."""

    def __init__(self, n, size, classes, labels=None):
        self.n, self.size, self.labels = n, size, labels
        if classes:
            self.num_classes = classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.rand(3, self.size, self.size) + float(np.random.rand()) + random.random()
        return x, (self.labels(i) if self.labels else i % 3)


def data(**cfg):
    return Noisy(cfg["n_samples"], cfg["image_size"], 3)

def data_few(seed, n_samples, **_):
    return Noisy(n_samples, 8, 3)

def data_strict(seed, image_size):
    return Noisy(8, image_size, 3)

def needs_more(seed, colour):
    return Noisy(8, 8, 3)

def raises(**_):
    raise RuntimeError("disk on fire")

def not_a_dataset(**_):
    return 42

def numpy_items(**_):
    return [(np.zeros((3, 8, 8), np.float32), 0)] * 8

def big_labels(**_):
    return Noisy(8, 8, 0, labels=lambda i: i)  # no num_classes: the config's 2, but labels reach 7

class Overlap:
    """Counts how many items are inside __getitem__ at once (the most seen), across the threads of a loader."""

    def __init__(self):
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def __enter__(self):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc):
        with self.lock:
            self.now -= 1


class Waits(Dataset):
    """An I/O-like item: a 20 ms wait, then bytes from a per-item generator; no global generator is touched."""

    overlap = Overlap()

    def __init__(self, n, draw_global=False):
        self.n, self.draw_global = n, draw_global

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with self.overlap:
            time.sleep(0.02)
        x = torch.from_numpy(np.random.default_rng(i).random(4).astype(np.float32))
        return (x + float(np.random.rand()) if self.draw_global else x), i % 3


def waits(**_):
    return Waits(32)

def waits_global(**_):
    return Waits(32, draw_global=True)


def two_classes(**_):
    return Noisy(8, 8, 0, labels=lambda i: i % 2)  # no num_classes anywhere: the model's head decides

class Listed(Noisy):
    """ImageFolder-style: the labels listed up front (targets), one bad one deep in the data."""

    def __init__(self, n):
        self.targets = [i % 3 for i in range(n - 1)] + [9]
        super().__init__(n, 8, 3, labels=lambda i: self.targets[i])

def listed_late_label(n_samples, **_):
    return Listed(n_samples)

def unlisted_late_label(n_samples, batch_size, seed, **_):
    from engine.loaders import epoch_batches
    first = {index for _, index in epoch_batches(n_samples, min(batch_size, 8), seed, 0)[0]}  # preflight's batch
    return Noisy(n_samples, 8, 3, labels=lambda i: i % 3 if i in first else 9)

BROKEN = 3  # not callable

def net(in_shape, num_classes, width, depth, seed):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes))

def kw_net(**cfg):
    model = net(cfg["in_shape"], cfg["num_classes"], cfg["width"], cfg["depth"], cfg["seed"])
    model.seen = cfg
    return model

def not_a_module(**_):
    return "a model"

def two_logits(in_shape, **_):  # ignores num_classes
    return nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], 2))

class Tree(nn.Module):
    def __init__(self, n, k):
        super().__init__()
        self.a, self.b = nn.Flatten(), nn.Linear(n, k)

    def forward(self, x):
        return self.b(self.a(x))

class Staged(Tree):
    def stages(self):
        return [self.a, self.b]

def tree(in_shape, num_classes, **_):
    return Tree(in_shape[0] * in_shape[1] * in_shape[2], num_classes)

def staged(in_shape, num_classes, **_):
    return Staged(in_shape[0] * in_shape[1] * in_shape[2], num_classes)

def batchnorm(in_shape, num_classes, **_):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], 8), nn.BatchNorm1d(8),
                         nn.Linear(8, num_classes))

class ItemNet(Tree):
    def forward(self, x):
        out = self.b(self.a(x))
        if out.sum().item() > 1e9:  # a branch on the weights' output: fine eagerly, impossible under vmap
            return out * 2
        return out

def item_net(in_shape, num_classes, **_):
    return ItemNet(in_shape[0] * in_shape[1] * in_shape[2], num_classes)

def bad_collate(items):
    raise ValueError("cannot stack these")

def tuple_collate(items):
    x, y = default_collate(items)
    return x * 1.0, y

def per_sample_loss(logits, y):
    return F.cross_entropy(logits, y, reduction="none")

def half_loss(logits, y):
    return F.cross_entropy(logits, y) * 0.5
'''


@pytest.fixture(scope="module", autouse=True)
def plugin_dir(tmp_path_factory, request) -> Iterator[Path]:
    """One folder on PYTHONPATH for the whole module, set before the warm parent starts: the runs here are checked
    for what they store and how they fail, not how they start, so they fork from one warm parent (tests/conftest.py
    warm_runs). The tests of where a user's module is found run their own cold CLI process, with their own env."""
    folder = tmp_path_factory.mktemp("plugins")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        mp.setenv("PYTHONPATH", f"{folder}:{ROOT}")
        # NOTE: after PYTHONPATH is set: a parent started with another one would refuse every run (it starts cold)
        request.getfixturevalue("warm_runs")
        yield folder


@pytest.fixture
def plug(plugin_dir) -> str:
    """A fresh, importable plugin module (unique name: no stale sys.modules entry); the run child finds it too."""
    name = f"plug_{secrets.token_hex(4)}"
    (plugin_dir / f"{name}.py").write_text(PLUGIN)
    importlib.invalidate_caches()
    return name


def fields_of(plug: str, **fields) -> dict:
    return {
        "workload": f"{plug}:data",
        "model": f"{plug}:net",
        "n_samples": 24,
        "image_size": 8,
        "batch_size": 8,
        "epochs": 2,
        "bound": False,
        "sample_hz": 2.0,
        **fields,
    }


def tiny(plug: str, **fields) -> RunConfig:
    return RunConfig.from_dict(fields_of(plug, **fields))


# ---------------------------------------------------------------------------- the contract


def test_config_takes_specs_and_names_the_field_for_garbage():
    cfg = RunConfig.from_dict({"workload": "mypkg.data:build", "model": "mypkg.nets:Net", "loss": "m:f"})
    assert (cfg.workload, cfg.model, cfg.collate, cfg.loss) == ("mypkg.data:build", "mypkg.nets:Net", "", "m:f")
    for field, value in (
        ("workload", "mypkg.data"),
        ("model", "a:b:c"),
        ("collate", "no spaces: x"),
        ("loss", "1pkg:f"),
    ):
        with pytest.raises(ConfigError) as err:
            RunConfig.from_dict({field: value})
        assert err.value.field == field and "module.path:callable" in err.value.message


def test_the_factory_gets_the_config_fields_it_asks_for(plug):
    assert len(build_dataset(tiny(plug))) == 24  # def data(**cfg): every field
    assert len(build_dataset(tiny(plug, workload=f"{plug}:data_few", n_samples=5))) == 5  # named + **_
    ds = build_dataset(tiny(plug, workload=f"{plug}:data_strict", image_size=12))  # only what it names
    assert ds.sample_shape == (3, 12, 12) and ds.num_classes == 3
    x, y = ds[(0, 1)]
    assert isinstance(y, int) and x.shape == (3, 12, 12)
    # a model's factory gets every config field too, plus what it is built for
    from engine.models import build_model  # noqa: PLC0415

    seen = build_model(tiny(plug, model=f"{plug}:kw_net", lr=0.125, width=16), (3, 8, 8), 5).seen
    assert seen["lr"] == 0.125 and seen["in_shape"] == (3, 8, 8) and seen["num_classes"] == 5 and seen["width"] == 16
    b = build_model(
        tiny(plug, model=f"{plug}:kw_net", width_b=4, mode="dual-threads"),
        (3, 8, 8),
        5,
        arch=f"{plug}:kw_net",
        width=4,
        field="model_b",
    )
    assert b.seen["width"] == 4  # model_b's own width


def _batches(cfg: RunConfig, loader: str, epoch: int) -> list:
    from engine.loaders import open_loader  # noqa: PLC0415

    cfg = cfg.replace(loader=loader, workers=2 if loader in ("threads", "processes") else 0)
    with open_loader(build_dataset(cfg), cfg, torch.device("cpu")) as it:
        return list(it.epoch(epoch))


@pytest.mark.parametrize("which", ["global generators", "example (item_rng, thread-safe)"])
def test_random_user_transforms_give_the_same_batches_on_every_loader(plug, which):
    cfg = tiny(plug) if which == "global generators" else RunConfig.from_dict({**EXAMPLE, "bound": False})
    ref = _batches(cfg, "sync", 1)
    assert len(ref) >= 2 and all(x.shape[0] > 0 for x, _ in ref)
    for loader in ("prefetch", "threads", "processes"):
        got = _batches(cfg, loader, 1)
        assert len(got) == len(ref)
        for (x, y), (rx, ry) in zip(got, ref):
            assert torch.equal(x, rx) and torch.equal(y, ry), loader
    # the transforms are random: another epoch augments the same samples differently
    other = sorted(_batches(cfg, "sync", 2), key=lambda b: b[1].tolist())
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(other, sorted(ref, key=lambda b: b[1].tolist())))


def _overlap_under_threads(plug: str, factory: str) -> tuple[Any, int, list]:
    """The dataset, the most items its threads loader (4 workers) had in flight at once, and its batches."""
    from engine.loaders import ThreadLoader  # noqa: PLC0415

    cfg = tiny(plug, workload=f"{plug}:{factory}", n_samples=32, loader="threads", workers=4)
    ds = build_dataset(cfg)
    ds.inner.overlap.most = 0
    with ThreadLoader(ds, "cpu", workers=4, batch_size=cfg.batch_size, seed=cfg.seed) as it:
        batches = list(it.epoch(1))
    return ds, ds.inner.overlap.most, batches


def test_a_dataset_that_draws_no_global_generator_loads_in_parallel_under_threads(plug):
    ds, most, _ = _overlap_under_threads(plug, "waits")
    assert not ds.items_serialised and ds.serial_note is None
    assert most >= 2  # 4 worker threads, 20 ms items: several in flight at once


def test_a_dataset_that_draws_global_generators_keeps_the_lock_says_so_and_stays_exact(plug):
    ds, most, got = _overlap_under_threads(plug, "waits_global")
    assert ds.items_serialised and "one at a time" in ds.serial_note and "thread_safe = True" in ds.serial_note
    assert most == 1
    ref = _batches(tiny(plug, workload=f"{plug}:waits_global", n_samples=32), "sync", 1)
    assert len(got) == len(ref) and all(torch.equal(x, rx) and torch.equal(y, ry) for (x, y), (rx, ry) in zip(got, ref))
    # the draws do shape the items: another epoch's items differ, so the equality above is not vacuous
    other = _batches(tiny(plug, workload=f"{plug}:waits_global", n_samples=32), "sync", 2)
    sums = [sorted(torch.cat([x for x, _ in batches]).sum(1).tolist()) for batches in (ref, other)]
    assert sums[0] != sums[1]


# ---------------------------------------------------------------------------- bad plugins


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"workload": "no_such_module_xyz:build"}, "workload", "cannot be imported"),
        ({"workload": "{p}:nope"}, "workload", "has no 'nope'"),
        ({"workload": "{p}:BROKEN"}, "workload", "not callable"),
        ({"workload": "{p}:raises"}, "workload", "disk on fire"),
        ({"workload": "{p}:needs_more"}, "workload", "colour"),
        ({"workload": "{p}:not_a_dataset"}, "workload", "map-style"),
        ({"workload": "{p}:numpy_items"}, "workload", "not a tensor"),
        ({"workload": "{p}:big_labels", "num_classes": 2}, "workload", "out of range"),
        (
            {"workload": "{p}:listed_late_label"},
            "workload",
            "label 9 of item 7 (in the dataset's targets) is out of range",
        ),
        (
            {"workload": "{p}:big_labels", "loader": "processes", "workers": 1, "start_method": "spawn"},
            "workload",
            "pickle",
        ),
        ({"model": "{p}:not_a_module"}, "model", "nn.Module"),
        # --num-classes given and the labels within it: the model is at fault, named with what it returned
        (
            {"workload": "{p}:big_labels", "model": "{p}:two_logits", "num_classes": 10},
            "model",
            "'{p}:two_logits' returned 2 logits per sample, but it was built for num_classes=10",
        ),
        ({"collate": "{p}:bad_collate"}, "collate", "cannot stack"),
        ({"loss": "{p}:per_sample_loss"}, "loss", "scalar"),
        ({"model": "{p}:tree", "mode": "split"}, "model", "stages()"),
        ({"model": "{p}:batchnorm", "mode": "fused"}, "model", "running statistics"),
        ({"model": "{p}:item_net", "mode": "fused"}, "model", "vmap"),
    ],
)
def test_a_bad_plugin_exits_2_naming_the_field_and_stores_nothing(plug, store, capsys, fields, field, words):
    args = [
        "run",
        "--workload",
        f"{plug}:data",
        "--model",
        f"{plug}:net",
        "--n-samples",
        "8",
        "--image-size",
        "8",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--db",
        str(store),
    ]
    for k, v in fields.items():
        args += ["--" + k.replace("_", "-"), str(v).format(p=plug)]
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: ") and words.format(p=plug) in lines[0], lines
    assert not (store.parent / "runs").exists() or not any((store.parent / "runs").iterdir())
    if store.exists():
        with duckdb.connect(str(store), read_only=True) as conn:
            assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_a_fixed_two_logit_head_over_an_undeclared_two_class_dataset_runs(plug, store):
    """num_classes left auto: LoaderLab's default of 10 is not the user's, so a plugin that ran before still runs."""
    args = [
        "run",
        "--workload",
        f"{plug}:two_classes",
        "--model",
        f"{plug}:two_logits",
        "--n-samples",
        "8",
        "--image-size",
        "8",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--no-bound",
        "--quiet",
        "--db",
        str(store),
    ]
    assert main(args) == 0
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT status, num_classes FROM runs").fetchall() == [("done", 0)]  # auto, as it ran


def test_a_num_classes_the_user_set_and_the_model_ignores_is_refused(plug, store, capsys):
    args = [
        "run",
        "--workload",
        f"{plug}:two_classes",
        "--model",
        f"{plug}:two_logits",
        "--num-classes",
        "3",
        "--n-samples",
        "8",
        "--image-size",
        "8",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--db",
        str(store),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "returned 2 logits per sample, but it was built for num_classes=3" in err[0], err


def test_a_bad_label_past_the_preflight_batch_fails_the_run_naming_the_item(plug, store, capsys):
    """Without a list of targets only the run meets it: the failure says which item and what to do."""
    args = [
        "run",
        "--workload",
        f"{plug}:unlisted_late_label",
        "--model",
        f"{plug}:net",
        "--n-samples",
        "32",
        "--image-size",
        "8",
        "--batch-size",
        "8",
        "--epochs",
        "2",
        "--no-bound",
        "--quiet",
        "--db",
        str(store),
    ]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"of '{plug}:unlisted_late_label': label 9 is out of range for the model's 3 logits" in err, err


def test_preflight_sees_the_code_as_it_is_now_from_the_folder_it_is_given(tmp_path):
    """A notebook or the job worker lives on while the user edits their module, and may check jobs from
    several folders: preflight and the code hash follow the file, never a stale import."""
    name = f"edited_{secrets.token_hex(4)}"
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, body in ((a, PLUGIN + "\ndef data(**_):\n    raise RuntimeError('bug v1')\n"), (b, PLUGIN)):
        folder.mkdir()
        (folder / f"{name}.py").write_text(body)
    cfg = RunConfig.from_dict(
        {"workload": f"{name}:data", "model": f"{name}:net", "n_samples": 8, "image_size": 8, "batch_size": 4}
    )
    with pytest.raises(ConfigError, match="bug v1"):
        preflight(cfg, cwd=str(a))
    in_b = preflight(cfg, cwd=str(b))["code_hash"]  # another folder's module of the same name: its own code
    (a / f"{name}.py").write_text(PLUGIN + "\n# fixed\n")  # the user fixes the bug
    fixed = preflight(cfg, cwd=str(a))["code_hash"]
    assert fixed != in_b and preflight(cfg, cwd=str(b))["code_hash"] == in_b


def test_a_users_module_named_like_a_checkout_module_is_theirs(store, tmp_path):
    """'app' is also the dashboard's router in the checkout: the run child must import the user's, as the
    launcher's preflight did."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    (tmp_path / "app.py").write_text(PLUGIN)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "run",
            "--workload",
            "app:data",
            "--model",
            "app:net",
            "--n-samples",
            "16",
            "--image-size",
            "8",
            "--batch-size",
            "8",
            "--epochs",
            "2",
            "--no-bound",
            "--quiet",
            "--db",
            str(store),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT status, workload FROM runs").fetchall() == [("done", "app:data")]


def test_dry_run_tries_the_plugin_without_running(plug, store, capsys):
    args = [
        "run",
        "--dry-run",
        "--workload",
        f"{plug}:data",
        "--n-samples",
        "8",
        "--image-size",
        "8",
        "--db",
        str(store),
    ]
    assert main([*args, "--model", f"{plug}:net"]) == 0 and f"{plug}:net" in capsys.readouterr().out
    assert main([*args, "--model", f"{plug}:not_a_module"]) == 2 and "model: " in capsys.readouterr().err
    assert not (store.parent / "runs").exists()


def test_a_bad_grid_point_fails_the_sweep_before_any_run(plug, store, tmp_path, capsys):
    toml = tmp_path / "s.toml"
    toml.write_text(
        f'name = "bad"\n[base]\nn_samples = 8\nimage_size = 8\nbatch_size = 4\nepochs = 2\n'
        f'workload = "{plug}:data"\n[grid]\nmodel = ["{plug}:net", "{plug}:not_a_module"]\n'
    )
    assert main(["sweep", str(toml), "--quiet", "--db", str(store)]) == 2
    assert "model: " in capsys.readouterr().err
    assert not (store.parent / "runs").exists() or not any((store.parent / "runs").iterdir())


# ---------------------------------------------------------------------------- modes, losses, stages


def test_custom_collate_and_loss_and_stages_run(plug):
    from engine.models._base import _LOSS  # noqa: PLC0415

    events, _ = run_in_process("single", **fields_of(plug, collate=f"{plug}:tuple_collate", loss=f"{plug}:half_loss"))
    assert [e["samples"] for e in events] == [24, 24] and _LOSS[0].__name__ == "half_loss"
    events, _ = run_in_process("split", **fields_of(plug, model=f"{plug}:staged", n_stages=2))
    assert [e["samples"] for e in events] == [24, 24]
    assert _LOSS[0] is torch.nn.functional.cross_entropy  # a run without `loss` is back to cross-entropy


@pytest.mark.parametrize(
    "mode, extra",
    [
        ("single", {}),
        ("fused", {"n_models": 2}),
        ("dual-sequential", {}),
        ("dual-threads", {}),
        ("dual-processes", {}),
        ("split", {"n_stages": 2}),
    ],
)
def test_the_example_runs_in_every_mode_that_applies(mode, extra):
    events, summary = run_in_process(mode, **{**EXAMPLE, "epochs": 2, **extra})
    models = {e["model_idx"] for e in events}
    assert len(models) == (2 if mode != "single" and mode != "split" else 1)
    assert all(e["samples"] == 32 for e in events) and summary["samples_per_s"] > 0


def test_the_example_under_ddp_shares_every_sample_once(store):
    result, events = launch_mode(store, **EXAMPLE, mode="ddp", device="cpu", world_size=2)
    assert result.status == "done", result.error
    per_epoch = {}
    for e in events:
        if e["type"] == "epoch":
            per_epoch[e["epoch"]] = per_epoch.get(e["epoch"], 0) + e["samples"]
    assert per_epoch == {0: 32, 1: 32}


def test_a_plugin_run_is_stored_with_its_bound_and_code_hash(store):
    result, _ = launch_mode(store, **EXAMPLE, bound=True, loader="threads", workers=2)
    assert result.status == "done", result.error
    with duckdb.connect(str(store), read_only=True) as conn:
        row = conn.execute(
            "SELECT workload, n_samples, num_classes, bound_s, efficiency, bound_error, code_hash FROM runs"
        ).fetchone()
    assert row[:3] == (EXAMPLE["workload"], 32, 4)
    assert row[3] > 0 and row[4] > 0 and row[5] is None  # (no verdict assertion: a busy machine may flag it stale)
    assert row[6] == code_hash([EXAMPLE["workload"], EXAMPLE["model"]]) and len(row[6]) == 64


# ---------------------------------------------------------------------------- code_hash


def test_code_hash_covers_the_package_and_changes_with_it(tmp_path, monkeypatch):
    pkg = tmp_path / f"pkg_{secrets.token_hex(4)}"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "data.py").write_text("def build(**_):\n    return []\n")
    (pkg / "helpers.py").write_text("SCALE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"{pkg.name}.sub.data:build"
    first = code_hash([spec])
    assert first == code_hash([spec, "tensor", ""]) and code_hash(["tensor", "mlp"]) is None
    (pkg / "helpers.py").write_text("SCALE = 2\n")  # not the factory's file, but in its package
    assert code_hash([spec]) != first
    from engine.plugins.hashing import _sources  # noqa: PLC0415 - an installed library counts by its version

    assert _sources("torch.nn.functional", torch.nn.functional) == {f"torch@{importlib.metadata.version('torch')}": b""}


def _stored_run(runs: Path, run_id: str, digest: str | None, db: Path) -> None:
    from engine.runlog import RunLog  # noqa: PLC0415
    from engine.store import ingest_run  # noqa: PLC0415

    cfg = RunConfig(workload="mypkg.data:build", model="mypkg.nets:net").to_dict()
    with RunLog(runs / run_id) as rl:
        rl.write("start", run_id=run_id, config=cfg, host={"hostname": "h"}, code_hash=digest)
        for ep in range(2):
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=ep,
                warmup=ep == 0,
                wall_s=1.0,
                samples=10,
                ttfb_s=0.1,
                data_wait_s=0.1,
                h2d_s=0.0,
                compute_s=0.8,
                n_steps=1,
                steps=[[0, 0.1, 0.0, 0.8, 0.9]],
            )
        rl.write("end", status="done", error=None)
    ingest_run(runs / run_id, db=db)


def test_explore_tells_runs_of_changed_code_apart(store):
    from engine.store import explore_summary  # noqa: PLC0415

    _stored_run(store.parent / "runs", "a", "1" * 64, store)
    _stored_run(store.parent / "runs", "b", "2" * 64, store)
    row = explore_summary("loader", db=store).iloc[0]
    assert row["n"] == 2 and row["n_configs"] == 2 and "code_hash" in row["differs"]


def test_speedups_never_pair_runs_of_different_code():
    import pandas as pd  # noqa: PLC0415

    from engine.analysis.stats import speedup_vs_sequential  # noqa: PLC0415

    base = RunConfig(workload="m:d", model="m:n").to_dict()
    rows = [
        {
            **base,
            "run_id": f"{mode}{h}{i}",
            "sweep_id": "s",
            "host_fingerprint": "h",
            "status": "done",
            "mode": mode,
            "n_models": 2 if mode == "fused" else 1,
            "code_hash": h,
            "devices": "[]",
            "samples_per_s": 100.0 * (2 if mode == "fused" else 1),
        }
        for mode in ("single", "fused")
        for h in ("x", "y")
        for i in range(2)
    ]
    rows = [r for r in rows if not (r["mode"] == "single" and r["code_hash"] == "y")]  # code y has no baseline
    out = speedup_vs_sequential(pd.DataFrame(rows)).set_index("code_hash")
    assert out.loc["x", "baseline_n"] == 2 and out.loc["y", "baseline_n"] == 0


def test_a_v2_store_gains_code_hash_with_a_backup(tmp_path):
    from engine.store import schema  # noqa: PLC0415

    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER, applied_at TIMESTAMP)")
        schema._v1(conn)
        schema._v2(conn)
        conn.execute("INSERT INTO schema_version VALUES (1, now()), (2, now())")
        conn.execute("ALTER TABLE runs DROP COLUMN code_hash")
        conn.execute("INSERT INTO runs (run_id, status) VALUES ('old', 'done')")
        schema.ensure_schema(conn, path)
        assert conn.execute("SELECT run_id, code_hash FROM runs").fetchall() == [("old", None)]
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (schema.SCHEMA_VERSION,)
    assert (tmp_path / "old.duckdb.bak-v2").exists()


# ---------------------------------------------------------------------------- the server's registered plugins


def test_registered_plugins_come_from_the_servers_file_only(tmp_path, monkeypatch):
    path = tmp_path / "plugins.toml"
    monkeypatch.setenv("LOADERLAB_PLUGINS", str(path))
    assert registered() == {}
    path.write_text('[my_images]\nworkload = "mypkg.data:build"\n[small-resnet]\nmodel = "mypkg.nets:resnet"\n')
    assert registered() == {
        "my_images": {"workload": "mypkg.data:build"},
        "small-resnet": {"model": "mypkg.nets:resnet"},
    }
    monkeypatch.setenv("LOADERLAB_PLUGINS", str(ROOT / "examples" / "own_pipeline" / "plugins.toml"))
    assert registered() == {"own_images": {"workload": EXAMPLE["workload"]}, "own_resnet": {"model": EXAMPLE["model"]}}
    monkeypatch.setenv("LOADERLAB_PLUGINS", str(path))
    for bad in ('[x]\nworkload = "not a spec"\n', '[x]\nloader = "a:b"\n', '[x]\nworkload = "a:b"\nmodel = "c:d"\n'):
        path.write_text(bad)
        with pytest.raises(ConfigError) as err:
            registered()
        assert err.value.field == "plugins" and str(path) in err.value.message


def test_preflight_is_silent_for_built_ins_and_the_example_sweep_is_valid():
    from engine.config import SweepConfig, load_toml  # noqa: PLC0415

    assert preflight(RunConfig()) == {}
    sweep = SweepConfig.from_dict(load_toml(ROOT / "examples" / "own_pipeline" / "sweep.toml"))
    assert {c.loader for c in sweep.configs()} == {"sync", "prefetch", "threads", "processes"}
    assert all(c.workload == EXAMPLE["workload"] for c in sweep.configs())


@pytest.mark.parametrize("where", ["PYTHONPATH", "current directory"])
def test_the_users_module_is_found_from_pythonpath_or_the_current_directory(store, tmp_path, where):
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    name = f"mine_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}" if where == "PYTHONPATH" else str(ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "run",
            "--workload",
            f"{name}:data",
            "--model",
            f"{name}:net",
            "--n-samples",
            "16",
            "--image-size",
            "8",
            "--batch-size",
            "8",
            "--epochs",
            "2",
            "--no-bound",
            "--db",
            str(store),
        ],
        cwd=tmp_path if where == "current directory" else ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    with duckdb.connect(str(store), read_only=True) as conn:
        assert conn.execute("SELECT status, workload FROM runs").fetchall() == [("done", f"{name}:data")]
