"""engine.advice.tune: budgets parse or fail by name; the space varies intra-op threads jointly with workers; a tiny tune
on the tensor workload runs the predicted fastest first, halves, and reports a config with each run's prediction;
a mode the model does not cover is tuned by plain halving."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from engine import cli
from engine.cli._options import config_from_args
from engine.advice.tune import TuneResult, candidates, parse_budget, run_flags, tune
from engine.config import ConfigError, RunConfig
from engine.store import list_runs

TINY = {"n_samples": 128, "image_size": 8, "width": 8, "batch_size": 32, "device": "cpu", "sample_hz": 0.0}


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("10m", 600), ("1h", 3600), ("1h30m", 5400), ("45", 45), ("1.5m", 90)]
)
def test_parse_budget(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x", "-5s", "0s", "1h 30"])
def test_parse_budget_rejects_bad_input_naming_the_field(text):
    with pytest.raises(ConfigError) as err:
        parse_budget(text)
    assert err.value.field == "budget"


def test_candidates_keep_batch_size_and_cover_the_loaders():
    from engine.config import RunConfig

    cands = candidates(RunConfig.from_dict({**TINY, "batch_size": 48}), cores=4)
    assert {c.batch_size for c in cands} == {48}
    assert cands[0].loader == "sync"
    assert {(c.loader, c.workers) for c in cands} >= {("threads", 4), ("processes", 1), ("prefetch", 0)}
    assert len({c.to_json() for c in cands}) == len(cands)


def _threads_of(cands: list[RunConfig]) -> dict[tuple[str, int, int], list[int]]:
    out: dict[tuple[str, int, int], list[int]] = {}
    for c in cands:
        out.setdefault((c.loader, c.workers, c.prefetch_depth), []).append(c.threads)
    return out


def test_the_space_varies_intra_op_threads_jointly_with_workers():
    base = RunConfig.from_dict(TINY)
    cands = candidates(base, cores=4)
    assert len({c.to_json() for c in cands}) == len(cands)
    for (loader, workers, _), threads in _threads_of(cands).items():
        beside = {"sync": 0, "prefetch": 1}.get(loader, workers)
        # 1, what fits beside the loader's threads, and torch's default (0, auto)
        assert {0, 1, max(1, 4 - beside)} == set(threads), (loader, workers)
    assert _threads_of(cands)[("processes", 1, 2)] == [0, 1, 3]
    assert cands[0].loader == "sync" and cands[0].threads == 0  # the reference is sync as the user gets it


def test_an_explicit_thread_count_equal_to_torchs_default_is_not_run_twice():
    cands = candidates(RunConfig.from_dict(TINY), cores=4, default_threads=4)
    assert len({c.to_json() for c in cands}) == len(cands)
    assert _threads_of(cands)[("sync", 0, 2)] == [0, 1]  # 4 fits beside sync, and 4 is what auto gives
    assert _threads_of(cands)[("processes", 1, 2)] == [0, 1, 3]


def test_threads_the_base_sets_are_kept_like_its_batch_size():
    cands = candidates(RunConfig.from_dict({**TINY, "threads": 2}), cores=4)
    assert {c.threads for c in cands} == {2}
    assert len({c.to_json() for c in cands}) == len(cands)


def test_hidden_pools_add_a_transform_threads_1_twin_of_each_candidate_unless_the_base_sets_it():
    plain = candidates(RunConfig.from_dict(TINY), cores=4)
    assert {c.transform_threads for c in plain} == {0}
    both = candidates(RunConfig.from_dict(TINY), cores=4, hidden_pools=True)
    assert len(both) == 2 * len(plain) and len({c.to_json() for c in both}) == len(both)
    assert {c.to_json() for c in both if c.transform_threads == 1} == {
        c.replace(transform_threads=1).to_json() for c in plain
    }
    kept = candidates(RunConfig.from_dict({**TINY, "transform_threads": 2}), cores=4, hidden_pools=True)
    assert {c.transform_threads for c in kept} == {2} and len(kept) == len(plain)


def test_the_confirmation_sweep_gives_each_side_its_own_threads():
    """The best's threads are a base field of the sweep file: without its own, candidate 0 would inherit them."""
    import tomllib

    from engine.config import SweepConfig

    sync = RunConfig.from_dict({**TINY, "tag": "tune", "bound": False})
    best = sync.replace(loader="processes", workers=1, threads=1)
    result = TuneResult(sweep_id="tune-x", budget_s=60, configs=[sync, best], best_idx=1)
    sweep = SweepConfig.from_dict(tomllib.loads(result.confirm_sweep_toml()))
    assert [(c.loader, c.threads) for c in sweep.configs()] == [("sync", 0), ("processes", 1)]


