"""engine/measure/throughput.py: one samples/s for a run, the same in the mode's figures and in the store."""

from __future__ import annotations

import pyarrow as pa
import pytest

from engine.measure.throughput import samples_per_s, span_s
from engine.modes._common import throughput
from engine.store._events import SAMPLE_FIELDS, summarize


def _epoch(model_idx: int, epoch: int, t_start: float, t_end: float, samples: int = 100, warmup: bool = False) -> dict:
    return {
        "model_idx": model_idx,
        "rank": 0,
        "epoch": epoch,
        "warmup": warmup,
        "samples": samples,
        "t_start": t_start,
        "t_end": t_end,
        "wall_s": t_end - t_start,
    }


def _no_samples() -> pa.Table:
    return pa.table({k: pa.array([], pa.float64()) for k in SAMPLE_FIELDS})


@pytest.mark.parametrize(
    "epochs",
    [
        [_epoch(0, 0, 0.0, 1.0, warmup=True), _epoch(0, 1, 1.0, 2.0), _epoch(0, 2, 2.5, 3.5)],  # a gap between epochs
        [_epoch(0, 1, 0.0, 2.0), _epoch(1, 1, 0.5, 3.0), _epoch(0, 2, 2.0, 4.0), _epoch(1, 2, 3.0, 5.0)],  # two models
    ],
)
def test_the_mode_and_the_store_give_a_run_the_same_samples_per_s(epochs):
    from_mode = throughput(epochs)["aggregate_samples_per_s"]
    from_store = summarize(epochs, _no_samples())["samples_per_s"]
    assert from_mode == pytest.approx(from_store)


def test_two_overlapping_models_count_their_shared_time_once():
    epochs = [_epoch(0, 0, 0.0, 2.0), _epoch(1, 0, 1.0, 3.0)]
    assert span_s(epochs) == 3.0
    assert samples_per_s(epochs) == pytest.approx(200 / 3.0)


def test_missing_values_count_as_nothing():
    epochs = [_epoch(0, 0, 0.0, 2.0), {"samples": None, "t_start": None, "t_end": None}]
    assert samples_per_s(epochs) == pytest.approx(50.0)
    assert samples_per_s([{"samples": 5}]) is None
    assert samples_per_s(epochs, span=0.0) is None


def test_the_store_reads_malformed_times_and_samples_as_missing_rather_than_failing():
    epochs = [_epoch(0, 1, 0.0, 2.0), {**_epoch(0, 2, 2.0, 4.0), "samples": "x", "t_end": float("nan")}]
    assert summarize(epochs, _no_samples())["samples_per_s"] == pytest.approx(100 / 2.0)
