"""engine.analysis.stats: exact intervals of the median and of ratios (coverage checked by simulation), noise flags,
comparisons, time breakdowns and mode speedups."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from engine.analysis import stats


def test_median_ci_ranks_are_the_exact_binomial_order_statistics():
    assert [stats.median_ci_ranks(n) for n in range(1, 6)] == [None] * 5  # 5 runs reach only 93.75%
    assert stats.median_ci_ranks(6) == (1, 6)  # coverage 1 - 2/64 = 96.9%
    assert stats.median_ci_ranks(9) == (2, 8)  # 1 - 2*10/512 = 96.1%; (3, 7) would be 82%
    assert stats.median_ci_ranks(20) == (6, 15)  # the textbook value for n = 20 at 95%
    assert stats.median_ci_ranks(7, 0.99) is None and stats.median_ci_ranks(8, 0.99) == (1, 8)
    with pytest.raises(ValueError, match="confidence"):
        stats.median_ci_ranks(10, confidence=95)


def test_median_ci_is_the_order_statistics_at_those_ranks():
    values = [9.0, 1.0, 5.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0]
    assert stats.median_ci(values) == (5.0, 2.0, 8.0)
    _, lo80, hi80 = stats.median_ci(values, confidence=0.8)
    assert 2.0 <= lo80 and hi80 <= 8.0 and (lo80, hi80) != (2.0, 8.0)


def test_median_ci_too_few_values_gives_no_interval_not_min_max():
    for n in range(1, 6):
        med, lo, hi = stats.median_ci(np.arange(1.0, n + 1))
        assert med == (n + 1) / 2 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(x) for x in stats.median_ci([]))
    assert stats.median_ci([1.0, float("nan"), 3.0, 2.0])[0] == 2.0  # NaN dropped
    assert stats.ci_text(math.nan, math.nan, 5) == "no interval: 5 runs"
    assert stats.ci_text(1.0, 2.0, 6) == "95% CI 1-2"
    with pytest.raises(ValueError, match="confidence"):
        stats.median_ci([1, 2, 3], confidence=95)


@pytest.mark.parametrize("n", [6, 7, 8, 9, 10])
def test_median_ci_coverage_on_known_distributions(n):
    rng = np.random.default_rng(n)
    trials = 4000
    for draw, true_median in (
        (lambda size: rng.lognormal(0.0, 0.5, size), 1.0),  # skewed, like times
        (lambda size: 1.0 + rng.exponential(1.0, size), 1.0 + math.log(2)),
        (lambda size: rng.standard_t(2, size), 0.0),
    ):  # heavy tails
        hits = sum(lo <= true_median <= hi for _, lo, hi in (stats.median_ci(draw(n)) for _ in range(trials)))
        assert hits / trials >= 0.93


@pytest.mark.parametrize(("na", "nb"), [(6, 7), (7, 7), (8, 10), (10, 10)])
def test_ratio_ci_coverage_on_known_distributions(na, nb):
    rng = np.random.default_rng(na * 100 + nb)
    trials, hits = 3000, 0
    true_ratio = 2.0 / 1.5  # medians of 2 * lognormal(0, .3) and 1.5 * (1 + exp) / (1 + ln 2)
    for _ in range(trials):
        a = 2.0 * rng.lognormal(0.0, 0.3, na)
        b = 1.5 * (1.0 + rng.exponential(1.0, nb)) / (1.0 + math.log(2))
        _, lo, hi = stats.ratio_ci(a, b)
        hits += lo <= true_ratio <= hi
    assert hits / trials >= 0.93


def test_cv_and_noisy_flag_at_ten_percent():
    df = pd.DataFrame(
        {
            "loader": ["sync"] * 4 + ["threads"] * 4,
            "epoch_s": [
                1.00,
                1.01,
                0.99,
                1.00,  # cv ~ 0.8%
                0.50,
                0.80,
                0.40,
                0.65,
            ],  # cv ~ 30%
        }
    )
    assert stats.cv([1.0, 1.0]) == 0.0
    assert math.isnan(stats.cv([1.0]))
    table = stats.summarize_configs(df, ["loader"])
    assert list(table.columns) == ["loader", "n", "median", "ci_lo", "ci_hi", "cv", "noisy"]
    by = table.set_index("loader")
    assert table["loader"].tolist() == ["threads", "sync"]  # fastest first
    assert not by.loc["sync", "noisy"] and by.loc["threads", "noisy"]
    assert by.loc["sync", "n"] == 4 and by.loc["sync", "median"] == pytest.approx(1.0)
    assert by.loc["threads", "cv"] > stats.NOISY_CV > by.loc["sync", "cv"]
    # a group just over the threshold is flagged, one just under is not
    over = [1.0 - 0.11, 1.0, 1.0 + 0.11]  # sd 0.11 / mean 1.0
    under = [1.0 - 0.09, 1.0, 1.0 + 0.09]
    assert stats.cv(over) > 0.10 > stats.cv(under)


def test_compare_overlapping_samples_is_no_clear_difference():
    a = [1.00, 1.05, 0.97, 1.02, 0.99, 1.03, 0.98]
    b = [1.01, 0.98, 1.04, 1.00, 0.96, 1.02, 0.99]
    c = stats.compare(a, b)
    assert c["difference"] == "no clear difference"
    assert c["speedup_lo"] < 1.0 < c["speedup_hi"]


def test_compare_clear_difference_gives_speedup_with_interval():
    slow = [2.00, 2.05, 1.97, 2.02, 1.99, 2.01, 2.03]
    fast = [1.00, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97]
    c = stats.compare(slow, fast)
    assert c["difference"] == "B faster"
    assert c["speedup"] == pytest.approx(2.0, rel=0.02)
    assert 1.0 < c["speedup_lo"] <= c["speedup"] <= c["speedup_hi"]
    assert c["speedup_lo"] == pytest.approx(1.97 / 1.03) and c["speedup_hi"] == pytest.approx(2.05 / 0.97)
    assert stats.compare(fast, slow)["difference"] == "A faster"
    few = stats.compare(slow[:6], fast[:6])  # 6 + 6 runs: each median has an interval, the ratio not
    assert few["difference"] == "no clear difference" and few["note"].startswith("no interval: 6 and 6 runs")
    assert not math.isnan(few["a_lo"]) and math.isnan(few["speedup_lo"]) and few["speedup"] > 1.9


def test_not_slower_needs_the_low_end_above_one_minus_margin():
    base = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 1.01]
    # B about 6% slower with a wide interval (the README's JPEG row: 0.94x, CI 0.88-1.04) is not "not slower"
    wide = [1.06, 0.97, 1.13, 1.06, 1.02, 1.10, 1.08]
    c = stats.compare(base, wide, margin=0.05)
    assert c["speedup_lo"] < 0.95 < c["speedup_hi"] and c["b_not_slower"] is False
    close = [1.01, 1.02, 1.00, 1.02, 1.01, 1.00, 1.03]
    assert stats.compare(base, close, margin=0.05)["b_not_slower"] is True
    assert stats.compare(base[:3], close[:3], margin=0.05)["b_not_slower"] is False  # no interval, no claim
    assert stats.difference(math.nan, math.nan) == "no clear difference"
    assert stats.difference(1.01, 1.2) == "B faster" and stats.difference(0.8, 0.99) == "A faster"


def test_mixed_hosts_warning():
    same = pd.DataFrame({"host_fingerprint": ["h1", "h1"], "torch_version": ["2.13", "2.13"]})
    assert stats.mixed_hosts_warning(same) is None
    mixed = pd.DataFrame({"host_fingerprint": ["h1", "h2"], "torch_version": ["2.13", "2.11"]})
    msg = stats.mixed_hosts_warning(mixed)
    assert "2 hosts" in msg and "2 torch versions" in msg and "host_fingerprint" in msg


def test_time_breakdown_shares_percentiles_and_startup():
    epochs = pd.DataFrame(
        {
            "run_id": ["r"] * 3,
            "model_idx": 0,
            "rank": 0,
            "epoch": [0, 1, 2],
            "warmup": [True, False, False],
            "wall_s": [5.0, 2.0, 2.0],
            "ttfb_s": [1.5, 0.1, 0.1],
            "data_wait_s": [3.0, 1.0, 1.0],
            "h2d_s": [0.0, 0.2, 0.2],
            "compute_s": [1.0, 0.6, 0.6],
        }
    )
    waits = np.r_[[0.1], np.linspace(0.001, 0.1, 100)]  # step 0 (the TTFB) then 100 steady steps
    steps = pd.DataFrame(
        {
            "run_id": "r",
            "model_idx": 0,
            "rank": 0,
            "epoch": np.repeat([1, 2], 101),
            "step": np.tile(np.arange(101), 2),
            "data_wait_s": np.tile(waits, 2),
        }
    )
    warm_steps = steps.assign(epoch=0, data_wait_s=9.0)  # warm-up steps must not count
    out = stats.time_breakdown(epochs, pd.concat([steps, warm_steps]))["r"]
    assert out["data_wait_share"] == pytest.approx(0.5)
    assert out["h2d_share"] == pytest.approx(0.1)
    assert out["compute_share"] == pytest.approx(0.3)
    assert out["other_share"] == pytest.approx(0.1)
    assert out["ttfb_s"] == pytest.approx(0.1) and out["startup_s"] == pytest.approx(1.4)
    assert out["n_steps"] == 200
    steady = np.sort(np.tile(waits[1:], 2))  # nearest rank (engine/measure/waits.py): a wait that happened
    assert out["data_wait_p50_s"] == pytest.approx(steady[99]) and out["data_wait_p99_s"] == pytest.approx(steady[197])
    assert out["data_wait_p50_s"] < out["data_wait_p90_s"] < out["data_wait_p99_s"] < 0.1


def test_speedup_vs_sequential_matches_baselines_in_the_same_sweep_host_and_models():
    def runs(mode, sps, sweep="s1", n_models=2, host="h1", dual_data="shared"):
        return [
            {
                "sweep_id": sweep,
                "host_fingerprint": host,
                "status": "done",
                "mode": mode,
                "n_models": n_models,
                "loader": "sync",
                "workload": "tensor",
                "model": "mlp",
                "width": 8,
                "model_b": "",
                "width_b": 0,
                "dual_data": dual_data,
                "samples_per_s": v * (1 + 0.002 * i),
            }
            for i, v in enumerate(sps)
        ]

    seven = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0]
    df = pd.DataFrame(
        runs("single", [100 * x for x in seven])
        + runs("fused", [300 * x for x in seven], n_models=4)
        + runs("dual-sequential", [100 * x for x in seven])
        + runs("dual-processes", [150 * x for x in seven])
        + runs("dual-threads", [100 * x for x in seven])
        + runs("dual-threads", [120 * x for x in seven], dual_data="separate")  # its own contender, same baseline
        + runs("single", [1000 * x for x in seven], sweep="other")  # another sweep: never a baseline
        + runs("fused", [300 * x for x in seven], n_models=4, host="h2")  # a Ray node without its own single
    )
    out = stats.speedup_vs_sequential(df)
    by = out[out["host_fingerprint"] == "h1"].set_index(["mode", "dual_data"])
    fused = by.loc[("fused", "shared")]
    assert fused["baseline_mode"] == "single" and fused["baseline_n"] == 7
    assert fused["speedup"] == pytest.approx(3.0, rel=0.02)  # 4 models in 4/3 of one model's time
    assert fused["difference"] == "faster"
    assert by.loc[("dual-processes", "shared"), "speedup"] == pytest.approx(1.5, rel=0.02)
    assert by.loc[("dual-processes", "shared"), "baseline_mode"] == "dual-sequential"
    assert by.loc[("dual-threads", "shared"), "difference"] == "no clear difference"
    separate = by.loc[("dual-threads", "separate")]  # dual-sequential is stored as "shared": it is the baseline
    assert separate["baseline_n"] == 7 and separate["speedup"] == pytest.approx(1.2, rel=0.02)
    assert out[out["host_fingerprint"] == "h2"]["difference"].tolist() == ["no baseline"]
    lonely = stats.speedup_vs_sequential(pd.DataFrame(runs("fused", [300], sweep="alone")))
    assert lonely["difference"].tolist() == ["no baseline"]
