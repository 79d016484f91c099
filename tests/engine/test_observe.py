"""The user's own loop, observed (engine/observe/, engine/run/observed.py), with a plain PyTorch script that knows
nothing of LoaderLab (observed/train_script.py): a training loader with two worker processes and a validation
loader iterated between two training steps.

Both ways in store a run per loader from real subprocesses, real DataLoader workers and a real store: `observe`
runs the script unchanged, `watch()` is the script with one line changed. Each reads the DataLoader's settings
into the lab's fields, keeps the two loaders apart, and counts fetches, never the StopIteration that ends an epoch.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
import torch
from torch.utils.data import DataLoader

from engine.advice import baseline_of_run, resolve_baseline
from engine.advice.baseline import parse as parse_baseline
from engine.advice.tune import tune
from engine.measure import VERDICTS
from engine.observe._settings import read_settings
from tests._cli import cli_in_process

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "engine" / "observed" / "train_script.py"


def _env(store: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "LOADERLAB_DB": str(store)}


def observe(store: Path, *args: str, name: str | None = None) -> subprocess.CompletedProcess:
    named = ["--name", name] if name else []
    return subprocess.run(
        [sys.executable, "-m", "engine", "observe", *named, "--", sys.executable, *args],
        cwd=ROOT,
        env=_env(store),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _line_of(script: Path, text: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if line.lstrip().startswith(text))


def _runs(store: Path, names: dict[int, str]) -> dict[str, dict]:
    """The stored runs by name ('train', 'val': `names` maps the line in their observed_stream), with their epochs."""
    with duckdb.connect(str(store), read_only=True) as conn:
        cur = conn.execute("SELECT * FROM runs")
        rows = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
        for row in rows:
            cur = conn.execute("SELECT * FROM epochs WHERE run_id = ? ORDER BY epoch", [row["run_id"]])
            row["epochs"] = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
    return {names[int(r["observed_stream"].rsplit(":", 1)[1])]: r for r in rows}


def _by_loader_line(store: Path) -> dict[str, dict]:
    return _runs(
        store, {_line_of(SCRIPT, "train = DataLoader("): "train", _line_of(SCRIPT, "val = DataLoader("): "val"}
    )


def _check_two_streams(runs: dict[str, dict], epochs: int) -> None:
    """What both ways in must store from the script: see the module doc."""
    assert set(runs) == {"train", "val"}
    train, val = runs["train"], runs["val"]
    assert {train["source"], val["source"]} == {"observed"}
    # the DataLoader's settings, in the lab's own fields
    assert (train["loader"], train["workers"], train["batch_size"], train["prefetch_depth"]) == ("processes", 2, 32, 3)
    assert train["persistent_workers"] is True and train["n_samples"] == 256 and train["threads"] >= 1
    assert (val["loader"], val["workers"], val["batch_size"], val["n_samples"]) == ("sync", 0, 16, 64)
    settings = json.loads(train["observed_settings"])
    assert settings["num_workers"] == 2 and settings["dataset_class"].endswith(":Squares")
    assert settings["unmapped"] == []
    # one epoch per pass; fetches are batches, the StopIteration ending a pass is none of them
    assert [e["n_steps"] for e in train["epochs"]] == [8] * epochs  # 256 / 32
    assert [e["n_steps"] for e in val["epochs"]] == [4] * epochs  # 64 / 16, one pass per training epoch
    assert [e["samples"] for e in train["epochs"]] == [256] * epochs
    # the validation pass ran inside a training step, and is left out of it: the training epoch's wall time holds
    # its waits, its steps and the validation pass, once
    for t, v in zip(train["epochs"], val["epochs"]):
        assert t["wall_s"] - t["data_wait_s"] - t["compute_s"] >= 0.9 * v["wall_s"] > 0
    assert train["epoch_s"] is not None and train["peak_rss_bytes"] > 0
    assert {e["gpu_idle_s"] for e in train["epochs"]} == {None}  # on the CPU: not measured, never 0


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The script observed once, 2 epochs: (its store, the observe command's result)."""
    store = tmp_path_factory.mktemp("observed") / "s.duckdb"
    return store, observe(store, str(SCRIPT), "--epochs", "2", name="mine")


