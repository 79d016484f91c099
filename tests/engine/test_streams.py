"""Streams (the user's IterableDataset) through every loader and ddp, each epoch exactly once, checked.

Real runs through the runner: real worker processes, real gloo ranks, a real DuckDB file; no mocks.

    .venv/bin/python -m pytest tests/engine/test_streams.py -q
"""

from __future__ import annotations

import importlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
import torch

from engine.cli import main
from engine.config import RunConfig
from engine.names import DEFAULT_CLASSES
from engine.workloads import build_dataset

from tests.engine._mode_runs import launch_mode

ROOT = Path(__file__).resolve().parents[2]

STREAMS = '''
import random

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import IterableDataset, get_worker_info


class Counted(IterableDataset):
    """n samples with keys; a random transform from the global generators (the lab seeds it per item)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in self._mine():
            yield torch.full((3, 8, 8), float(i)) + torch.rand(3, 8, 8) * random.random(), i % 3, f"s{i}"

    def _mine(self):
        return range(self.n)


class Sharded(Counted):
    """Shards the lab can hand out: four row ranges, read one at a time."""

    def shards(self):
        return [range(s, min(s + 5, self.n)) for s in range(0, self.n, 5)]

    def iter_shard(self, rows):
        for i in rows:
            yield torch.full((3, 8, 8), float(i)), i % 3, f"s{i}"


class Naive(Counted):
    """The bug of datasets #5360 / Lightning #15734: it claims to shard itself and ignores get_worker_info."""

    shards_itself = True


class Careful(Counted):
    """Shards itself right: by the rank, then by the worker."""

    shards_itself = True

    def _mine(self):
        info = get_worker_info()
        rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        return range(rank * workers + worker, self.n, world * workers)


class Unsized(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield torch.full((3, 8, 8), float(i)), i % 3


class Drained:
    """An iterable whose iter() does not start over: the second epoch gets nothing."""

    def __init__(self, n):
        self._it = iter([(torch.zeros(3, 8, 8), i % 3) for i in range(n)] * 1)
        self._first = True

    def __iter__(self):
        return self._it if not self._first else self._once()

    def _once(self):
        self._first = False
        return self._it


def counted(n_samples, **_):
    return Counted(n_samples)

def sharded(n_samples, **_):
    return Sharded(n_samples)

def naive(n_samples, **_):
    return Naive(n_samples)

def careful(n_samples, **_):
    return Careful(n_samples)

def unsized(n_samples, **_):
    return Unsized(n_samples)

def drained(n_samples, **_):
    return Drained(n_samples)

def one_shot(n_samples, **_):
    return ((torch.zeros(3, 8, 8), 0) for _ in range(n_samples))

class Words(IterableDataset):
    def __iter__(self):
        yield "not an item"

def words(**_):
    return Words()

def net(in_shape, num_classes, **_):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_shape[0] * in_shape[1] * in_shape[2], num_classes))
'''


@pytest.fixture(scope="module", autouse=True)
def plugin_dir(tmp_path_factory, request) -> Iterator[Path]:
    """One folder on PYTHONPATH for the whole module, set before the warm parent starts: these tests check what
    runs count, not how a run starts, so their runs fork from one warm parent (tests/conftest.py warm_runs)."""
    folder = tmp_path_factory.mktemp("streams")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        mp.setenv("PYTHONPATH", f"{folder}:{ROOT}")
        # NOTE: after PYTHONPATH is set: a parent started with another one would refuse every run (it starts cold)
        request.getfixturevalue("warm_runs")
        yield folder


@pytest.fixture(scope="module")
def plug(plugin_dir) -> str:
    """An importable plugin module of streams; the run child and its workers find it too. One per module: no test
    edits it, and the launcher's preflight checks a config once for all the loaders that deliver it."""
    name = f"streams_{secrets.token_hex(4)}"
    (plugin_dir / f"{name}.py").write_text(STREAMS)
    importlib.invalidate_caches()
    return name


def run_stream(store: Path, plug: str, workload: str, **fields):
    fields = {
        "workload": f"{plug}:{workload}",
        "model": f"{plug}:net",
        "n_samples": 20,
        "batch_size": 4,
        "check_samples": True,
        **fields,
    }
    result, events = launch_mode(store, **fields)
    return result, samples_per_epoch(events)


def samples_per_epoch(events: list[dict]) -> dict[int, int]:
    """Every rank's samples of each epoch, together."""
    out: dict[int, int] = {}
    for e in events:
        if e["type"] == "epoch":
            out[e["epoch"]] = out.get(e["epoch"], 0) + e["samples"]
    return out


def stored(store: Path, *columns: str) -> tuple:
    with duckdb.connect(str(store), read_only=True) as conn:
        return conn.execute(f"SELECT {', '.join(columns)} FROM runs").fetchone()


@pytest.mark.parametrize("loader, workers", [("sync", 0), ("prefetch", 0), ("threads", 2), ("processes", 2)])
def test_a_stream_runs_through_every_loader_each_epoch_exactly_once(store, plug, loader, workers):
    result, per_epoch = run_stream(store, plug, "counted", loader=loader, workers=workers)
    assert result.status == "done", result.error
    assert per_epoch == {0: 20, 1: 20}
    split, note = stored(store, "stream_split", "stream_note")
    assert split == "item" and (("worker count" in note) if workers > 1 else note == "")


def test_a_stream_under_ddp_is_split_across_ranks_then_workers_exactly_once(store, plug):
    result, per_epoch = run_stream(store, plug, "counted", mode="ddp", world_size=2, loader="processes", workers=2)
    assert result.status == "done", result.error
    assert per_epoch == {0: 20, 1: 20}  # both ranks' samples together: each sample once


