"""--max-memory and --baseline-from (engine/advice/memory.py, engine/advice/_baseline_from.py): a cap that the fastest
setting exceeds, on a dataset that holds memory in every process that loads from it, is never tune's answer; a
user's real DataLoader is read into the baseline that --baseline would give."""

from __future__ import annotations

import pytest

from engine import cli
from engine.advice import read_loader
from engine.advice.memory import drop_over_cap, estimate, footprint, parse_size, peak_line
from engine.advice.tune import TuneResult, _pick_best, tune
from engine.config import ConfigError, RunConfig

HUNGRY = {
    "workload": "tests.engine._memory_fixtures:build",
    "model": "mlp",
    "n_samples": 64,
    "image_size": 8,
    "width": 8,
    "batch_size": 16,
    "latency_ms": 5.0,
    "device": "cpu",
}
MiB = 2**20


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8G", 8 * 2**30),
        ("512M", 512 * MiB),
        ("1.5g", int(1.5 * 2**30)),
        ("8GiB", 8 * 2**30),
        (str(64 * MiB), 64 * MiB),
        ("", None),
    ],
)
def test_sizes_parse(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "8X", "-1G", "10"])
def test_a_bad_size_is_named(text):
    with pytest.raises(ConfigError) as err:
        parse_size(text)
    assert err.value.field == "max_memory"


def test_the_answer_says_the_headroom_under_the_cap():
    line = peak_line(3 * 2**30, 2 * 2**30, 8 * 2**30)
    assert "3.00 GiB, 5.00 GiB under the 8.00 GiB cap; your setup 2.00 GiB" in line
    assert "over the" in peak_line(9 * 2**30, None, 8 * 2**30)


def test_the_footprint_counts_each_worker_process_its_own_held_memory():
    from tests.engine._memory_fixtures import HELD_BYTES

    foot = footprint(RunConfig.from_dict(HUNGRY))
    assert foot is not None
    assert foot["worker_bytes"] >= HELD_BYTES  # the worker's own cache, private to it
    assert foot["base_bytes"] >= HELD_BYTES  # the training process loaded too (sync)
    four = RunConfig.from_dict({**HUNGRY, "loader": "processes", "workers": 4})
    threads = RunConfig.from_dict({**HUNGRY, "loader": "threads", "workers": 4})
    assert estimate(four, foot) >= foot["base_bytes"] + 4 * HELD_BYTES
    assert estimate(threads, foot) == foot["base_bytes"]  # threads share the one process


def test_a_setting_with_a_run_above_the_cap_is_never_the_answer():
    cfgs = [
        RunConfig.from_dict({**HUNGRY, "loader": "sync"}),
        RunConfig.from_dict({**HUNGRY, "loader": "processes", "workers": 4}),
    ]
    rows = [
        {"candidate": 0, "rung": 0, "epoch_s": 0.4, "peak_bytes": 400 * MiB},
        {"candidate": 1, "rung": 0, "epoch_s": 0.1, "peak_bytes": 1200 * MiB},
    ]
    capped = TuneResult(sweep_id="t", budget_s=1, rows=rows, configs=cfgs, max_memory=1024 * MiB)
    _pick_best(capped)
    free = TuneResult(sweep_id="t", budget_s=1, rows=rows, configs=cfgs)
    _pick_best(free)
    assert (capped.best_idx, free.best_idx) == (0, 1)


def test_the_advisor_drops_configs_whose_runs_peaked_over_the_cap():
    import pandas as pd

    runs = pd.DataFrame(
        {
            "loader": ["sync", "processes", "processes"],
            "workers": [0, 4, 4],
            "peak_rss_bytes": [400 * MiB, 900 * MiB, 1200 * MiB],
        }
    )
    kept = drop_over_cap(runs, ["loader", "workers"], 1024 * MiB)
    assert kept["loader"].tolist() == ["sync"]  # one run of processes x 4 over the cap drops the config
    assert len(drop_over_cap(runs, ["loader", "workers"], None)) == 3


@pytest.mark.slow
def test_tune_never_answers_the_fastest_setting_when_it_is_above_the_cap(store):
    """4 worker processes are the fastest (a 5 ms sleep per sample) and hold 4 x 200 MiB: above a 900 MiB cap."""
    space = [{"loader": "sync"}, {"loader": "processes", "workers": 1}, {"loader": "processes", "workers": 4}]
    cap = 900 * MiB
    result = tune(
        HUNGRY["workload"],
        "mlp",
        budget_s=600,
        db=store,
        base=HUNGRY,
        progress=False,
        space=space,
        eta=3,
        rung0_epochs=1,
        confirm_repeats=0,  # the answer and its peak come from the search's runs
        predicted=False,
        max_memory="900M",
    )
    assert result.footprint is not None
    assert [(c.loader, c.workers) for c in result.skipped] == [("processes", 4)]  # not run: it cannot fit
    assert all(r["workers"] != 4 for r in result.rows + result.confirm_rows)
    assert result.best is not None and (result.best.loader, result.best.workers) != ("processes", 4)
    best_peaks = [r["peak_bytes"] for r in result.rows + result.confirm_rows if r["candidate"] == result.best_idx]
    assert best_peaks and max(best_peaks) <= cap
    text = result.render()
    assert "under the 900 MiB cap" in text and "1 setting(s) not run" in text


def test_baseline_from_reads_a_real_dataloader():
    assert read_loader("tests.engine._user_loaders:make_loader") == {
        "loader": "processes",
        "workers": 2,
        "prefetch_depth": 4,
        "start_method": "spawn",
        "persistent_workers": False,
        "pin_memory": False,
        "batch_size": 48,
    }
    assert read_loader("tests.engine._user_loaders:make_plain_loader") == {
        "loader": "sync",
        "pin_memory": False,
        "batch_size": 16,
    }


def test_baseline_from_refuses_what_is_not_a_dataloader(capsys):
    with pytest.raises(ConfigError, match="not a torch.utils.data.DataLoader") as err:
        read_loader("tests.engine._user_loaders:not_a_loader")
    assert err.value.field == "baseline_from"
    rc = cli.main(["advise", "--baseline", "loader=sync", "--baseline-from", "tests.engine._user_loaders:make_loader"])
    assert rc == 2 and "not both" in capsys.readouterr().err