def test_observe_stores_each_dataloader_of_an_unchanged_script_as_its_own_run(observed):
    store, out = observed
    assert out.returncode == 0, out.stderr
    assert "epoch 1 loss" in out.stdout  # the script's own output, untouched
    runs = _by_loader_line(store)
    _check_two_streams(runs, epochs=2)
    assert {r["status"] for r in runs.values()} == {"done"} and {r["tag"] for r in runs.values()} == {"mine"}


def test_watch_with_one_line_changed_stores_the_same_runs(tmp_path):
    text = SCRIPT.read_text().replace("import torch\n", "import torch\nfrom engine import watch\n", 1)
    text = text.replace("enumerate(train)", "enumerate(watch(train))").replace("in val)", "in watch(val))")
    script = tmp_path / "watched.py"
    script.write_text(text)
    store = tmp_path / "s.duckdb"
    out = subprocess.run(
        [sys.executable, str(script), "--epochs", "2"],
        cwd=tmp_path,
        env=_env(store),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    # watch() names a run by where it was called
    runs = _runs(
        store,
        {
            _line_of(script, "for step, (x, y) in enumerate(watch(train))"): "train",
            _line_of(script, "correct = sum("): "val",
        },
    )
    _check_two_streams(runs, epochs=2)
    assert {r["status"] for r in runs.values()} == {"done"}


def test_the_scripts_exit_status_passes_through(tmp_path):
    store = tmp_path / "s.duckdb"
    out = observe(store, str(SCRIPT), "--epochs", "1", "--workers", "0", "--exit-code", "3")
    assert out.returncode == 3, out.stderr
    runs = _by_loader_line(store)
    assert runs["train"]["status"] == "failed" and "exited with status 3" in runs["train"]["error"]
    assert runs["train"]["n_epochs"] == 1  # the epochs it finished are kept


def test_a_script_that_raises_keeps_the_epochs_it_finished(tmp_path):
    store = tmp_path / "s.duckdb"
    out = observe(store, str(SCRIPT), "--epochs", "3", "--workers", "0", "--fail-at-epoch", "1")
    assert out.returncode == 1 and "RuntimeError: diverged at epoch 1" in out.stderr
    train = _by_loader_line(store)["train"]
    assert train["status"] == "failed" and train["error"].startswith("RuntimeError: diverged at epoch 1")
    assert [e["epoch"] for e in train["epochs"]] == [0]  # epoch 1, in flight, is lost as a kill would lose it
    assert train["epoch_s"] is not None  # a run of one finished epoch has no warm-up to leave out


def test_the_script_process_imports_only_the_observer_and_torch_only_when_the_script_does(tmp_path):
    code = (
        "import sys\n"
        "early = sorted(m for m in sys.modules if m == 'torch' or m.startswith('engine'))\n"
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "n = sum(len(b) for b in DataLoader(list(range(10)), batch_size=4))\n"
        "print(early, n, sorted(m for m in sys.modules if m.startswith('engine')))\n"
    )
    out = observe(tmp_path / "s.duckdb", "-c", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("[] 10 "), out.stdout  # no torch, no LoaderLab before the script's own imports
    loaded = eval(out.stdout.strip().removeprefix("[] 10 "))  # noqa: S307 - our own child's print of a list
    allowed = (
        "engine",
        "engine.observe",
        "engine.runlog",
        "engine.errors",
        "engine.status",
        "engine.paths",
        "engine.measure",
        "engine.measure.host",
        "engine.measure.idle",
        "engine.measure.sampler",
        "engine.measure.nvml",
    )
    assert "engine.observe._stream" in loaded  # the check sees the observer
    assert [m for m in loaded if not m.startswith(allowed)] == []
    assert not [m for m in loaded if m.startswith(("engine.store", "engine.config", "engine.registry"))]


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ([], "command: nothing to observe"),
        (["python", "no_such_train.py"], "no_such_train.py' was not found"),
        (["bash", "train.sh"], "is not a Python interpreter"),
    ],
)
def test_bad_commands_get_one_line_and_exit_2(tmp_path, monkeypatch, command, says):
    store = tmp_path / "s.duckdb"
    monkeypatch.setenv("LOADERLAB_DB", str(store))
    out = cli_in_process("observe", "--", *command, cwd=tmp_path)  # refused before any process starts
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr
    assert not store.exists()


