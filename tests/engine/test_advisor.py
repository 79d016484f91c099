"""engine.advice.advisor on a store seeded with synthetic runs of known epoch times."""

from __future__ import annotations

import json
import tomllib
from datetime import datetime

import pandas as pd
import pytest

from engine.advice.advisor import advise, render_advice
from engine.config import RunConfig
from engine.measure.host import fingerprint
from engine.store import connect

HOST = "h1"


def _seven(median: float) -> list[float]:
    """Seven runs around median (+-2%): enough for a 95% interval of a speedup (6 + 7 is the least)."""
    return [median * (1 + d) for d in (0.0, 0.01, -0.01, 0.02, -0.02, 0.005, -0.005)]


def _rows(
    epoch_s: list[float],
    *,
    host: str = HOST,
    verdict: str = "data-bound",
    mode: str = "single",
    cores: int = 8,
    **fields,
) -> list[dict]:
    cfg = RunConfig(
        **{"workload": "tensor", "model": "mlp", "n_samples": 256, "width": 8, "mode": mode, **fields}
    ).to_dict()
    cols = {k: (json.dumps(v) if isinstance(v, list) else v) for k, v in cfg.items()}
    return [
        {
            **cols,
            "run_id": f"{host}-{mode}-{fields}-{i}",
            "status": "done",
            "deleted": False,
            "created_at": datetime(2025, 1, 1, 0, i),
            "host_fingerprint": host,
            "torch_version": "2.13",
            "cores": cores,
            "config_json": json.dumps(cfg),
            "epoch_s": t,
            "verdict": verdict,
            "efficiency": 0.9,
        }
        for i, t in enumerate(epoch_s)
    ]


def _seed(db, rows: list[dict]) -> None:
    with connect(db, read_only=False) as conn:
        conn.register("seed_rows", pd.DataFrame(rows))
        conn.execute("INSERT INTO runs BY NAME SELECT * FROM seed_rows")
        conn.unregister("seed_rows")


@pytest.fixture
def seeded(store):
    _seed(
        store,
        _rows(_seven(2.0))  # sync: the default
        + _rows(_seven(1.2), loader="threads", workers=2)
        + _rows(_seven(0.8), loader="threads", workers=4)  # the best
        + _rows(_seven(1.0), loader="processes", workers=2)
        + _rows([0.10, 0.10, 0.10], loader="threads", workers=4, batch_size=512, host="h2")  # other host
        + _rows([0.30, 0.30, 0.30], loader="threads", workers=4, n_samples=64),
    )  # another problem, fewer runs
    return store


def test_best_config_speedup_and_neighbours(seeded):
    advice = advise("tensor", "mlp", host=HOST, db=seeded)
    assert advice.message is None
    assert advice.best["loader"] == "threads" and advice.best["workers"] == 4
    assert advice.default["loader"] == "sync"
    assert advice.problem["n_samples"] == 256 and advice.n_runs == 28
    c = advice.comparison
    assert c["speedup"] == pytest.approx(2.0 / 0.8, rel=0.02)
    assert 1.0 < c["speedup_lo"] <= c["speedup"] <= c["speedup_hi"] and c["difference"] == "B faster"
    assert advice.verdict == "data-bound" and advice.efficiency == pytest.approx(0.9)
    # data-bound: more workers, a deeper queue, the other pool kind; none measured yet
    assert [s.changes for s in advice.suggestions] == [{"workers": 8}, {"prefetch_depth": 4}, {"loader": "processes"}]
    text = render_advice(advice)
    assert "threads, 4 workers" in text and "2.50x" in text and "data-bound" in text and "workers=8" in text
    assert advice.warning is None and advice.tied == []
    assert "not yet distinguishable from the best" not in text and "7 times" in text


def test_configs_tied_with_the_best_are_listed(seeded):
    _seed(
        seeded,
        _rows([0.81, 0.79, 0.80, 0.82, 0.78, 0.80, 0.81], loader="processes", workers=4)
        + _rows([0.85, 0.95], loader="prefetch"),
    )  # 2 runs: too few to tell apart from the best
    advice = advise("tensor", "mlp", host=HOST, db=seeded)
    tied = {(t["loader"], t["workers"]) for t in advice.tied}
    assert ("processes", 4) in tied and ("prefetch", 0) in tied
    assert ("threads", 2) not in tied and ("sync", 0) not in tied
    assert "not yet distinguishable from the best (its interval spans 1" in render_advice(advice)


