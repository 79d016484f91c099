"""`ddp`: data parallel over world_size processes with torch.distributed (gloo on CPU, nccl on CUDA).

Launch: the engine spawns world_size ranks itself (torch.multiprocessing, spawn) that meet at a free
port on 127.0.0.1 (MASTER_ADDR/MASTER_PORT). Under torchrun (RANK, WORLD_SIZE and LOCAL_RANK set) the
run joins that group as its rank instead of spawning, and writes its own rank's epochs.

GPUs: one per rank (NCCL). With device cuda:N, local rank r runs on cuda:N + r (auto and cuda mean N = 0);
the ranks on this node (world_size, or torchrun's LOCAL_WORLD_SIZE) must fit in the GPUs this process
sees (after CUDA_VISIBLE_DEVICES), else a ConfigError names world_size (or WORLD_SIZE) before any rank starts.

Sharding: rank r owns samples r, r + W, r + 2W, ... (ShardDataset), so every sample of an epoch is
trained exactly once across ranks; each rank's loader shuffles its shard per epoch. When the shards
need different step counts, DDP's join() lets the rank that runs out shadow the others' all-reduces.

All-reduce time (allreduce_s in each rank's epoch event): a DDP comm hook runs DDP's default all-reduce
and times each gradient bucket from launch (during backward) to completion: perf_counter on CPU, CUDA
events on GPU, read once at epoch end. Buckets overlap backward compute and each other, so the sum is
the time communication was in flight, not the time it added to the step.

    python -m engine run --mode ddp --world-size 2
"""

from __future__ import annotations

import gc
import logging
import math
import os
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.distributed as dist

from engine import devices
from engine.errors import ConfigError
from engine.calibrate import Calibrator, Phase
from engine.loaders import check_ranks, epoch_batches, open_loader
from engine.models import build_model, make_optimizer
from engine.modes._base import ModeSpec, RunContext
from engine.modes._common import Recorder, epoch_payload, fail_point, step_builder, train_epoch
from engine.modes._ddp import AllreduceTimer, cuda_ranks, free_port, timed_allreduce, torchrun_env
from engine.modes._procs import ChildGroup, Link
from engine.workloads import build_dataset, is_stream, shard_of

if TYPE_CHECKING:  # annotations only: the run side does not import the config (engine/registry.py says why)
    from engine.config import RunConfig

__all__ = ["SPEC", "bound", "run", "torchrun_env"]  # torchrun_env: the runner asks what torchrun started

log = logging.getLogger(__name__)


def _rank_main(
    rank: int,
    cfg: RunConfig,
    world: int,
    device_name: str,
    threads: int,
    port: int | None,
    emit: Callable[[dict[str, Any]], None],
    ready: Callable[[], None] = lambda: None,
) -> None:
    """One rank: join the group, train its shard, emit one epoch record per epoch, leave the group."""
    device = torch.device(device_name)
    torch.set_num_threads(threads)
    if port is not None:  # spawned by us; torchrun sets these itself
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=world)
    try:
        _train_rank(cfg, device, rank, world, emit, ready)
    finally:
        # NOTE: DDP, its reducer and their pending work were freed when _train_rank returned (collected here
        # in case of a cycle), so the group is not torn down later by the interpreter's teardown, where gloo's
        # threads can still hold tensors and abort the process (SIGABRT, "terminate called without an
        # active exception")
        gc.collect()
        dist.destroy_process_group()


def _train_rank(
    cfg: RunConfig,
    device: torch.device,
    rank: int,
    world: int,
    emit: Callable[[dict[str, Any]], None],
    ready: Callable[[], None],
) -> None:
    # --- build: this rank's shard; the same seeded weights on every rank (DDP broadcasts rank 0's anyway) ---
    base = build_dataset(cfg)
    dataset = shard_of(base, rank, world)
    # NOTE: a stream's parts may need different step counts, unknown before they run: {0, 1} stands for that, so
    # a stream always trains under join()
    steps = (
        {0, 1}
        if is_stream(base)
        else {math.ceil(len(range(r, len(base), world)) / cfg.batch_size) for r in range(world)}
    )
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, dataset.sample_shape, dataset.num_classes).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    comm = AllreduceTimer(device)
    ddp.register_comm_hook(comm, timed_allreduce)
    opt = make_optimizer(ddp.parameters(), cfg.optimizer, cfg.lr)

    with open_loader(dataset, cfg, device) as loader:
        ready()
        for epoch in range(cfg.epochs):
            fail_point(rank, epoch)
            # --- one epoch of this rank's shard; uneven step counts need join() to avoid a hang ---
            with ddp.join(enable=len(steps) > 1):
                record = train_epoch(ddp, opt, loader.epoch(epoch), device)
            if is_stream(base):
                check_ranks(loader, epoch)  # each sample once across the ranks: every rank raises the same
            # --- record: this rank's epoch with its all-reduce time ---
            record["allreduce_s"] = comm.take_seconds()
            emit(epoch_payload(cfg, 0, rank, epoch, record))


