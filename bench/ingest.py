"""Ingest benchmark: step rows/s of RunLog -> DuckDB for a 1-million-step RunLog, and what a resumed
(incremental) ingest costs after the log grows by 10k steps.

    .venv/bin/python bench/ingest.py [--steps 1000000] [--steps-per-epoch 10000] [--append 10000] [--cores 2]

The RunLog is written by the real writer (engine.runlog.RunLog, one `epoch` event per epoch with its
steps, plus `samples` rows as the sampler writes them) into a temporary folder, then ingested into a
temporary store with engine.store.ingest_run, exactly as the runner does after a run. Then `--append`
more steps (one more epoch) are written and the same call ingests again: it resumes from the byte
offset the store holds, so its cost should follow the new rows, not the whole log. Target: >= 100k
step rows/s on 2 cores (--cores 2 pins this process and DuckDB's threads to two CPUs).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import RunConfig  # noqa: E402
from engine.runlog import RunLog  # noqa: E402
from engine.store import connect, ingest_run  # noqa: E402


def write_epochs(rl: RunLog, first: int, n_epochs: int, steps_per_epoch: int, rng: random.Random) -> None:
    for ep in range(first, first + n_epochs):
        steps = [
            [s, rng.random() * 1e-3, rng.random() * 1e-4, rng.random() * 1e-2, rng.random() * 2e-2]
            for s in range(steps_per_epoch)
        ]
        wall = sum(s[4] for s in steps)
        rl.write(
            "epoch",
            model_idx=0,
            rank=0,
            epoch=ep,
            warmup=ep == 0,
            wall_s=wall,
            samples=32 * steps_per_epoch,
            samples_per_s=32 * steps_per_epoch / wall,
            ttfb_s=0.01,
            data_wait_s=sum(s[1] for s in steps),
            h2d_s=sum(s[2] for s in steps),
            compute_s=sum(s[3] for s in steps),
            n_steps=steps_per_epoch,
            t_start=float(ep),
            t_end=ep + wall,
            loss=1.0 / (ep + 1),
            steps=steps,
        )
        rl.write("samples", rows=[[ep + i / 10, 150.0, 2**30, None, None] for i in range(10)])


def count_steps(db: Path) -> int:
    with connect(db, read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM steps").fetchone()[0]


def timed_ingest(run_dir: Path, db: Path) -> float:
    t0 = time.perf_counter()
    ingest_run(run_dir, db=db)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--steps-per-epoch", type=int, default=10_000)
    p.add_argument("--append", type=int, default=10_000, help="steps appended (one epoch) before the re-ingest")
    p.add_argument("--cores", type=int, default=2, help="CPUs to pin to (0: all)")
    args = p.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cores])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n_epochs = max(1, args.steps // args.steps_per_epoch)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="loaderlab-bench-ingest-") as tmp:
        db, run_dir = Path(tmp) / "bench.duckdb", Path(tmp) / "runs" / "bench-run"
        t0 = time.perf_counter()
        with RunLog(run_dir) as rl:
            rl.write("start", run_id="bench-run", config=RunConfig().to_dict(), host={"cores": cores}, pid=os.getpid())
            write_epochs(rl, 0, n_epochs, args.steps_per_epoch, rng)
        write_s = time.perf_counter() - t0
        size_mb = (run_dir / "events.jsonl").stat().st_size / 2**20
        connect_s = timed_ingest_empty(db)
        full_s = timed_ingest(run_dir, db)
        rows = count_steps(db)
        with RunLog(run_dir) as rl:
            write_epochs(rl, n_epochs, 1, args.append, rng)
            rl.write("end", status="done", error=None)
        append_s = timed_ingest(run_dir, db)
        added = count_steps(db) - rows
    print(
        f"machine: {platform.processor() or platform.machine()}, {cores} cores used, Python "
        f"{platform.python_version()}, duckdb {duckdb.__version__}, {platform.system()} {platform.release()}"
    )
    print(f"RunLog: {rows:,} steps in {n_epochs} epochs, {size_mb:.1f} MiB, written in {write_s:.2f} s")
    print(
        f"ingest {rows:,} step rows in {full_s:.2f} s: {rows / full_s:,.0f} rows/s "
        f"(store open + schema alone: {connect_s:.2f} s)"
    )
    print(
        f"append {added:,} steps, re-ingest in {append_s:.3f} s: {added / append_s:,.0f} rows/s; "
        f"{append_s / full_s:.1%} of the full ingest for {added / max(rows, 1):.1%} of the rows"
    )


def timed_ingest_empty(db: Path) -> float:
    """The fixed cost every ingest pays (open, lock, schema check), measured apart on the new store."""
    t0 = time.perf_counter()
    with connect(db, read_only=False):
        pass
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
