"""Preflight under a time limit: plugins that exit, hang or crash are named on one line, and nothing is left behind.

.venv/bin/python -m pytest tests/engine/test_preflight.py -q
"""

from __future__ import annotations

import importlib
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb
import psutil
import pytest

from engine.config import ConfigError, RunConfig
from engine.run.preflight import TIMEOUT_ENV, preflight, time_limit

from tests._cli import cli_in_process

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = """
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__)


class Tiny(torch.utils.data.Dataset):
    num_classes = 3

    def __init__(self, item=None):
        self.item = item

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if self.item and i:  # item 0 is read when the dataset is built; the others by the batch
            self.item()
        return torch.zeros(3, 8, 8), i % 3


def _pid():
    HERE.with_suffix(".pid").write_text(str(os.getpid()))


def _count():
    with open(HERE.with_suffix(".calls"), "a") as fh:
        fh.write("x")


def data(**_):
    _count()
    return Tiny()

def exits_0(**_):
    sys.exit(0)

def exits_3(**_):
    sys.exit(3)

def hard_exit(**_):
    os._exit(7)

def sleeps(**_):
    _pid()
    time.sleep(3600)

def spins(**_):
    _pid()
    while True:
        pass

def slow_items(**_):
    return Tiny(item=lambda: time.sleep(3600))

def exiting_items(**_):
    return Tiny(item=lambda: sys.exit(5))

def _in_the_run():
    marker = HERE.with_suffix(".called")
    if marker.exists():
        return True
    marker.write_text("preflight")  # the first call is preflight's; the run's comes after
    return False

def exits_in_the_run(**_):
    if _in_the_run():
        sys.exit(3)
    return Tiny()

def item_exits_in_the_run(**_):
    return Tiny(item=lambda: sys.exit(4)) if _in_the_run() else Tiny()

def net(in_shape, num_classes, **_):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes))

class Stuck(nn.Module):
    def forward(self, x):
        time.sleep(3600)

def stuck_net(**_):
    return Stuck()
"""


@pytest.fixture(scope="module", autouse=True)
def plugin_dir(tmp_path_factory, request) -> Iterator[Path]:
    """One folder on PYTHONPATH for the whole module, set before the warm parent starts: a run launched in this
    process (main()) forks from it (tests/conftest.py warm_runs); the cold CLI processes find the plugins too."""
    folder = tmp_path_factory.mktemp("preflight")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        mp.setenv("PYTHONPATH", f"{folder}{os.pathsep}{ROOT}")
        # NOTE: after PYTHONPATH is set: a parent started with another one would refuse every run (it starts cold)
        request.getfixturevalue("warm_runs")
        yield folder


@pytest.fixture
def plug(plugin_dir) -> str:
    """A fresh plugin module (its .pid and .calls files beside it), importable by the CLI, the preflight child and
    the run child."""
    name = f"hostile_{secrets.token_hex(4)}"
    (plugin_dir / f"{name}.py").write_text(PLUGIN)
    importlib.invalidate_caches()
    return name


