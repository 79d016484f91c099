"""`python -m engine tune -- python train.py` (engine/advice/tune_script.py): a plain script (observed/slow_items.py,
items that wait ~3 ms each, num_workers=0) tuned as it is, each trial a real run of it in a real subprocess.

Budgets are short and most tests name a small space: what they assert is which loader is tuned, what a trial
leaves behind and what a failing candidate does, not how fast the search converges (the CLI test does that).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import psutil
import pytest

from engine.advice._script_predict import probe_of, rank_settings, seconds_per_batch
from engine.advice.tune_script import candidates, change, tune_script
from engine.store import tune_answers


ROOT = Path(__file__).resolve().parents[2]
SLOW = ROOT / "tests" / "engine" / "observed" / "slow_items.py"
TRAIN_LINE = next(i for i, line in enumerate(SLOW.read_text().splitlines(), 1) if "return DataLoader(" in line)
WORKERS_2 = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2}


@pytest.fixture
def marked(tmp_path, monkeypatch, store) -> Path:
    """A folder where each run of the script leaves a file (trial-PID or own-PID), named in the environment that
    the trials and their workers inherit; the trials are stored in the test's own store."""
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("SLOW_ITEMS_MARK", str(folder))
    return folder


def _left_behind(folder: Path) -> list[psutil.Process]:
    """Processes still alive that carry this test's mark in their environment (a trial's workers included)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("SLOW_ITEMS_MARK") == str(folder):
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def _trial_count(result) -> int:
    return len(result.rows)


@pytest.mark.slow  # a script tune: its budget in trials, each a Python that imports torch
def test_tune_answers_more_workers_as_a_diff_of_the_scripts_call_and_each_trial_is_one_run_of_it(marked, tmp_path):
    store = tmp_path / "s.duckdb"
    out = subprocess.run(
        [sys.executable, "-m", "engine", "tune", "--budget", "45s", "--", sys.executable, str(SLOW)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "LOADERLAB_DB": str(store)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "runs once per trial" in out.stderr
    assert (
        f"the DataLoader at {SLOW.relative_to(ROOT)}:{TRAIN_LINE}" in out.stdout
        or f"the DataLoader at {SLOW}:{TRAIN_LINE}" in out.stdout
    ), out.stdout
    best = re.search(r"^best: (.*)$", out.stdout, re.M)
    assert best and int(re.search(r"num_workers=(\d+)", best.group(1)).group(1)) >= 2, out.stdout
    speedup = float(re.search(r"^([\d.]+)x ", out.stdout, re.M).group(1))
    assert speedup >= 1.3, out.stdout  # the loop waits ~3 ms an item on its own; two workers halve that at least
    # the diff: the script's own call, removed, and the call as it should read, which parses and sets num_workers
    removed = [line[1:] for line in out.stdout.splitlines() if line.startswith("-") and "DataLoader(" in line]
    # (a DataLoader, or the lab's ThreadsLoader, whose class the diff pastes above)
    added = [line[1:] for line in out.stdout.splitlines() if re.match(r"^\+\s+return (Data|Threads)Loader\(", line)]
    assert len(removed) == 1 and removed[0] == SLOW.read_text().splitlines()[TRAIN_LINE - 1]
    call = ast.parse(added[0].strip().removeprefix("return ")).body[0].value
    assert {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg == "num_workers"}["num_workers"] >= 2
    # one run of the script per trial, each told it is a trial; none of them left a process behind
    trials = len(re.findall(r"^\s+(\d+|confirm)\s{2}", out.stdout, re.M))
    marks = sorted(p.name.split("-")[0] for p in marked.iterdir())
    assert marks == ["trial"] * trials and trials >= 3
    assert _left_behind(marked) == []
    assert "peak memory" in out.stdout and "the script's own" in out.stdout


@pytest.mark.parametrize("flag", ["--iterable", "--val"])
def test_the_loader_tuned_is_the_one_that_runs_the_most_steps_named_by_its_line(flag, marked, monkeypatch):
    """An IterableDataset that splits itself over workers, or a map-style training loader with a validation loader
    beside it: the training loader is tuned, and two workers deliver the same samples an epoch, faster."""
    # NOTE: 8 ms waits, not 3: at 3 (24 ms a batch) two workers read 0.033 s a batch against the script's 0.030 once
    # in CI, on cores the suite's other workers kept busy; at 8 (64 ms a batch) two workers save 32 ms, ten times that
    monkeypatch.setenv("SLOW_ITEMS_WAIT_MS", "8")
    result = tune_script([sys.executable, str(SLOW), flag, "--epochs", "20"], budget_s=18, space=[WORKERS_2])
    assert result.error is None
    assert result.site.endswith(f"{SLOW.name}:{TRAIN_LINE}"), result.site
    done = {r["candidate"] for r in result.rows if r["status"] == "done"}
    assert done == {0, 1}, result.render()
    assert result.best_idx == 1, result.render()
    assert "+        return DataLoader(" in result.diff and "num_workers=2" in result.diff
    assert _left_behind(marked) == []


def test_a_loader_made_anew_each_epoch_is_one_loader_whose_trials_stop_at_their_limit(marked):
    """One line makes a new DataLoader each epoch: their batches count together, so a trial stops at its limit
    (12 batches an epoch: one that ran the whole script would deliver 240)."""
    result = tune_script([sys.executable, str(SLOW), "--remade", "--epochs", "20"], budget_s=16, space=[WORKERS_2])
    assert result.site.endswith(f"{SLOW.name}:{TRAIN_LINE}"), result.site
    trials = [r for r in result.rows if r["status"] == "done" and r["rung"] != 0 or r["candidate"] == 1]
    assert trials and all(result.steps <= r["steps"] < 240 for r in trials), result.render()
    assert _left_behind(marked) == []


@pytest.mark.slow  # a script tune: its budget in trials, each a Python that imports torch
def test_a_breaking_candidate_is_one_failed_row_and_run_with_its_first_error_and_each_trial_and_the_answer_are_stored(
    marked, store
):
    """A lambda collate_fn cannot reach a spawned worker: that candidate fails, the tune goes on to the next. Every
    trial is a run in the store under the tune's id, and the answer is the tune's row."""
    space = [{**WORKERS_2, "multiprocessing_context": "spawn"}, WORKERS_2]
    # NOTE: the budget buys the script's own trial and both candidates on busy cores (22 s did not, beside two
    # other test workers: each trial starts a Python and imports torch); the search spends what is left
    result = tune_script(
        [sys.executable, str(SLOW), "--lambda-collate", "--val", "--epochs", "20"], budget_s=36, space=space, db=store
    )
    by = {r["candidate"]: r for r in result.rows if r["rung"] == 0}
    assert by[1]["status"] == "failed" and "pickle" in by[1]["error"].lower(), result.render()
    assert by[2]["status"] == "done" and result.best_idx == 2, result.render()
    assert sum(1 for line in result.render().splitlines() if "pickle" in line.lower()) == 1
    assert _left_behind(marked) == []
    # one run per trial (the validation loader's are no trial), in the order the trials ran
    with duckdb.connect(str(store), read_only=True) as conn:
        cur = conn.execute("SELECT * FROM runs ORDER BY created_at")
        runs = [dict(zip([d[0] for d in cur.description], row)) for row in cur.fetchall()]
    assert re.fullmatch(r"tune-[0-9a-f]{12}", result.tune_id) and len(runs) == len(result.rows) == result.stored
    assert {r["sweep_id"] for r in runs} == {result.tune_id} and {r["tags"] for r in runs} == {"tune"}
    assert [(r["config_idx"], r["status"]) for r in runs] == [
        (row["candidate"], "done" if row["status"] == "done" else "failed") for row in result.rows
    ]
    for idx in {r["config_idx"] for r in runs}:
        assert sorted(r["repeat_idx"] for r in runs if r["config_idx"] == idx) == list(
            range(sum(1 for r in runs if r["config_idx"] == idx))
        )
    failed = next(r for r in runs if r["config_idx"] == 1)
    assert failed["error"] == by[1]["error"] and failed["workers"] == 2 and failed["start_method"] == "spawn"
    for run, row in zip(runs, result.rows):
        summary = json.loads(run["summary_json"])
        assert summary["tune_site"] == result.site and summary["trial_rung"] == row["rung"]
        assert summary["trial_steps"] == row["steps"] and "gpu_idle_share" in summary and "peak_bytes" in summary
        if row["status"] == "done":
            assert summary["s_per_batch"] == pytest.approx(row["s_per_batch"])
            assert run["workers"] == result.settings[row["candidate"]]["num_workers"]
            # a trial stops mid-epoch: a stored epoch time is one of the epochs it finished, never the cut one
            finished = _finished_epochs(store, run["run_id"], summary.get("trial_cut_epoch"))
            assert run["epoch_s"] is None or run["epoch_s"] in finished
    answer = tune_answers(store, result.tune_id)
    assert len(answer) == 1 and answer[0]["best_config_idx"] == 2 and answer[0]["diff"] == result.diff != ""
    assert answer[0]["kind"] == "script" and answer[0]["site"] == result.site and answer[0]["budget_s"] == 36
    assert json.loads(answer[0]["settings_json"])[2]["num_workers"] == 2
    assert json.loads(answer[0]["command"]) == result.command and answer[0]["answer"] == result.render()


def _finished_epochs(store: Path, run_id: str, cut: int | None) -> list[float]:
    with duckdb.connect(str(store), read_only=True) as conn:
        return [
            w
            for (w,) in conn.execute(
                "SELECT wall_s FROM epochs WHERE run_id = ? AND NOT warmup AND epoch != ?",
                [run_id, -1 if cut is None else cut],
            ).fetchall()
        ]


def test_the_change_sets_each_argument_where_the_call_has_it_and_adds_the_rest(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "def make(ds, w):\n"
        "    loader = DataLoader(ds, 32, True, None, None, w,\n"
        "                        pin_memory=False)  # the user's own\n"
        "    return loader\n"
    )
    base = {"num_workers": 0, "pin_memory": False, "threads": 2}
    best = {
        "num_workers": 4,
        "pin_memory": True,
        "persistent_workers": True,
        "prefetch_factor": 2,
        "multiprocessing_context": "spawn",
        "threads": 1,
    }
    diff = change(f"{script}:4", base, best)
    new = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert new[0] == "    torch.set_num_threads(1)"
    assert new[1] == "    loader = DataLoader(ds, 32, True, None, None, 4,"  # positional: in place
    assert new[2].startswith(
        "                        pin_memory=True, persistent_workers=True, prefetch_factor=2, "
        "multiprocessing_context='spawn')"
    )
    assert "# the user's own" in new[2]
    # back to no workers: the settings only workers take go with them
    again = change(f"{script}:4", {**best, "num_workers": 4}, {"num_workers": 0, "pin_memory": False})
    assert "persistent_workers" not in again and "DataLoader(ds, 32, True, None, None, 0," in again


@pytest.mark.parametrize("cpu_pct", [None, 5.0, 60.0])
def test_where_items_wait_the_model_never_ranks_more_workers_slower_up_to_the_cores_and_ranks_the_most_first(cpu_pct):
    """The first trial's figures (a loop that waits 24 ms a batch for items that mostly sleep, a 2 ms step, no
    workers) fed to the lab's model: up to the cores, more workers are never predicted slower, and the predicted
    fastest, the first rung's first, is the most workers within the cores."""
    cores = 8.0
    first = {
        "settings": {"num_workers": 0, "batch_size": 8, "intra_op_threads": 1},
        "wait": 0.024,
        "step": 0.002,
        "steps": 12,
        "cpu_pct": cpu_pct,
    }
    settings = candidates({"num_workers": 0, "pin_memory": False, "threads": 1}, cores, cuda=False, map_style=True)
    probe = probe_of(first, cores, cuda=False)
    fastest: dict[tuple[str, int], float] = {}
    for s in settings:
        key = (s.get("loader") or "processes", s["num_workers"])
        fastest[key] = min(fastest.get(key, float("inf")), seconds_per_batch(s, probe))
    within = sorted(k for k in fastest if k[0] == "processes" and k[1] <= cores)
    assert len(within) >= 4 and all(fastest[a] >= fastest[b] for a, b in zip(within, within[1:])), fastest
    assert fastest[("processes", 0)] == pytest.approx(0.026)  # the script's own setting: the trial's own split
    if cpu_pct == 5.0:  # threads: where the items barely compute (the model takes their CPU work to hold the GIL)
        threads = sorted(k for k in fastest if k[0] == "threads" and k[1] < cores)  # beside the training thread
        assert len(threads) >= 2 and all(fastest[a] >= fastest[b] for a, b in zip(threads, threads[1:])), fastest
    order = rank_settings(settings, first, cores, cuda=False)
    assert settings[order[0]]["num_workers"] >= max(w for _, w in within)


