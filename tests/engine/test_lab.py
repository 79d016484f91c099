"""engine.lab end to end on a temporary store: real runs in subprocesses, the real DuckDB file; and the
checkout installed with pip into another environment, used from another directory."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from engine import lab
from engine.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "workload": "tensor",
    "model": "mlp",
    "n_samples": 64,
    "image_size": 8,
    "width": 8,
    "batch_size": 32,
    "device": "cpu",
    "sample_hz": 0.0,
    "epochs": 2,
}


def test_run_sweep_runs_compare_advise(store):
    s = lab.run(**TINY, loader="prefetch")
    assert s["status"] == "done" and s["stored"] and s["epoch_s"] > 0 and s["samples_per_s"] > 0
    assert {"efficiency", "verdict", "bound_s", "run_id"} <= set(s) and s["loader"] == "prefetch"
    df = lab.sweep(
        {"loader": ["sync", "threads"], "workers": [2]},
        repeats=1,
        progress=False,
        base={**TINY, "bound": False},
        db=store,
    )
    assert sorted(df["loader"]) == ["sync", "threads"] and set(df["status"]) == {"done"}
    assert df["sweep_id"].nunique() == 1
    everything = lab.runs()
    assert len(everything) == 3
    assert set(lab.runs(loader="threads")["run_id"]) == set(df[df.loader == "threads"].run_id)
    table = lab.compare(df["run_id"])
    fastest_first = sorted(df["loader"], key=lambda name: float(df[df.loader == name].epoch_s.iloc[0]))
    assert list(table["loader"]) == fastest_first
    assert table["n"].tolist() == [1, 1] and table["speedup"].iloc[-1] == pytest.approx(1.0)  # the slowest: 1x
    assert table["difference"].tolist() == ["no clear difference"] * 2  # one run each: no interval, and no claim
    by_query = lab.compare(f"SELECT run_id FROM runs WHERE sweep_id = '{df['sweep_id'].iloc[0]}'")
    assert by_query[["loader", "n"]].equals(table[["loader", "n"]])
    a = lab.advise(workload="tensor", model="mlp", baseline="loader=sync", host="any")
    assert a["best"]["loader"] in {"sync", "prefetch", "threads"} and a["reference"]["loader"] == "sync"
    assert a["n_runs"] == 3 and a["table"]["n"].sum() == 3 and a["text"].startswith("tensor + mlp")
    if a["best"]["loader"] != "sync":
        assert a["needs_confirmation"] and "[[points]]" in a["confirm_sweep_toml"]


def test_bad_input_raises_naming_the_field_and_stores_nothing(store):
    with pytest.raises(ConfigError) as err:
        lab.run(**TINY, loader="thread")
    assert err.value.field == "loader"
    with pytest.raises(ConfigError) as err:
        lab.sweep({"workers": [0]}, base={**TINY, "loader": "threads"}, progress=False)
    assert err.value.field == "workers"
    with pytest.raises(ConfigError) as err:
        lab.advise(workload="tensor", model="mlp", baseline="loader=threads,workers=-1")
    assert err.value.field == "baseline"
    with pytest.raises(ValueError, match="no run 'nope'"):
        lab.compare(["nope"])
    assert not store.exists() or lab.runs().empty
    assert lab.db_path() == str(store)


def test_store_is_the_checkouts_or_loaderlab_db_never_the_cwd(tmp_path, monkeypatch):
    monkeypatch.delenv("LOADERLAB_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert lab.db_path() == str(ROOT / "data" / "loaderlab.duckdb")
    assert lab.db_path(tmp_path / "x.duckdb") == str(tmp_path / "x.duckdb")


def test_pip_install_e_gives_the_loaderlab_command_and_the_import(tmp_path):
    """`pip install -e` of the checkout into another environment (offline: the build uses the pinned setuptools
    already installed), then the command and the import from another folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the dependencies (and pip, setuptools) are this environment's: a .pth makes them visible there
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            py,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-e",
            str(ROOT),
        ],
        check=True,
        cwd=tmp_path,
    )
    elsewhere = tmp_path / "notebooks"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOADERLAB_DB")}
    help_ = subprocess.run(
        [venv / "bin" / "loaderlab", "--help"], cwd=elsewhere, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "advise" in help_ and "sweep" in help_
    code = "from engine import lab; print(lab.db_path())"
    out = subprocess.run([py, "-c", code], cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(ROOT / "data" / "loaderlab.duckdb")
    mine = subprocess.run(
        [py, "-c", code],
        cwd=elsewhere,
        env={**env, "LOADERLAB_DB": str(tmp_path / "my.duckdb")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert mine.stdout.strip() == str(tmp_path / "my.duckdb")


def test_predict_ranks_the_settings_or_answers_one_and_opens_no_store(store):
    fields = {**TINY, "latency_ms": 2.0}
    ranked = lab.predict(**fields)
    assert {"loader", "workers", "threads", "predicted_epoch_s", "samples_per_s", "limit"} <= set(ranked.columns)
    assert len(ranked) >= 4 and (ranked["predicted_epoch_s"] > 0).all()
    assert ranked["predicted_epoch_s"].is_monotonic_increasing
    assert (ranked["samples_per_s"] * ranked["predicted_epoch_s"]).round(6).eq(64).all()  # one epoch's samples
    one = lab.predict(**fields, loader="threads", workers=2)
    assert len(one) == 1 and one.loc[0, "loader"] == "threads" and one.loc[0, "workers"] == 2
    assert not store.exists()
    with pytest.raises(ConfigError, match="mode"):
        lab.predict(**fields, mode="ddp")