def cli(*args: str, db: Path, **env: str) -> subprocess.CompletedProcess:
    """A real `python -m engine`: for the tests whose point is the process's own exit status once a plugin exits or
    hangs; the others call main() here (tests/_cli.py), their runs forked warm."""
    return subprocess.run(
        [sys.executable, "-m", "engine", *args, "--db", str(db)],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_args(plug: str, workload: str, model: str = "net") -> list[str]:
    return [
        "run",
        "--workload",
        f"{plug}:{workload}",
        "--model",
        f"{plug}:{model}",
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
    ]


def one_line(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def nothing_stored(store: Path) -> bool:
    runs = store.parent / "runs"
    return not (runs.exists() and any(runs.iterdir()))


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ---------------------------------------------------------------------------- plugins that exit


@pytest.mark.parametrize("workload, code", [("exits_0", "0"), ("exits_3", "3")])
def test_a_factory_that_calls_sys_exit_is_that_plugins_error(plug, store, workload, code):
    """It used to end the CLI with its own status and no word (0 read as success)."""
    out = cli(*run_args(plug, workload), db=store)
    line = one_line(out)
    assert out.returncode == 2, out.stderr
    assert line.startswith("error: workload: ") and f"'{plug}:{workload}'" in line and f"sys.exit({code})" in line
    assert nothing_stored(store)


def test_a_plugin_that_ends_the_process_is_named_with_what_it_was_doing(plug, store):
    out = cli(*run_args(plug, "hard_exit"), "--dry-run", db=store)
    line = one_line(out)
    assert out.returncode == 2 and line.startswith("error: workload: "), out.stderr
    assert f"'{plug}:hard_exit'" in line and "exit status 7" in line and "built the dataset" in line


def test_an_item_that_calls_sys_exit_names_the_dataset_and_the_item(plug):
    cfg = RunConfig.from_dict(
        {"workload": f"{plug}:exiting_items", "model": f"{plug}:net", "n_samples": 16, "image_size": 8, "batch_size": 8}
    )
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    assert err.value.field == "workload" and f"'{plug}:exiting_items' (dataset)" in err.value.message
    assert "sys.exit(5)" in err.value.message and "read item" in err.value.message


@pytest.mark.parametrize(
    "workload, words",
    [
        ("exits_in_the_run", "called sys.exit(3) while building the dataset"),
        ("item_exits_in_the_run", "sys.exit(4)"),
    ],
)
def test_a_plugin_that_exits_only_in_the_run_fails_the_run_with_that_message(plug, store, workload, words):
    """Preflight passed; the run child meets the exit: a failed run saying so, not a process that vanished."""
    out = cli_in_process(*run_args(plug, workload), db=store)
    assert out.returncode == 1, out.stderr
    assert words in out.stderr and "exit status" not in out.stderr, out.stderr
    with duckdb.connect(str(store), read_only=True) as conn:
        status, error = conn.execute("SELECT status, error FROM runs").fetchone()
    assert status == "failed" and words in error


# ---------------------------------------------------------------------------- plugins that hang


def test_a_factory_that_sleeps_forever_is_stopped_and_named(plug, store, plugin_dir):
    out = cli(*run_args(plug, "sleeps"), "--preflight-timeout", "2", db=store)
    line = one_line(out)
    assert out.returncode == 2, out.stderr
    assert line.startswith("error: workload: ") and f"plugin '{plug}:sleeps' (dataset factory)" in line
    assert "did not return within 2 s while preflight built the dataset" in line and "--preflight-timeout" in line
    assert gone(int((plugin_dir / f"{plug}.pid").read_text()))
    assert nothing_stored(store)


def test_the_time_limit_comes_from_the_environment_for_every_launcher(plug, store, tmp_path):
    """A sweep (and the job worker, which has no flags) reads LOADERLAB_PREFLIGHT_TIMEOUT_S."""
    toml = tmp_path / "s.toml"
    toml.write_text(
        f'name = "hang"\n[base]\nn_samples = 16\nimage_size = 8\nbatch_size = 8\nepochs = 2\n'
        f'model = "{plug}:net"\n[grid]\nworkload = ["{plug}:data", "{plug}:slow_items"]\n'
    )
    out = cli_in_process("sweep", str(toml), "--quiet", db=store, env={TIMEOUT_ENV: "2"})
    line = out.stderr.strip().splitlines()[-1]  # (after the line that says the sweep's size)
    assert out.returncode == 2 and f"plugin '{plug}:slow_items' (dataset) did not return within 2 s" in line, line
    assert "read item" in line and nothing_stored(store)


def test_a_long_lived_launcher_keeps_no_stuck_thread_or_process(plug, plugin_dir):
    """The job worker and the dashboard live on after a hung plugin: the check ran elsewhere and was killed, and a
    factory that spins holding the GIL costs this process nothing."""
    cfg = RunConfig.from_dict(
        {"workload": f"{plug}:spins", "model": f"{plug}:net", "n_samples": 16, "image_size": 8, "batch_size": 8}
    )
    threads = threading.active_count()
    with pytest.raises(ConfigError, match=f"plugin '{plug}:spins' .* did not return within 1.5 s"):
        preflight(cfg, timeout_s=1.5)
    pid = int((plugin_dir / f"{plug}.pid").read_text())
    assert pid != os.getpid() and gone(pid) and threading.active_count() == threads
    assert f"{plug}" not in sys.modules  # the user's module never ran in the launcher


def test_a_model_whose_forward_hangs_is_named(plug):
    cfg = RunConfig.from_dict(
        {"workload": f"{plug}:data", "model": f"{plug}:stuck_net", "n_samples": 16, "image_size": 8, "batch_size": 8}
    )
    with pytest.raises(ConfigError) as err:
        preflight(cfg, timeout_s=2)
    assert err.value.field == "model" and f"plugin '{plug}:stuck_net' (model)" in err.value.message
    assert "while preflight ran the model on a batch" in err.value.message


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon", "1e9"])
def test_a_bad_time_limit_is_one_line_naming_it(store, monkeypatch, value):
    out = cli_in_process("run", "--dry-run", "--preflight-timeout", value, db=store)
    assert out.returncode == 2 and one_line(out).startswith("error: preflight_timeout: "), out.stderr
    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(ConfigError) as err:
        time_limit()
    assert err.value.field == TIMEOUT_ENV


# ---------------------------------------------------------------------------- what passed is kept


def test_a_check_that_passed_is_kept_until_the_code_changes(plug, plugin_dir):
    """A sweep checks each config once, and the job worker once per code change: the factory runs again only when
    its file changed."""
    cfg = RunConfig.from_dict(
        {"workload": f"{plug}:data", "model": f"{plug}:net", "n_samples": 16, "image_size": 8, "batch_size": 8}
    )
    calls = plugin_dir / f"{plug}.calls"
    first = preflight(cfg)
    assert preflight(cfg.replace(loader="threads", workers=2, epochs=5)) == first  # delivery fields: the same check
    assert calls.read_text() == "x"
    module = plugin_dir / f"{plug}.py"
    module.write_text(module.read_text() + "\n# edited\n")
    edited = preflight(cfg)
    assert calls.read_text() == "xx" and edited["code_hash"] != first["code_hash"]
