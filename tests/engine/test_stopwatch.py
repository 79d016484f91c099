"""The engine's epoch time agrees with an independent stopwatch around a plain hand-written loop.

The engine's single-mode loop (EpochTimer, RunLog and all) and a plain `for x, y in DataLoader(...)`
loop train the same model on the same batches in this process, interleaved three times so machine
drift hits both alike. The engine's fastest steady epoch must not be more than 5% below the plain loop's:
a busy machine only ever adds time, so each loop's minimum is its least disturbed measurement, and an
engine timer that missed part of the epoch (the data wait, say) would read short. How much slower the
engine's loop is (its overhead) is a speed figure, so it is measured in bench/loaders.py, not here: on
2 shared cores a timed upper limit fails whenever anything else runs (1.43 at load 8).
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from engine.config import RunConfig
from engine.loaders._base import epoch_batches
from engine.models.mlp import MLP
from engine.modes import RunContext
from engine.modes.single import run as run_single
from engine.runlog import RunLog, read_events
from engine.workloads.tensor import TensorWorkload
from tests._wait import quiet_cores

# About half a second per epoch on one idle core, so scheduler noise is a small part; a third of it is data
# work (work_us), so a stopwatch that missed the data wait would be off by far more than 5%.
CFG = {
    "workload": "tensor",
    "n_samples": 1024,
    "work_us": 300,
    "image_size": 32,
    "model": "mlp",
    "width": 512,
    "depth": 3,
    "batch_size": 64,
    "epochs": 4,
    "warmup_epochs": 1,
    "loader": "sync",
    "device": "cpu",
    "sample_hz": 0.0,
}


def engine_epochs(cfg: RunConfig, run_dir) -> list[float]:
    with RunLog(run_dir) as log:
        run_single(RunContext(cfg=cfg, log=log, device=torch.device("cpu")))
    return [e["wall_s"] for e in read_events(run_dir) if e["type"] == "epoch" and not e["warmup"]]


class _Plan(torch.utils.data.Sampler):
    """The engine's batch plan, so both loops see identical batches."""

    def __init__(self, cfg: RunConfig):
        self.cfg, self.epoch = cfg, 0

    def __iter__(self):
        return iter(epoch_batches(self.cfg.n_samples, self.cfg.batch_size, self.cfg.seed, self.epoch))

    def __len__(self) -> int:
        return -(-self.cfg.n_samples // self.cfg.batch_size)


def plain_epochs(cfg: RunConfig) -> list[float]:
    torch.manual_seed(cfg.seed)
    dataset = TensorWorkload(cfg)
    model = MLP(dataset.sample_shape, dataset.num_classes, cfg.width, cfg.depth)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    plan = _Plan(cfg)
    loader = DataLoader(dataset, batch_sampler=plan, num_workers=0)
    times = []
    for epoch in range(cfg.epochs):
        plan.epoch = epoch
        t0 = time.perf_counter()
        for x, y in loader:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        times.append(time.perf_counter() - t0)
    return times[cfg.warmup_epochs :]


@pytest.mark.quiet  # NOTE: each loop's minimum is its least disturbed epoch only if both see the quiet moments:
# under another test's load the plain loop's minimum came out 1.35x the engine's (CI, 2026-11-25)
def test_engine_epoch_time_matches_an_independent_stopwatch(tmp_path):
    cfg = RunConfig.from_dict(CFG)
    threads = torch.get_num_threads()
    # NOTE: one intra-op thread: on a busy 2-core machine a 2-thread matmul waits for its slowest thread,
    # which adds noise to both loops alike but makes it far larger than the 5% being checked.
    torch.set_num_threads(1)
    try:
        for attempt in range(3):  # NOTE: measured again, once the other processes leave the cores (up to 20 s), when
            # short: a slow stretch of this VM (1.5-2x for 100-250 ms) over every plain epoch of a round reads short
            # once; an engine timer that misses part of the epoch reads short on every attempt
            if attempt:
                quiet_cores()
            rounds, engine_all, plain_all = [], [], []
            for i in range(3):
                if i % 2:  # alternate which loop goes first, so neither always runs on a warmer machine
                    plain = plain_epochs(cfg)
                    engine = engine_epochs(cfg, tmp_path / f"run{attempt}-{i}")
                else:
                    engine = engine_epochs(cfg, tmp_path / f"run{attempt}-{i}")
                    plain = plain_epochs(cfg)
                rounds.append((statistics.median(engine), statistics.median(plain)))
                engine_all += engine
                plain_all += plain
            ratio = min(engine_all) / min(plain_all)
            if ratio >= 0.95:
                break
    finally:
        torch.set_num_threads(threads)
    assert ratio >= 0.95, f"the engine's epoch reads short: (engine s, plain s) per round {rounds}: {ratio:.3f}"


def test_stored_epoch_times_fit_inside_a_clock_around_the_runner(tmp_path):
    """The path that produces stored numbers: launch() (subprocess, sampler on), ingest, the store. An
    independent clock around it must contain every stored epoch, and their walls must add up to less
    than it: an epoch timer that started late or ran on after the epoch would show here."""
    from engine.run.runner import launch  # noqa: PLC0415
    from engine.store import get_epochs, get_run  # noqa: PLC0415

    cfg = RunConfig.from_dict({**CFG, "n_samples": 256, "epochs": 3, "sample_hz": 20.0, "bound": False, "threads": 1})
    db = tmp_path / "s.duckdb"
    wall_t0, perf_t0 = time.time(), time.perf_counter()
    result = launch(cfg, db=db)
    elapsed, wall_t1 = time.perf_counter() - perf_t0, time.time()
    assert result.status == "done", result.error
    epochs = get_epochs(result.run_id, db=db)
    assert len(epochs) == cfg.epochs
    assert (epochs["t_start"] >= wall_t0).all() and (epochs["t_end"] <= wall_t1).all()
    assert ((epochs["t_end"] - epochs["t_start"]) - epochs["wall_s"]).abs().max() < 0.01
    assert epochs["wall_s"].sum() < elapsed
    assert (epochs["t_start"].iloc[1:].to_numpy() >= epochs["t_end"].iloc[:-1].to_numpy()).all()  # no overlap
    row = get_run(result.run_id, db=db)
    assert row["mean_cpu_pct"] is not None  # the sampler was on
    assert row["samples_per_s"] * (epochs["t_end"].iloc[-1] - epochs["t_start"].iloc[1]) == pytest.approx(
        cfg.n_samples * (cfg.epochs - cfg.warmup_epochs)
    )