def test_settings_that_map_go_to_the_labs_fields_and_the_others_are_named():
    ds = list(range(100))
    config, settings = read_settings(
        DataLoader(
            ds, batch_size=10, num_workers=3, multiprocessing_context="spawn", worker_init_fn=print, pin_memory=True
        )
    )
    assert config == {
        "mode": "single",
        "threads": torch.get_num_threads(),
        "n_samples": 100,
        "loader": "processes",
        "workers": 3,
        "pin_memory": True,
        "batch_size": 10,
        "persistent_workers": False,
        "start_method": "spawn",
        "prefetch_depth": 2,
    }
    assert settings["unmapped"] == ["worker_init_fn: builtins:print"]
    config, settings = read_settings(DataLoader(ds, batch_size=None))
    assert config["loader"] == "sync" and "batch_size" not in config
    assert "batch_size: set by a batch sampler without a batch_size" in settings["unmapped"]
    config, settings = read_settings(iter(ds))  # not a DataLoader: nothing maps, and the run says so
    assert "loader" not in config and settings["unmapped"][0].startswith("loader: not a torch.utils.data.DataLoader")


class _SlowItems(torch.utils.data.Dataset):
    """Items that take 1 ms each to read: a sync loader keeps the GPU waiting on data."""

    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.full((64,), float(i)), i % 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_gpu_idle_and_its_data_wait_part_are_measured(store):
    """Events at the loop's boundaries, read once per epoch: the GPU's gaps, most of them waiting for data."""
    from engine import watch
    from engine.store import get_epochs

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(_SlowItems(), batch_size=32)
    watched = watch(loader, db=store)
    for _ in range(2):
        for x, y in watched:
            loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
    watched.close()
    run_id = _runs_raw(store)[0]["run_id"]
    for e in get_epochs(run_id, db=store).to_dict("records"):
        assert e["gpu_idle_s"] > 0
        assert e["gpu_idle_copy_s"] is None or math.isnan(e["gpu_idle_copy_s"])  # the loop's copies are not seen
        assert e["gpu_idle_data_s"] + e["gpu_idle_other_s"] == pytest.approx(e["gpu_idle_s"], rel=1e-6)
        assert e["gpu_idle_data_s"] > 0.5 * e["gpu_idle_s"]  # 32 ms of reads per step, well under 1 ms of compute


def _runs_raw(store: Path) -> list[dict]:
    with duckdb.connect(str(store), read_only=True) as conn:
        cur = conn.execute("SELECT * FROM runs")
        return [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]


# ---------------------------------------------------------------------------- from observation to answer


def test_an_observed_run_is_the_baseline_its_loader_settings_say(observed):
    store, _ = observed
    train = _by_loader_line(store)["train"]
    assert baseline_of_run(train["run_id"], db=store) == parse_baseline(
        "loader=processes,workers=2,prefetch_depth=3,start_method=fork,persistent_workers=true,pin_memory=false,"
        "batch_size=32"
    )
    assert resolve_baseline(None, train["run_id"], db=store) == baseline_of_run(train["run_id"], db=store)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["advise", "--baseline-run", "no-such-run"], "baseline_run: no run 'no-such-run' in the store"),
        (["tune", "--budget", "1s", "--baseline-run", "x", "--baseline", "loader=sync"], "not both"),
    ],
)
def test_a_bad_baseline_run_gets_one_line_and_exit_2(observed, argv, says):
    store, _ = observed
    out = cli_in_process(*argv, db=store)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, out.stderr


