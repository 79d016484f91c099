"""Limits that know the host: ranks, workers and models against this machine's usable cores and memory, checked
in one place by every launcher. Values are relative to the host the test runs on (2-core CI, 16-core GPU box).

    .venv/bin/python -m pytest tests/engine/test_hostfit.py -q
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import psutil
import pytest
import torch

from engine.config import ConfigError, RunConfig
from engine.jobs import list_jobs, submit, submit_sweep
from engine.paths import jobs_dir
from engine.run.hostfit import HEAVY, OVERSUBSCRIBE_ENV, available_memory, check_host, usable_cores
from engine.run.runner import launch
from tests._cli import cli_in_process

CORES = len(os.sched_getaffinity(0))  # at least the usable cores (a cgroup quota may allow fewer)
MANY = 8 * CORES  # ranks or workers: past HEAVY (4) x the usable cores on any host
needs_room = pytest.mark.skipif(MANY > 256, reason="8 x cores is past the schema's 256 workers on this host")


def cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    """The CLI's main() in this process (tests/_cli.py): these commands are refused or dry runs, whose point is what
    they print and store, not how a process starts (tests/engine/test_cli.py keeps real ones)."""
    return cli_in_process(*args, db=db)


def lines(text: str) -> list[str]:
    return text.strip().splitlines()


def nothing_stored(store: Path) -> bool:
    runs = store.parent / "runs"
    return not (runs.exists() and any(runs.iterdir()))


def too_big_for_memory() -> list[str]:
    """A fused run on the CPU whose models' weights alone are twice the memory available now."""
    with torch.device("meta"):
        from engine.models import MODELS  # noqa: PLC0415

        params = sum(p.numel() for p in MODELS["mlp"]((3, 256, 256), 10, 4096, 1).parameters())
    n_models = math.ceil(2 * psutil.virtual_memory().available / (4 * params))
    assert n_models <= 4096, "a host with this much memory needs a bigger model here"
    return [
        "--mode",
        "fused",
        "--device",
        "cpu",
        "--n-models",
        str(n_models),
        "--image-size",
        "256",
        "--width",
        "4096",
        "--depth",
        "1",
    ]


def test_the_limits_are_this_hosts():
    assert 1 <= usable_cores() <= CORES
    assert 0 < available_memory() <= psutil.virtual_memory().total


# ---------------------------------------------------------------------------- the CLI


def test_ranks_far_past_the_cores_are_refused_in_one_line_unless_insisted_on(store):
    """64 ranks on 2 cores ran 141 s on 14 GB and were stored as done."""
    args = ["run", "--mode", "ddp", "--world-size", str(MANY), "--device", "cpu", "--dry-run"]
    out = cli(*args, db=store)
    assert out.returncode == 2 and len(lines(out.stderr)) == 1, out.stderr
    assert out.stderr.startswith("error: world_size: ") and "oversubscribed" in out.stderr
    assert "--oversubscribe" in out.stderr and f"{usable_cores()} usable cores" in out.stderr
    insisted = cli(*args, "--oversubscribe", db=store)
    assert insisted.returncode == 0, insisted.stderr
    assert lines(insisted.stderr) and lines(insisted.stderr)[0].startswith("warning: world_size: ")
    assert json.loads(insisted.stdout)["world_size"] == MANY


def test_oversubscription_within_reason_is_a_warning_and_runs(store):
    out = cli("run", "--mode", "ddp", "--world-size", str(usable_cores() + 1), "--device", "cpu", "--dry-run", db=store)
    assert out.returncode == 0, out.stderr
    assert [line for line in lines(out.stderr) if line.startswith("warning: ")] == [
        f"warning: world_size: {usable_cores() + 1} parallel processes on this host's {usable_cores()} usable "
        "cores: they time-share the cores, so the run measures oversubscription"
    ]


@needs_room
def test_worker_processes_count_per_rank_and_threads_do_not(store):
    out = cli("run", "--loader", "processes", "--workers", str(MANY), "--dry-run", db=store)
    assert out.returncode == 2 and out.stderr.startswith("error: workers: ") and len(lines(out.stderr)) == 1
    threads = cli("run", "--loader", "threads", "--workers", str(MANY), "--dry-run", db=store)
    assert threads.returncode == 0 and "warning" not in threads.stderr, threads.stderr


def test_models_that_cannot_fit_in_memory_are_refused_even_when_insisting(store):
    out = cli("run", *too_big_for_memory(), "--dry-run", "--oversubscribe", db=store)
    assert out.returncode == 2 and len(lines(out.stderr)) == 1, out.stderr
    assert out.stderr.startswith("error: n_models: this run needs at least ") and "available" in out.stderr


def test_a_sweep_with_one_config_the_host_cannot_run_is_refused_before_any_run(store, tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text(
        f'name = "ranks"\n[base]\nmode = "ddp"\ndevice = "cpu"\nn_samples = {4 * MANY}\n'
        f"image_size = 8\nepochs = 2\n[grid]\nworld_size = [1, {MANY}]\n"
    )
    out = cli("sweep", str(toml), "--quiet", db=store)
    assert out.returncode == 2 and lines(out.stderr)[-1].startswith("error: world_size: "), out.stderr
    assert nothing_stored(store)


# ---------------------------------------------------------------------------- the other launchers


def test_launch_refuses_before_any_runlog(store, monkeypatch):
    cfg = RunConfig.from_dict({"mode": "ddp", "world_size": MANY, "device": "cpu"})
    with pytest.raises(ConfigError) as err:
        launch(cfg, db=store)
    assert err.value.field == "world_size" and nothing_stored(store)
    monkeypatch.setenv(OVERSUBSCRIBE_ENV, "1")  # how the job worker and a notebook insist
    assert check_host(cfg) and check_host(cfg)[0].startswith("world_size: ")


def test_job_submit_refuses_and_keeps_the_insistence_for_the_worker(store):
    cfg = RunConfig.from_dict({"mode": "ddp", "world_size": MANY, "device": "cpu"})
    with pytest.raises(ConfigError, match="^world_size: .*oversubscribed"):
        submit(cfg, origin="cli", db=store)
    from engine.config import SweepConfig  # noqa: PLC0415

    with pytest.raises(ConfigError, match="^world_size: "):
        submit_sweep(
            SweepConfig.from_dict({"base": cfg.to_dict(), "grid": {"world_size": [1, MANY]}}), origin="cli", db=store
        )
    assert list_jobs(store).empty
    job_id = submit(cfg, origin="cli", db=store, oversubscribe=True)
    assert json.loads((jobs_dir(store) / f"{job_id}.json").read_text())["oversubscribe"] is True


def test_tune_refuses_a_base_the_host_cannot_run(store):
    from engine.advice.tune import tune  # noqa: PLC0415

    with pytest.raises(ConfigError, match="^world_size: "):
        tune(
            "tensor",
            "mlp",
            budget_s=5,
            db=store,
            base={"mode": "ddp", "world_size": MANY, "device": "cpu"},
            progress=False,
        )
    assert nothing_stored(store)


def test_heavy_is_a_multiple_of_the_cores_not_a_count():
    """The refusal scales with the host: HEAVY x cores ranks pass (with a warning), one more is refused."""
    cores = usable_cores()
    fits = RunConfig.from_dict({"mode": "ddp", "world_size": min(1024, HEAVY * cores), "device": "cpu"})
    assert check_host(fits, oversubscribe=False) or cores * HEAVY > 1024  # a warning: more ranks than cores
    if HEAVY * cores < 1024:
        with pytest.raises(ConfigError):
            check_host(fits.replace(world_size=HEAVY * cores + 1), oversubscribe=False)