def test_two_core_host_already_data_bound_with_two_processes_gets_no_more_workers(store):
    _seed(store, _rows(_seven(2.0), cores=2) + _rows(_seven(1.0), loader="processes", workers=2, cores=2))
    advice = advise("tensor", "mlp", host=HOST, db=store)
    assert advice.best["loader"] == "processes" and advice.verdict == "data-bound" and advice.cores == 2
    changes = [s.changes for s in advice.suggestions]
    assert {"workers": 4} not in changes and changes[0] == {"prefetch_depth": 4}
    assert "workers=4" not in render_advice(advice)
    # the same runs on an 8-core host: doubling the processes is the first thing to try
    _seed(store, _rows(_seven(1.0), loader="processes", workers=2, cores=8, host="h8"))
    assert advise("tensor", "mlp", host="h8", db=store).suggestions[0].changes == {"workers": 4}


def test_measured_neighbours_are_not_proposed(seeded):
    _seed(seeded, _rows([0.85, 0.86, 0.84], loader="threads", workers=8))
    advice = advise("tensor", "mlp", host=HOST, db=seeded)
    assert advice.best["workers"] == 4
    assert {"workers": 8} not in [s.changes for s in advice.suggestions]
    assert advice.suggestions[0].changes == {"prefetch_depth": 4}


def test_verdict_sets_priorities(store):
    _seed(
        store,
        _rows([2.0, 2.0, 2.0], verdict="compute-bound")
        + _rows([1.0, 1.0, 1.0], loader="processes", workers=4, verdict="compute-bound"),
    )
    advice = advise("tensor", "mlp", host=HOST, db=store)
    changes = [s.changes for s in advice.suggestions]
    assert changes[0] == {"batch_size": 128}
    assert {"workers": 2} in changes


def test_next_sweep_toml_is_a_valid_sweep(seeded):
    from engine.config import SweepConfig

    advice = advise("tensor", "mlp", host=HOST, db=seeded)
    data = tomllib.loads(advice.next_sweep_toml())
    sweep = SweepConfig.from_dict(data)
    assert data["repeats"] == 7  # a confirmation: every config gets enough runs for a 95% interval
    assert data["base"]["n_samples"] == 256 and data["base"]["width"] == 8
    assert data["grid"]["workers"] == [4, 8] and data["grid"]["loader"] == ["threads", "processes"]
    cfgs = sweep.configs()
    assert {(c.loader, c.workers, c.prefetch_depth) for c in cfgs} >= {
        ("threads", 8, 2),
        ("threads", 4, 4),
        ("processes", 4, 2),
    }


def test_any_host_never_compares_across_fingerprints(seeded):
    advice = advise("tensor", "mlp", host="any", db=seeded)
    assert advice.problem["host_fingerprint"] == HOST and advice.n_runs == 28  # the most-measured fingerprint
    assert advice.best["batch_size"] == 64  # h2's faster run is another host's: not pooled, not compared
    assert "3 run(s) of this problem under 1 other host fingerprint(s) (h2: " in render_advice(advice)
    theirs = advise("tensor", "mlp", host="h2", db=seeded)
    assert theirs.best["batch_size"] == 512 and theirs.warning is None


def test_this_host_is_this_machine_whatever_threads_its_runs_had(store):
    """A run given --threads 1 has another fingerprint than the advising process, yet it ran on this machine."""
    me = fingerprint()
    facts = {**me, "intra_op_threads": me["intra_op_threads"] + 7, "fingerprint": "one-thread"}
    other_machine = {**me, "cpu_model": "another CPU", "fingerprint": "elsewhere"}
    _seed(
        store,
        [
            dict(r, host_json=json.dumps(facts), host_fingerprint="one-thread")
            for r in _rows(_seven(2.0), host="t") + _rows(_seven(1.0), host="t", loader="threads", workers=2)
        ]
        + [
            dict(r, host_json=json.dumps(other_machine), host_fingerprint="elsewhere")
            for r in _rows(_seven(0.1), host="e", loader="processes", workers=2)
        ],
    )
    advice = advise("tensor", "mlp", db=store)
    assert advice.message is None and advice.host_label == f"this host ({me['machine']})"
    assert advice.problem["host_fingerprint"] == "one-thread" and advice.best["loader"] == "threads"
    assert advice.n_runs == 14 and advice.warning is None  # the other machine's runs are not this host's