@pytest.mark.parametrize("mode", ["single", "ddp"])
def test_a_stream_that_exposes_shards_is_split_by_shard(store, plug, mode):
    result, per_epoch = run_stream(store, plug, "sharded", mode=mode, loader="threads", workers=2)
    assert result.status == "done", result.error
    assert per_epoch == {0: 20, 1: 20} and stored(store, "stream_split") == ("shard",)


def test_a_stream_that_shards_itself_right_is_left_alone(store, plug):
    result, per_epoch = run_stream(store, plug, "careful", mode="ddp", world_size=2, loader="processes", workers=2)
    assert result.status == "done", result.error
    assert per_epoch == {0: 20, 1: 20} and stored(store, "stream_split") == ("self",)


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"loader": "processes", "workers": 2}, "2 workers each yielded all 20 samples"),
        ({"mode": "ddp", "world_size": 2}, "2 ranks each yielded all 20 samples"),
    ],
)
def test_the_duplicate_bug_of_a_stream_that_ignores_get_worker_info_fails_the_run_in_one_line(
    store, plug, fields, words
):
    result, _ = run_stream(store, plug, "naive", **fields)
    assert result.status == "failed"
    assert words in result.error and "get_worker_info()" in result.error and "\n" not in result.error, result.error


def test_repeated_keys_are_caught_even_when_the_count_is_right(plug):
    """The identity check: parts that deliver the right number of samples, some of them twice."""
    from engine.workloads import EpochTally, StreamMismatch

    ds = build_dataset(RunConfig.from_dict({"workload": f"{plug}:counted", "n_samples": 4, "check_samples": True}))
    tally = EpochTally(workers=2)
    tally.add(0, ["s0", "s1"])
    tally.add(1, ["s1", "s3"])
    with pytest.raises(StreamMismatch, match="repeated 1 of its samples.*worker 0, worker 1"):
        tally.check(ds, 0)


def test_an_unsized_stream_ends_its_epochs_where_it_stops_and_gets_a_bound(store, plug):
    result, per_epoch = run_stream(store, plug, "unsized", loader="threads", workers=2, bound=True, check_samples=False)
    assert result.status == "done", result.error
    assert per_epoch == {0: 20, 1: 20}
    bound_s, error, note = stored(store, "bound_s", "bound_error", "stream_note")
    assert bound_s > 0 and error is None and "no length" in note


def test_every_part_sees_the_same_items_with_the_same_transforms(plug):
    """Per-item seeds: the items of one part and of two parts are equal, key by key (random transform included)."""
    ds = build_dataset(RunConfig.from_dict({"workload": f"{plug}:counted", "n_samples": 10, "seed": 3}))
    whole = {k: x for x, _, k in ds.part(1, 0, 1)}
    split = {k: x for w in range(2) for x, _, k in ds.part(1, w, 2)}
    assert whole.keys() == split.keys() == {f"s{i}" for i in range(10)}
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    other = {k: x for x, _, k in ds.part(2, 0, 1)}
    assert not all(torch.equal(whole[k], other[k]) for k in whole)  # another epoch, another augmentation


def test_an_iterable_that_does_not_start_over_fails_in_one_line(store, plug):
    result, _ = run_stream(store, plug, "drained", loader="sync", check_samples=False)
    assert result.status == "failed" and "does not start over" in result.error and "\n" not in result.error


@pytest.mark.parametrize(
    "workload, words",
    [
        ("one_shot", "exhausted after one epoch"),
        ("words", "not an (x, y) or (x, y, key) tuple"),
    ],
)
def test_bad_streams_exit_2_in_one_line(store, plug, capsys, workload, words):
    args = [
        "run",
        "--workload",
        f"{plug}:{workload}",
        "--model",
        f"{plug}:net",
        "--n-samples",
        "8",
        "--image-size",
        "8",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--db",
        str(store),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: workload: ") and words in err[0], err


@pytest.mark.parametrize(
    "fields",
    [
        {"loader": "sync"},
        {"loader": "prefetch"},
        {"loader": "threads", "workers": 2},
        {"loader": "processes", "workers": 2},
        {"mode": "ddp", "world_size": 2},
    ],
)
def test_the_streaming_example_reads_each_parquet_row_once_an_epoch(store, fields):
    example = {"workload": "examples.streaming.data:build", "model": "examples.own_pipeline.nets:resnet"}
    result, events = launch_mode(
        store, **example, n_samples=96, image_size=16, width=8, depth=1, batch_size=16, check_samples=True, **fields
    )
    assert result.status == "done", result.error
    assert samples_per_epoch(events) == {0: 96, 1: 96} and stored(store, "stream_split", "num_classes") == (
        "shard",
        DEFAULT_CLASSES,
    )


def test_the_probe_measures_a_streams_batches_from_its_own_pass(plug):
    from engine.predict.probe import probe
    from engine.modes._common import step_builder

    cfg = RunConfig.from_dict(
        {
            "workload": f"{plug}:counted",
            "model": f"{plug}:net",
            "n_samples": 20,
            "batch_size": 4,
            "image_size": 8,
            "device": "cpu",
        }
    )
    out = probe(cfg, torch.device("cpu"), step_builder(cfg, 0, torch.device("cpu")))
    assert (out["batches"], out["n_samples"]) == (5, 20) and out["load_wall_s"] > 0
    assert out["compute"]["1"]["wall_s"] > 0
