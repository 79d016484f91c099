"""A tiny real store for tests that must not change it: one run written as a RunLog and ingested."""

from __future__ import annotations

from pathlib import Path

from engine.config import RunConfig
from engine.runlog import RunLog
from engine.store import ingest_run


def one_run_store(root: Path) -> Path:
    with RunLog(root / "runs" / "r1") as rl:
        rl.write("start", run_id="r1", config=RunConfig(loader="threads", workers=2).to_dict(), host={})
        for ep in range(2):
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=ep,
                warmup=ep == 0,
                wall_s=1.5,
                samples=10,
                ttfb_s=0.1,
                data_wait_s=0.1,
                h2d_s=0.0,
                compute_s=1.0,
                n_steps=1,
                steps=[[0, 0.1, 0.0, 1.0, 1.1]],
            )
        rl.write("end", status="done", error=None)
    path = root / "loaderlab.duckdb"
    ingest_run(root / "runs" / "r1", db=path)
    return path