def test_this_host_and_empty_store(store):
    advice = advise("jpeg", "cnn", db=store)
    assert "no runs for jpeg+cnn on this host" in advice.message
    assert "python -m engine sweep examples/loaders.toml" in render_advice(advice)
    with pytest.raises(ValueError, match="no runs"):
        advice.next_sweep_toml()
    _seed(store, _rows([1.0, 1.0, 1.0]))  # runs on host h1 only: this host still has none
    assert "on other hosts: --host any" in advise("tensor", "mlp", db=store).message


# ---------------------------------------------------------------------------- the user's own setup as the baseline


def test_baseline_is_the_comparison_side_with_an_interval(seeded):
    advice = advise("tensor", "mlp", host=HOST, db=seeded, baseline="loader=processes,workers=2")
    assert advice.default["loader"] == "processes" and advice.default["workers"] == 2
    c = advice.comparison
    assert c["n_a"] == c["n_b"] == 7 and c["speedup"] == pytest.approx(1.0 / 0.8, rel=0.02)
    assert 1.0 < c["speedup_lo"] and c["difference"] == "B faster" and not advice.needs_confirmation
    text = render_advice(advice)
    assert "best is 1.25x faster than your setup (processes, 2 workers, depth 2, batch 64) (95% CI" in text
    assert "vs sync" not in text and "confirm it" not in text


def test_baseline_with_too_few_runs_proposes_the_confirmation_sweep(seeded):
    from engine.config import SweepConfig

    _seed(seeded, _rows([1.5, 1.6], loader="processes", workers=4, batch_size=64))
    advice = advise("tensor", "mlp", host=HOST, db=seeded, baseline={"loader": "processes", "workers": 4})
    assert advice.comparison["n_a"] == 2 and advice.needs_confirmation
    text = render_advice(advice)
    assert "by the medians, no clear difference (no interval: 2 runs" in text
    assert "--baseline loader=processes,workers=4 --write-confirm" in text
    sweep = SweepConfig.from_dict(tomllib.loads(advice.confirm_sweep_toml()))
    assert sweep.repeats == 7 and sweep.base["n_samples"] == 256
    assert [(c.loader, c.workers) for c in sweep.configs()] == [("processes", 4), ("threads", 4)]  # only those two
    # never measured at all: said so, and the same sweep measures it
    unmeasured = advise("tensor", "mlp", host=HOST, db=seeded, baseline="loader=threads,workers=16")
    assert "no stored runs for this problem yet" in render_advice(unmeasured) and unmeasured.needs_confirmation


def test_baseline_that_is_the_best_says_so(seeded):
    advice = advise("tensor", "mlp", host=HOST, db=seeded, baseline="loader=threads,workers=4,batch_size=64")
    assert advice.default == advice.best and not advice.needs_confirmation
    assert "your setup (threads, 4 workers, depth 2, batch 64) is the fastest measured config" in render_advice(advice)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("loader=processes,workers", "is not FIELD=VALUE"),
        ("workers=4", "name your loader"),
        ("loader=processes,model=mypkg.nets:net", "'model' is not a loader setting"),
        ("loader=procs", "loader: 'procs' is unknown"),
        ("loader=threads,workers=0", "workers: loader 'threads' needs workers >= 1"),
        ("loader=sync,batch_size=lots", "batch_size: expected int"),
    ],
)
def test_bad_baseline_is_one_error_naming_baseline(store, text, says):
    from engine.config import ConfigError

    with pytest.raises(ConfigError) as err:
        advise("tensor", "mlp", db=store, baseline=text)
    assert err.value.field == "baseline" and says in str(err.value)


def test_the_users_setup_matches_its_real_runs_as_stored(store):
    """Real runs store what took effect (no pinning on a CPU, the fields a loader ignores normalised); a baseline
    typed with the defaults (pin_memory on) must still find them."""
    from engine.run.runner import launch  # noqa: PLC0415

    tiny = {
        "workload": "tensor",
        "model": "mlp",
        "n_samples": 64,
        "image_size": 8,
        "width": 8,
        "epochs": 2,
        "batch_size": 32,
        "bound": False,
        "sample_hz": 0.0,
        "device": "cpu",
    }
    for loader in ("sync", "threads"):
        cfg = RunConfig.from_dict({**tiny, "loader": loader, "workers": 1 if loader == "threads" else 0})
        assert launch(cfg, db=store).status == "done"
    advice = advise("tensor", "mlp", db=store, baseline="loader=sync,prefetch_depth=8,batch_size=32")
    assert advice.problem["device"] == "cpu" and advice.default["pin_memory"] is False
    assert {advice.comparison["n_a"], advice.comparison["n_b"]} == {1} or advice.default == advice.best, render_advice(
        advice
    )