def test_the_one_search_keeps_the_fastest_third_each_rung_and_a_rung_the_budget_cuts_decides_nothing():
    """engine/advice/_halving.py, which both tunes run, over made-up figures (candidate i reads 1 + i): each rung
    keeps the fastest 1/eta at eta x the length; where a rung's runs took longer than estimated and the budget cut
    it short, its few runs decide nothing: the answer is the fastest of the last whole rung."""
    import random

    from engine.advice._halving import Plan, halve, pick

    def plan(limit: float, slow_rung: int | None = None) -> Plan:
        spent = [0.0]

        def measure(idx, rung, length):
            spent[0] += length * (5 if rung == slow_rung else 1)
            # the cut rung's runs read the slow candidates as the fastest: a pick from them would not be 0
            figure = 1.0 / (1 + idx) if rung == slow_rung else 1.0 + idx
            return {"candidate": idx, "rung": rung, "figure": figure}

        return Plan(
            measure=measure,
            fits=lambda idxs, rung, length, lim: spent[0] + len(idxs) * length <= lim,
            limit_s=lambda rung: limit,
            figure="figure",
            length=1,
            rng=random.Random(0),
            rows=[],
            eta=3,
        )

    whole = plan(10_000)
    assert halve(list(range(9)), whole) == ("one candidate left", 0)
    assert [sorted(r["candidate"] for r in whole.rows if r["rung"] == k) for k in (0, 1)] == [list(range(9)), [0, 1, 2]]
    assert pick(whole.rows, "figure", None) == 0
    cut = plan(60, slow_rung=1)  # 27 runs of 1, then 9 of 3 estimated at 27 that take 15 each
    assert halve(list(range(27)), cut)[0] == "search share of the budget spent"
    ran = [r for r in cut.rows if r["rung"] == 1]
    assert 0 < len(ran) < 9 and all(r.get("rung_cut") for r in ran)
    assert pick(cut.rows, "figure", None) == 0