def _spawned_rank(rank: int, cfg: RunConfig, world: int, names: list[str], threads: int, port: int, link: Link) -> None:
    _rank_main(rank, cfg, world, names[rank], threads, port, link.emit, link.ready)


def run(ctx: RunContext) -> None:
    cfg, device = ctx.cfg, ctx.device
    recorder = Recorder(ctx, per="rank")
    allreduce: list[float] = []

    def write(payload: dict[str, Any]) -> None:
        allreduce.append(0.0 if payload["warmup"] else payload["allreduce_s"])
        recorder.write(payload)

    joined = torchrun_env()
    if joined is not None:
        rank, world, local, local_world = joined
        if world != cfg.world_size:
            log.warning("torchrun's WORLD_SIZE=%d overrides world_size=%d", world, cfg.world_size)
        if not 0 <= local < local_world:
            raise ConfigError("LOCAL_RANK", f"torchrun's LOCAL_RANK={local} is outside 0..{local_world - 1}")
        name = _rank_devices(device, local_world, "WORLD_SIZE")[local] if device.type == "cuda" else "cpu"
        _rank_main(rank, cfg, world, name, torch.get_num_threads(), None, write)
    else:
        world = cfg.world_size
        names = _rank_devices(device, world, "world_size") if device.type == "cuda" else ["cpu"] * world
        # NOTE: ranks on one CPU share its cores: each gets its share of intra-op threads (at least 1)
        threads = max(1, torch.get_num_threads() // world)
        with ChildGroup(_spawned_rank, world, (cfg, world, names, threads, free_port()), write, who="rank") as group:
            group.wait()
    recorder.finish()
    # steady-state all-reduce seconds summed over ranks and epochs
    ctx.summary.update(allreduce_s_total=sum(allreduce), world_size_run=world)


def _rank_devices(device: torch.device, local_world: int, field: str) -> list[str]:
    """This node's rank devices, from the configured GPU on (cuda:N honoured, not always cuda:0)."""
    return cuda_ranks(device.index or 0, local_world, torch.cuda.device_count(), field)


def bound(cal: Calibrator) -> list[Phase] | None:
    """Rank 0 only: its shard through the loader, its share of the batches through one model, at the world
    size that ran (torchrun's); all-reduce is not in the bound."""
    joined = torchrun_env()
    if joined is not None and joined[0] != 0:
        return None
    world = int(cal.ctx.summary.get("world_size_run") or (joined[1] if joined else cal.cfg.world_size))
    n = cal.cfg.n_samples
    full = len(epoch_batches(n, cal.cfg.batch_size, cal.cfg.seed, 1))
    fraction = math.ceil(len(range(0, n, world)) / cal.cfg.batch_size) / full
    compute = cal.compute(f"ddp-{world}", step_builder(cal.cfg, 0, cal.device), fraction=fraction)[0]
    loader = cal.loader(shard=(0, world))
    # every rank loads its shard and trains its share on this host's cores at once (rank 0's stand for each)
    return [Phase(loader.seconds, compute.seconds, None, loader.cpu_s * world, compute.cpu_s * world, cal.overlaps)]


def _check(cfg: RunConfig) -> None:
    device = devices.resolve(cfg.device)
    if device.type == "cuda":
        # under torchrun its WORLD_SIZE (per node: LOCAL_WORLD_SIZE) is what runs, not world_size
        joined = torchrun_env()
        _rank_devices(device, *((joined[3], "WORLD_SIZE") if joined else (cfg.world_size, "world_size")))
    if cfg.world_size > cfg.n_samples:
        raise ConfigError(
            "world_size",
            f"every rank needs at least one sample: world_size {cfg.world_size} > n_samples {cfg.n_samples}",
        )


SPEC = ModeSpec(
    run=run,
    check=_check,
    doc="data parallel over world_size processes (torch.distributed DDP)",
    bound=bound,
    own_processes=True,
)