def test_confirmation_has_enough_runs_for_an_interval():
    from engine.analysis import stats
    from engine.advice import tune as tune_mod

    n = tune_mod.CONFIRM_REPEATS
    assert n >= 5 and not math.isnan(stats.ratio_ci(range(1, n + 1), range(1, n + 1))[1])  # a 95% low end exists


@pytest.mark.slow
def test_tiny_tune_halves_and_reports_a_config(store):
    space = [{"loader": "sync"}, {"loader": "prefetch"}, {"loader": "threads", "workers": 2}]
    # NOTE: a per-sample sleep so that loading in the background pays and the confirmation path runs
    result = tune(
        "tensor",
        "mlp",
        budget_s=600,
        db=store,
        base={**TINY, "latency_ms": 1.0},
        progress=False,
        space=space,
        eta=2,
        confirm_repeats=3,
        predicted=False,
    )
    assert result.stop_reason == "one candidate left"
    assert all(r["warm"] for r in result.rows + result.confirm_rows)  # forked from tune's one warm parent
    assert [r["rung"] for r in result.rows] == [0, 0, 0, 1, 1]  # the faster half (2 of 3) runs again
    order = [0, 1, 2]
    random.Random(0).shuffle(order)  # the seeded shuffle tune gives each rung (seed 0): [0, 2, 1], not as listed
    assert [r["candidate"] for r in result.rows[:3]] == order != [0, 1, 2]
    first = sorted(result.rows[:3], key=lambda r: r["epoch_s"])
    assert {r["candidate"] for r in result.rows[3:]} == {first[0]["candidate"], first[1]["candidate"]}
    assert result.best is not None
    assert result.best_idx in {r["candidate"] for r in result.rows[3:]}
    assert result.rows[-1]["steady_epochs"] == 2 * result.rows[0]["steady_epochs"]
    assert "best:" in result.render() and "no prediction (--no-predict)" in result.render()
    if result.best_idx == 0:
        was = (
            "was the fastest" if result.fastest_idx == 0 else "was within noise of the fastest"
        )  # and uses less memory
        assert f"sync loader (no background loading) {was}" in result.render() and not result.confirm_rows
    else:  # the final comparison: interleaved runs of sync and the best, not epochs
        confirm = result.confirm_rows
        assert [sorted(r["candidate"] for r in confirm[i : i + 2]) for i in range(0, 6, 2)] == [
            [0, result.best_idx]
        ] * 3
        c = result.comparison
        assert c["n_a"] == c["n_b"] == 3 and math.isnan(c["speedup_lo"])  # 3 + 3 runs: no interval, and it says so
        assert "no interval: 3 runs" in result.render()
    stored = list_runs(db=store)
    assert set(stored["run_id"]) == {r["run_id"] for r in result.rows + result.confirm_rows}
    assert stored["sweep_id"].nunique() == 1 and set(stored["tag"]) == {"tune"}