def test_a_map_style_dataset_is_tried_under_the_labs_threads_loader_and_its_answer_pastes_the_code_that_ran(
    marked, store, tmp_path
):
    """The threads loader built over the script's own dataset, batch sampler and collate_fn: the trial is stored as a
    threads run, and the answer's diff, applied to a copy of the script, gives a script that runs as it is."""
    space = [{"loader": "threads", "num_workers": 4, "prefetch_factor": 2}]
    result = tune_script([sys.executable, str(SLOW), "--epochs", "20"], budget_s=18, space=space, db=store)
    assert [r["status"] for r in result.rows if r["candidate"] == 1][:1] == ["done"], result.render()
    with duckdb.connect(str(store), read_only=True) as conn:
        loaders = conn.execute("SELECT DISTINCT loader, workers FROM runs WHERE config_idx = 1").fetchall()
    assert loaders == [("threads", 4)]
    assert result.best_idx == 1, result.render()  # items that wait: four threads overlap them
    assert "+class ThreadsLoader:" in result.diff and "+        return ThreadsLoader(" in result.diff
    copy = tmp_path / "train.py"
    copy.write_text(SLOW.read_text())
    subprocess.run(["patch", "-s", str(copy)], input=result.diff, text=True, check=True)
    ran = subprocess.run([sys.executable, str(copy), "--epochs", "1"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr


def test_where_the_first_trial_sees_items_wait_the_candidates_reach_past_the_cores_and_where_none_wait_they_do_not():
    base = {"num_workers": 0, "pin_memory": False, "threads": 1}
    quiet = candidates(base, cores=2, cuda=False, map_style=True, waits=0.0)
    waiting = candidates(base, cores=2, cuda=False, map_style=True, waits=15.0)

    def most(settings, loader):
        return max(s["num_workers"] for s in settings if (s.get("loader") or "dataloader") == loader)

    assert most(quiet, "threads") <= 4 and most(quiet, "dataloader") <= 2
    assert most(waiting, "threads") >= 16 and most(waiting, "dataloader") == 8  # 4 processes a core at most
    assert all(s["num_workers"] <= 64 for s in candidates(base, cores=16, cuda=False, map_style=True, waits=100.0))