@pytest.mark.slow
def test_predict_shows_the_observed_setting_beside_what_was_observed(observed):
    store, _ = observed
    train = _by_loader_line(store)["train"]
    out = cli_in_process(
        "predict",
        "--workload",
        "tensor",
        "--model",
        "mlp",
        "--image-size",
        "8",
        "--width",
        "8",
        "--device",
        "cpu",
        "--baseline-run",
        train["run_id"],
        db=store,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("processes, 2 workers, depth 3, batch 32"), out.stdout  # the observed setting
    assert f"observed ({train['run_id']}" in out.stdout and "predicted / observed" in out.stdout


@pytest.mark.slow
def test_tune_from_an_observed_run_answers_with_a_95_interval(observed):
    """The observed setting is candidate 0, re-run by the lab on the workload named, and the best is confirmed
    against it with interleaved runs: the answer has its 95 % interval."""
    store, _ = observed
    train = _by_loader_line(store)["train"]
    tiny = {"n_samples": 256, "image_size": 8, "width": 8, "device": "cpu", "sample_hz": 0.0}
    result = tune(
        "tensor",
        "mlp",
        budget_s=1800,
        db=store,
        base=tiny,
        progress=False,
        space=[{"loader": "sync"}],
        baseline=resolve_baseline(None, train["run_id"], db=store),
    )
    yours = result.configs[0]
    assert (yours.loader, yours.workers, yours.prefetch_depth, yours.batch_size) == ("processes", 2, 3, 32)
    text = result.render()
    assert "your setup (processes, 2 workers, depth 3, batch 32" in text
    if result.best_idx != 0:  # the best is another setting: confirmed against yours, with its interval
        assert "95% CI" in text and not math.isnan(result.comparison["speedup_lo"]), text
    else:
        assert "your setup (processes, 2 workers, depth 3, batch 32) was the fastest measured" in text


SLOW = ROOT / "tests" / "engine" / "observed" / "slow_items.py"


def test_observe_returns_with_its_runs_and_those_that_waited_stored_each_with_a_verdict_and_a_bound(observed, tmp_path):
    """Items that wait ~3 ms each, num_workers=0: the run is stored when observe returns, with the lab's verdict
    (the data wait dominates the loop), a bound no larger than its epoch and what to change; a RunLog that
    waited for this store (another run's, not yet stored) is stored by the same command."""
    from engine.runlog import claim
    from engine.store import pending_summary

    store = tmp_path / "s.duckdb"
    waited = next((observed[0].parent / "runs").glob("obs-*"))
    copy = tmp_path / "runs" / waited.name
    copy.mkdir(parents=True)
    (copy / "events.jsonl").write_bytes((waited / "events.jsonl").read_bytes())
    claim(copy, store)
    out = observe(store, str(SLOW), "--epochs", "3")
    assert out.returncode == 0, out.stderr
    assert "checkpoint saved" in out.stdout  # observe is no trial: the script's own output
    assert pending_summary(store)["count"] == 0 and "waiting to be stored" not in out.stderr
    with duckdb.connect(str(store), read_only=True) as conn:
        cur = conn.execute("SELECT * FROM runs ORDER BY run_id")
        rows = {r[0]: dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()}
    assert waited.name in rows
    (run,) = [r for k, r in rows.items() if k != waited.name]
    # the loop loads and steps in turn: data-bound, or no-overlap where the step is a tenth of it or more; on a
    # machine busy enough that a fifth of the epoch fell outside the loop's own wait and step, overhead-bound says so
    seen = {k: run[k] for k in ("verdict", "efficiency", "bound_s", "epoch_s", "steady_cpu_pct", "bound_note")}
    assert run["verdict"] in (("data-bound", "no-overlap") if run["efficiency"] >= 0.8 else ("overhead-bound",)), seen
    assert 0 < run["bound_s"] <= run["epoch_s"] * 1.0001 and 0.5 <= run["efficiency"] <= 1.0
    assert "num_workers=0 on" in run["verdict_help"]
    assert "workers" in run["verdict_help"].split(" (the DataLoader at")[0] or run["verdict"] == "overhead-bound"
    assert "outside the loop" in run["bound_note"] and run["usable_cores"] >= 1
    assert f"{run['verdict']} · bound {run['bound_s']:.3f} s" in out.stderr  # the CLI says it when observe returns
    # the lab's verdict on the training loader of the two-loader fixture too, not only on a sync loop
    with duckdb.connect(str(observed[0]), read_only=True) as conn:
        fixture = conn.execute(
            "SELECT verdict, bound_s, verdict_help, bound_note FROM runs WHERE source = 'observed'"
        ).fetchall()
    assert len(fixture) == 2
    for verdict, bound_s, help_, note in fixture:
        assert verdict in VERDICTS and bound_s > 0 and help_, note