@pytest.mark.slow
def test_budget_stops_the_tune_after_the_first_run(store, capsys):
    assert (
        cli.main(
            ["tune", "--workload", "tensor", "--budget", "1s", "--db", str(store), "--quiet"]
            + [f"--set={k}={v}" for k, v in TINY.items()]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "1 runs" in out and "budget spent" in out and "best: " in out  # the first of a shuffled rung
    # no interleaved runs, so no speedup claimed
    assert "faster than" not in out and "best vs" not in out and "95% CI" not in out
    assert "peak memory (PSS, whole process tree): " in out  # the best's, against nothing: no interleaved runs
    answer, code = out.split("# --- the code", 1)  # the answer, then the code that builds its loader, last
    assert "loader = " in code and "best: " in answer
    assert cli.build_parser().parse_args(["advise", "--host", "any"]).host == "any"


# ---------------------------------------------------------------------------- the user's setup as the baseline


def test_use_it_is_the_run_command_of_the_best_with_the_shared_fields():
    cfg = RunConfig.from_dict(
        {
            "workload": "mypkg.data:build",
            "model": "mypkg.nets:net",
            "loader": "processes",
            "workers": 2,
            "n_samples": 512,
            "pin_memory": False,
            "epochs": 10,
            "tag": "tune",
            "bound": False,
        }
    )
    flags = run_flags(cfg)
    assert flags == (
        "--workload mypkg.data:build --model mypkg.nets:net --loader processes --workers 2 "
        "--n-samples 512 --no-pin-memory"
    )
    again = config_from_args(cli.build_parser().parse_args(["run", *flags.split()]))  # the CLI reads it back
    assert again.replace(epochs=10, tag="tune", bound=False) == cfg


def test_baseline_keys_are_the_advisors_knobs():
    from engine.advice.advisor import KNOB_KEYS
    from engine.advice.baseline import BASELINE_KEYS

    assert BASELINE_KEYS == KNOB_KEYS


def test_bad_baseline_exits_2_naming_it_and_stores_nothing(store, capsys):
    from engine.cli import main

    for argv in (["tune", "--budget", "1s"], ["advise"]):
        assert main([*argv, "--baseline", "workers=4", "--db", str(store)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: baseline: name your loader") and "\n" not in err
    assert not store.exists() or list_runs(db=store).empty


@pytest.mark.slow
def test_tune_with_a_baseline_confirms_the_best_against_it(store):
    """Through engine.lab.tune, the notebook's way in, which returns engine.advice.tune's answer as data."""
    import tomllib

    from engine import lab
    from engine.config import SweepConfig

    t = lab.tune(
        workload="tensor",
        model="mlp",
        budget="10m",
        db=store,
        base={**TINY, "latency_ms": 1.0},
        progress=False,
        space=[{"loader": "sync"}, {"loader": "prefetch"}],
        confirm_repeats=1,
        baseline="loader=threads,workers=1,batch_size=16",
        predicted=False,  # what is asserted is the baseline's place in the search and the answer, not a ranking
    )
    yours = t["reference"]
    assert (yours["loader"], yours["workers"], yours["batch_size"]) == ("threads", 1, 16) and t["baseline"]
    runs = t["runs"]
    assert set(runs["loader"]) == {"threads", "sync", "prefetch"}  # your setup is measured in the search too
    assert set(runs[runs.loader != "threads"]["batch_size"]) == {32}  # the base's batch_size wins over yours
    best = t["best"]
    if best == {**yours, "epochs": best["epochs"]}:
        # NOTE: or within noise of the fastest, and using less memory (engine/advice/_halving.py TIE_MARGIN)
        assert any(
            f"your setup (threads, 1 worker, depth 2, batch 16) {was}" in t["text"]
            for was in ("was the fastest measured", "was within noise of the fastest")
        ), t["text"]
    else:  # the confirmation runs are your setup's and the best's, and the answer names your setup
        assert sorted(r["loader"] for r in t["confirm_runs"]) == sorted(["threads", best["loader"]])
        assert "vs your setup (threads, 1 worker, depth 2, batch 16): " in t["text"]
        assert "no interval: 1 run" in t["text"] and "--write-confirm" in t["text"] and t["speedup_lo"] is None
        sweep = SweepConfig.from_dict(tomllib.loads(t["confirm_sweep_toml"]))
        assert [c.loader for c in sweep.configs()] == ["threads", best["loader"]] and sweep.repeats == 7


# ---------------------------------------------------------------------------- ranked by prediction


@pytest.mark.slow
@pytest.mark.own_calibrations
def test_the_first_rung_runs_the_predicted_fastest_in_predicted_order_then_candidate_0(store):
    from engine.advice import tune as tune_mod
    from engine.predict.model import rank

    base = {**TINY, "latency_ms": 1.0}
    result = tune(
        "tensor",
        "mlp",
        budget_s=600,
        db=store,
        base=base,
        progress=False,
        top_k=3,
        eta=10,
        rung0_epochs=1,
        confirm_repeats=1,
    )
    assert result.probe is not None and "measured now" in result.probe_note, result.probe_note
    assert "ranked" in result.render() and "by prediction" in result.render()
    # the default space, threads jointly with workers: torch's default (0) and explicit counts beside it (which ones
    # depend on that default: under pytest-xdist each worker's is 1, and an explicit 1 would be auto's twin)
    assert 0 in {c.threads for c in result.configs} and {c.threads for c in result.configs} - {0}
    first = [r for r in result.rows if r["rung"] == 0]
    ran = [r["candidate"] for r in first]
    order = [result.configs.index(c) for c, _ in rank(result.configs, result.probe)]
    ranked = ran[:-1] if len(ran) > 1 and ran[-1] == 0 else ran  # candidate 0 last, unless predicted among them
    assert ranked == sorted(ranked, key=order.index)  # fastest predicted first
    told_apart = {(result.configs[i].loader, result.configs[i].workers, result.configs[i].threads) for i in ranked}
    assert 0 in ran and len(told_apart) <= 3  # top_k settings the model tells apart, each with its knob variants
    # none left out is predicted faster than the last that ran, but for a twin the model cannot tell apart (depth)
    slowest = max(order.index(i) for i in ranked)
    for i in order[:slowest]:
        if i not in ran:
            c = result.configs[i]
            assert any(
                (c.loader, c.workers, c.threads)
                == (result.configs[j].loader, result.configs[j].workers, result.configs[j].threads)
                for j in ran
            ), c
    # every run carries its predicted epoch beside the measured one, and the printed table shows both
    for r in result.rows + result.confirm_rows:
        assert r["predicted_s"] > 0 and r["limit"] and r["threads"] == result.configs[r["candidate"]].threads
    assert result.rows[0]["predicted_s"] <= result.rows[1]["predicted_s"]
    assert f"{result.rows[0]['predicted_s']:.3f}" in result.render() and "predicted" in result.render()
    # the probe is cached for this host: the next tune of the pipeline predicts without measuring again
    assert list((store.parent / "calibrations").glob("probe-*.json"))
    again, note, _ = tune_mod._probe(result.configs[0], store, 120.0, True)
    assert again == result.probe and "cached" in note


@pytest.mark.slow
@pytest.mark.own_calibrations
def test_a_mode_the_model_does_not_cover_is_tuned_by_plain_halving(store):
    space = [{"loader": "sync"}, {"loader": "prefetch"}, {"loader": "threads", "workers": 2}]
    result = tune(
        "tensor",
        "mlp",
        budget_s=600,
        db=store,
        base={**TINY, "mode": "fused", "latency_ms": 1.0},
        progress=False,
        space=space,
        eta=2,
        confirm_repeats=0,  # what is asserted is the search's order and rungs
    )
    assert result.predictions == {} and result.probe is None
    assert "no prediction (the model does not cover mode fused)" in result.render()
    assert not (store.parent / "calibrations").exists()  # no probe was measured for it
    order = [0, 1, 2]
    random.Random(0).shuffle(order)
    assert [r["candidate"] for r in result.rows[:3]] == order  # the whole space, shuffled, as before
    assert [r["rung"] for r in result.rows] == [0, 0, 0, 1, 1] and result.best is not None
    assert all(math.isnan(r["predicted_s"]) and r["limit"] is None for r in result.rows)


# ---------------------------------------------------------------------------- a short budget says so


@pytest.mark.slow
def test_one_setting_measured_is_never_called_the_fastest_nor_confirmed_against_itself(store):
    """The user's setup is the only candidate: it is measured once, never compared with itself, and the answer
    does not call it the fastest of one."""
    result = tune(
        "tensor",
        "mlp",
        budget_s=600,
        db=store,
        base=TINY,
        progress=False,
        space=[{"loader": "threads", "workers": 1}],
        baseline="loader=threads,workers=1",
        predicted=False,
    )
    assert len(result.configs) == 1 and result.best_idx == 0
    assert len(result.rows) == 1 and result.confirm_rows == [] and result.comparison == {}
    text = result.render()
    assert "fastest" not in text and "only threads, 1 worker" in text and "nothing to confirm" in text, text


@pytest.mark.slow
def test_a_short_budget_tries_candidates_until_it_is_spent_and_says_what_a_full_answer_takes(store):
    """Six candidates and a budget for a few runs: tune keeps trying candidates while a run fits in what is left
    (it does not stop at the search's share to confirm), and says how many it tried of how many, and the budget a
    full answer takes."""
    space = (
        [{"loader": "sync"}, {"loader": "prefetch"}]
        + [{"loader": "threads", "workers": w} for w in (1, 2)]
        + [{"loader": "processes", "workers": w} for w in (1, 2)]
    )
    budget = 12.0  # a run of 4 epochs of 4 batches of 4 ms samples takes a few seconds: a few runs fit, not six
    result = tune(
        "tensor",
        "mlp",
        budget_s=budget,
        db=store,
        base={**TINY, "latency_ms": 4.0},
        progress=False,
        space=space,
        predicted=False,
    )
    tried = {r["candidate"] for r in result.rows}
    assert result.confirm_rows == []  # the budget went to candidates, not to confirming one against too few
    if len(tried) < len(space):
        # what was left would not buy another run
        assert budget - result.spent_s < max(r["run_s"] for r in result.rows), (result.spent_s, result.rows)
        text = result.render()
        assert f"tried {len(tried)} of the {len(space)} candidates" in text, text
        assert result.full_budget_s is not None and result.full_budget_s > budget
        assert f"--budget {math.ceil(result.full_budget_s)}s" in text
    if len(tried) > 1:
        assert "only " not in result.render()


def test_a_short_budget_with_predictions_says_it_ran_the_predicted_fastest_first():
    """The answer of a tune cut short names how many of the first rung's candidates it tried, how they were picked,
    and the budget a full answer takes; a tune that tried them all says none of it."""
    sync = RunConfig.from_dict({**TINY, "tag": "tune", "bound": False})
    configs = [sync, sync.replace(loader="threads", workers=2), sync.replace(loader="processes", workers=2)]
    row = {
        "candidate": 1,
        "rung": 0,
        "steady_epochs": 3,
        "epochs": 4,
        "status": "done",
        "epoch_s": 0.5,
        "predicted_s": 0.4,
        "limit": "data-bound",
        "run_s": 3.0,
        "peak_bytes": None,
        "run_id": "r1",
    }
    from engine.predict import Prediction

    predictions = {i: Prediction(e, "data-bound", {}, 1, 2.0) for i, e in enumerate((2.0, 0.4, 0.6))}
    short = TuneResult(
        sweep_id="tune-x",
        budget_s=5,
        configs=configs,
        rows=[row],
        best_idx=1,
        wanted=3,
        full_budget_s=61.2,
        predictions=predictions,
        stop_reason="budget spent",
    )
    text = short.render()
    assert "tried 1 of the 3 candidates the first rung needs (the predicted fastest first)" in text
    assert "--budget 62s" in text and "fastest measured" not in text and "only threads, 2 workers" in text
    full = TuneResult(
        sweep_id="tune-x",
        budget_s=5,
        configs=configs,
        best_idx=1,
        wanted=2,
        predictions=predictions,
        rows=[row, {**row, "candidate": 0, "epoch_s": 2.1, "run_id": "r0"}],
    )
    assert "tried" not in full.render() and "only " not in full.render()


def test_of_settings_within_noise_of_the_fastest_the_one_using_least_memory_is_the_answer_and_it_says_so():
    """The first rung of a storage-like tune that once answered 8 processes: threads 8/16/32 and processes 8 measured
    within 6 % of each other. 16 threads (one process) is within noise of the fastest, 8 processes (eight copies of
    the dataset), and holds less memory, so it is the answer and the answer says why; a setting past the margin is
    never the answer for its memory. Where no run has a memory figure (no sampler, no --max-memory), the tie goes to
    the setting that starts fewer processes; pick() given no memory at all keeps the fastest."""
    from engine.advice._halving import TIE_MARGIN, pick
    from engine.advice.tune import _pick_best

    base = RunConfig.from_dict({**TINY, "tag": "tune", "bound": False})
    settings = [("sync", 0), ("threads", 8), ("threads", 16), ("threads", 32), ("processes", 8)]
    configs = [base.replace(loader=loader, workers=w) for loader, w in settings]
    measured = [(1.90, 300), (0.490, 310), (0.476, 305), (0.481, 320), (0.463, 1900)]  # epoch s, peak MiB
    rows = [
        {"candidate": i, "rung": 0, "status": "done", "epoch_s": e, "predicted_s": 0.453, "limit": "compute-bound"}
        | {"steady_epochs": 3, "epochs": 4, "run_s": 3.0, "peak_bytes": mib * 2**20, "run_id": f"r{i}"}
        for i, (e, mib) in enumerate(measured)
    ]
    result = TuneResult(sweep_id="tune-x", budget_s=90, configs=configs, rows=rows, wanted=5)
    _pick_best(result)
    assert result.fastest_idx == 4 and result.best_idx == 2, (result.fastest_idx, result.best_idx)
    text = result.render()
    assert "best: threads, 16 workers" in text, text
    assert (
        "within noise of processes, 8 workers" in text
        and "(0.463 s;" in text
        and "uses less memory (305 MiB vs 1.86 GiB)" in text
    ), text
    # past the margin the fastest wins whatever it holds; with no memory figure it wins too
    slow = [{**r, "epoch_s": r["epoch_s"] * (1 + 2 * TIE_MARGIN)} if r["candidate"] != 4 else r for r in rows]
    assert pick(slow, "epoch_s", None, lambda r: r["peak_bytes"]) == 4
    assert pick(rows, "epoch_s", None, lambda r: None) == 4 and pick(rows, "epoch_s", None) == 4
    # no setting in noise of it: the answer says nothing of noise
    alone = TuneResult(sweep_id="tune-x", budget_s=90, configs=configs, rows=slow, wanted=5)
    _pick_best(alone)
    assert alone.best_idx == alone.fastest_idx == 4 and "within noise" not in alone.render()
    # sync itself within noise, in one process: it is the answer, and never called the fastest
    tied = TuneResult(sweep_id="tune-x", budget_s=90, configs=configs, rows=[{**rows[0], "epoch_s": 0.47}, *rows[1:]])
    _pick_best(tied)
    assert (tied.best_idx, tied.fastest_idx) == (0, 4)
    assert "the sync loader (no background loading) was within noise of the fastest" in tied.render(), tied.render()
    # no memory figure in any run (the storage tune of CI: sample_hz 0, no cap): one process of threads wins the tie
    unmeasured = TuneResult(
        sweep_id="tune-x", budget_s=90, configs=configs, rows=[{**r, "peak_bytes": None} for r in rows], wanted=5
    )
    _pick_best(unmeasured)
    assert unmeasured.fastest_idx == 4 and unmeasured.configs[unmeasured.best_idx].loader == "threads"
    assert "starts fewer processes (1 vs 9;" in unmeasured.render(), unmeasured.render()


# ---------------------------------------------------------------------------- the search follows the resource


def test_where_items_wait_threads_and_spdl_reach_past_the_cores_and_processes_stay_within_their_cap():
    from engine.advice.tune import MAX_PROCESSES_PER_CORE, MAX_WORKERS, waits_of

    base = RunConfig.from_dict(TINY)
    most = {
        lo: max((c.workers for c in cands if c.loader == lo), default=0)
        for cands in [candidates(base, cores=2)]
        for lo in ("threads", "spdl", "processes")
    }
    assert most == {"threads": 2, "spdl": 2, "processes": 2}  # work only: the cores set the speed
    # a load that waits 30 times what it works (object storage): a core keeps ~31 workers busy
    storage = {"load_wall_s": 0.31, "load_cpu_s": 0.01}
    assert waits_of(storage) == pytest.approx(30) and waits_of(None) == 0.0
    wide = candidates(base, cores=2, waits=waits_of(storage))
    reach = {lo: max(c.workers for c in wide if c.loader == lo) for lo in ("threads", "spdl", "processes")}
    assert reach["threads"] == reach["spdl"] == 32 <= MAX_WORKERS
    assert 2 < reach["processes"] <= MAX_PROCESSES_PER_CORE * 2
    assert max(c.workers for c in candidates(base, cores=2, waits=1e6)) == MAX_WORKERS  # a sane limit
    assert len({c.to_json() for c in wide}) == len(wide)


@pytest.mark.slow
@pytest.mark.own_calibrations  # measured now: a probe another test cached would fit any budget
def test_a_heavy_cpu_models_tune_predicts_within_a_90s_budget(store):
    """The ResNet of examples/own_pipeline on the CPU, `tune --budget 90s`: the probe comes back within its share
    (quick where the full one does not fit, and the answer says which), and the answer carries predictions. One
    candidate, the user's own setting, and one steady epoch, so the tune is its probe and one short run."""
    from engine.advice.tune import PROBE_MIN_S, PROBE_SHARE
    from examples.own_pipeline.data import build

    fields = {"n_samples": 256, "image_size": 32, "num_classes": 8, "device": "cpu", "sample_hz": 0.0}
    # the user's data exists already: its folder is made here, not in the probe
    build(seed=RunConfig().seed, **{k: fields[k] for k in ("image_size", "num_classes", "n_samples")})
    result = tune(
        "examples.own_pipeline.data:build",
        "examples.own_pipeline.nets:resnet",
        budget_s=90,
        db=store,
        base=fields,
        progress=False,
        space=[{"loader": "processes", "workers": 2}],
        rung0_epochs=1,
    )
    share = max(PROBE_MIN_S, 90 * PROBE_SHARE)
    assert result.probe is not None and "measured now" in result.probe_note, result.probe_note
    # its share, and what a busy machine overruns it by (the suite's parallel part is one: the probe forks from the
    # warm parent, so torch's import, which on busy cores took seconds of the share, is not the probe's)
    assert result.probe_took_s <= 1.5 * share, result.probe_note
    quick = bool(result.probe.get("quick"))
    assert ("a quick probe" in result.probe_note) == quick and ("the full probe" in result.probe_note) != quick
    assert set(result.predictions) == {0} and result.rows and result.rows[0]["predicted_s"] > 0
    assert "ranked 1 of 1 candidates by prediction" in result.render(), result.render()


@pytest.mark.slow
@pytest.mark.usefixtures("warm_runs")  # the grid's runs fork warm, as the tune's own do
def test_over_storage_like_reads_tune_answers_threads_or_spdl_past_the_cores_within_1_3x_of_a_wider_grid(store):
    """Issue 37's done-when: reads that wait ~3 ms an item (bench/pipelines/storage.py), `tune --budget 90s`: the
    answer is threads or spdl with more workers than cores, within 1.3x of the best of threads with 4, 8, 16 and
    32 workers."""
    from engine.advice.tune import _steady_walls
    from engine.run.hostfit import usable_cores
    from engine.run.runner import launch

    plugin = "bench.pipelines.storage"
    fields = {"n_samples": 512, "device": "cpu", "sample_hz": 0.0}
    result = tune(f"{plugin}:build", f"{plugin}:model", budget_s=90, db=store, base=fields, progress=False)
    assert result.predictions, result.probe_note
    best = result.best
    assert best is not None and best.loader in ("threads", "spdl") and best.workers > usable_cores(), result.render()
    answer = [r["epoch_s"] for r in result.rows + result.confirm_rows if r["candidate"] == result.best_idx]
    grid = []
    for workers in (4, 8, 16, 32):
        cfg = RunConfig.from_dict(
            {
                **fields,
                "workload": f"{plugin}:build",
                "model": f"{plugin}:model",
                "loader": "threads",
                "workers": workers,
                "epochs": 4,
                "bound": False,
            }
        )
        run = launch(cfg, db=store)
        grid.append(statistics.median(_steady_walls(run.run_dir)))
    assert statistics.median(answer) <= 1.3 * min(grid), (best, answer, grid)


def test_a_settings_label_names_its_intra_op_threads_once() -> None:
    from engine.advice.tune import _describe

    for device in ("cpu", "cuda"):
        try:
            cfg = RunConfig.from_dict(
                {"loader": "processes", "workers": 1, "threads": 1, "device": device, "pin_memory": False}
            )
        except ConfigError:  # a machine without CUDA may refuse the device: the CPU label still counts
            continue
        label = _describe(cfg)
        assert label.count("intra-op thread") == 1, label
