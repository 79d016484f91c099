"""engine.stats: bootstrap intervals, noise flags, comparisons, time breakdowns and mode speedups."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from engine import stats


def test_median_ci_contains_known_median_and_is_deterministic():
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    med, lo, hi = stats.median_ci(values)
    assert med == 5.0
    assert lo < 5.0 < hi
    assert 1.0 <= lo and hi <= 9.0
    assert stats.median_ci(values, seed=0) == (med, lo, hi)
    # a lower confidence gives a narrower (or equal) interval
    _, lo80, hi80 = stats.median_ci(values, confidence=0.8)
    assert lo <= lo80 and hi80 <= hi


def test_median_ci_narrows_with_more_samples():
    rng = np.random.default_rng(1)
    few = rng.normal(10.0, 1.0, 5)
    many = rng.normal(10.0, 1.0, 400)
    _, lo_few, hi_few = stats.median_ci(few)
    med, lo_many, hi_many = stats.median_ci(many)
    assert hi_many - lo_many < (hi_few - lo_few) / 2
    assert lo_many < 10.0 < hi_many


def test_median_ci_too_few_values_gives_no_interval():
    med, lo, hi = stats.median_ci([2.0, 4.0])
    assert med == 3.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(x) for x in stats.median_ci([]))
    assert stats.median_ci([1.0, float("nan"), 3.0, 2.0])[0] == 2.0  # NaN dropped
    with pytest.raises(ValueError, match="confidence"):
        stats.median_ci([1, 2, 3], confidence=95)


def test_cv_and_noisy_flag_at_ten_percent():
    df = pd.DataFrame({
        "loader": ["sync"] * 4 + ["threads"] * 4,
        "epoch_s": [1.00, 1.01, 0.99, 1.00,  # cv ~ 0.8%
                    0.50, 0.80, 0.40, 0.65],  # cv ~ 30%
    })
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
    over = [1.0 - 0.11, 1.0, 1.0 + 0.11]   # sd 0.11 / mean 1.0
    under = [1.0 - 0.09, 1.0, 1.0 + 0.09]
    assert stats.cv(over) > 0.10 > stats.cv(under)


def test_compare_overlapping_samples_is_no_clear_difference():
    a = [1.00, 1.05, 0.97, 1.02, 0.99]
    b = [1.01, 0.98, 1.04, 1.00, 0.96]
    c = stats.compare(a, b)
    assert c["verdict"] == "no clear difference"
    assert c["speedup_lo"] < 1.0 < c["speedup_hi"]


def test_compare_clear_difference_gives_speedup_with_interval():
    slow = [2.00, 2.05, 1.97, 2.02, 1.99]
    fast = [1.00, 1.02, 0.98, 1.01, 0.99]
    c = stats.compare(slow, fast)
    assert c["verdict"] == "B faster"
    assert c["speedup"] == pytest.approx(2.0, rel=0.02)
    assert 1.0 < c["speedup_lo"] <= c["speedup"] <= c["speedup_hi"]
    assert stats.compare(fast, slow)["verdict"] == "A faster"
    few = stats.compare([2.0], [1.0])
    assert few["verdict"] == "no clear difference" and few["note"] and few["speedup"] == 2.0


def test_mixed_hosts_warning():
    same = pd.DataFrame({"host_fingerprint": ["h1", "h1"], "torch_version": ["2.13", "2.13"]})
    assert stats.mixed_hosts_warning(same) is None
    mixed = pd.DataFrame({"host_fingerprint": ["h1", "h2"], "torch_version": ["2.13", "2.11"]})
    msg = stats.mixed_hosts_warning(mixed)
    assert "2 hosts" in msg and "2 torch versions" in msg and "host_fingerprint" in msg


def test_time_breakdown_shares_percentiles_and_startup():
    epochs = pd.DataFrame({
        "run_id": ["r"] * 3, "model_idx": 0, "rank": 0, "epoch": [0, 1, 2], "warmup": [True, False, False],
        "wall_s": [5.0, 2.0, 2.0], "ttfb_s": [1.5, 0.1, 0.1],
        "data_wait_s": [3.0, 1.0, 1.0], "h2d_s": [0.0, 0.2, 0.2], "compute_s": [1.0, 0.6, 0.6],
    })
    waits = np.r_[[0.1], np.linspace(0.001, 0.1, 100)]  # step 0 (the TTFB) then 100 steady steps
    steps = pd.DataFrame({"run_id": "r", "model_idx": 0, "rank": 0, "epoch": np.repeat([1, 2], 101),
                          "step": np.tile(np.arange(101), 2), "data_wait_s": np.tile(waits, 2)})
    warm_steps = steps.assign(epoch=0, data_wait_s=9.0)  # warm-up steps must not count
    out = stats.time_breakdown(epochs, pd.concat([steps, warm_steps]))["r"]
    assert out["data_wait_share"] == pytest.approx(0.5)
    assert out["h2d_share"] == pytest.approx(0.1)
    assert out["compute_share"] == pytest.approx(0.3)
    assert out["other_share"] == pytest.approx(0.1)
    assert out["ttfb_s"] == pytest.approx(0.1) and out["startup_s"] == pytest.approx(1.4)
    assert out["n_steps"] == 200
    assert out["data_wait_p50_s"] == pytest.approx(np.quantile(waits[1:], 0.5))
    assert out["data_wait_p50_s"] < out["data_wait_p90_s"] < out["data_wait_p99_s"] < 0.1


def test_speedup_vs_sequential_matches_baselines_in_the_same_sweep():
    def runs(mode, sps, sweep="s1", n_models=2, loader="sync"):
        return [{"sweep_id": sweep, "status": "done", "mode": mode, "n_models": n_models, "loader": loader,
                 "workload": "tensor", "model": "mlp", "width": 8, "model_b": "", "width_b": 0,
                 "samples_per_s": v} for v in sps]

    df = pd.DataFrame(
        runs("single", [100, 101, 99]) + runs("fused", [300, 305, 298], n_models=4)
        + runs("dual-sequential", [100, 99, 101]) + runs("dual-processes", [150, 149, 151])
        + runs("dual-threads", [100, 101, 99])
        + runs("single", [1000, 1000, 1000], sweep="other")  # another sweep: never a baseline
    )
    out = stats.speedup_vs_sequential(df).set_index("mode")
    assert out.loc["fused", "baseline_mode"] == "single" and out.loc["fused", "baseline_n"] == 3
    assert out.loc["fused", "speedup"] == pytest.approx(3.0, rel=0.02)   # 4 models in 4/3 of one model's time
    assert out.loc["fused", "verdict"] == "faster"
    assert out.loc["dual-processes", "speedup"] == pytest.approx(1.5, rel=0.02)
    assert out.loc["dual-processes", "baseline_mode"] == "dual-sequential"
    assert out.loc["dual-threads", "verdict"] == "no clear difference"
    lonely = stats.speedup_vs_sequential(pd.DataFrame(runs("fused", [300], sweep="alone")))
    assert lonely["verdict"].tolist() == ["no baseline"]
