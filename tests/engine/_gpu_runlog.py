"""A GPU run as its run child records it, for tests on machines without one: its RunLog written through the real
RunLog writer, with the GPU clock's fields of each epoch (engine/measure/timers.py) and NVML samples.

The figures are an H100-like run of a slow loader: per steady epoch of 0.50 s, the compute stream sat idle
0.21 s (42%): 0.19 s of it while the host waited on the loader (38%), 0.012 s waiting for copies, 0.008 s other.
"""

from __future__ import annotations

from pathlib import Path

from engine.config import RunConfig
from engine.runlog import RunLog

__all__ = ["STEADY", "WARMUP", "write_gpu_run"]

STEADY = {
    "wall_s": 0.50,
    "gpu_idle_s": 0.21,
    "gpu_idle_data_s": 0.19,
    "gpu_idle_copy_s": 0.012,
    "gpu_idle_other_s": 0.008,
    "copy_wait_s": 0.015,
}
WARMUP = {
    "wall_s": 0.90,
    "gpu_idle_s": 0.60,
    "gpu_idle_data_s": 0.30,
    "gpu_idle_copy_s": 0.20,
    "gpu_idle_other_s": 0.10,
    "copy_wait_s": 0.25,
}  # left out of the run's summary


def write_gpu_run(runs_root: Path, run_id: str, *, epochs: list[dict] | None = None, **fields) -> Path:
    """A finished GPU run's RunLog in runs_root/run_id: one warm-up epoch and two steady ones (or `epochs`, each
    with the GPU fields and wall_s, the first a warm-up)."""
    epochs = epochs or [WARMUP, STEADY, STEADY]
    cfg = RunConfig(
        **{"workload": "jpeg", "model": "cnn", "loader": "threads", "workers": 2, "device": "cuda:0", **fields}
    ).to_dict()  # as stored: the constructor does not check, so no GPU is needed here
    t, gpu_run = 1_790_000_000.0, cfg["device"].startswith("cuda")  # device="cpu": the same run, no GPU figures
    with RunLog(runs_root / run_id) as rl:
        rl.write(
            "start",
            run_id=run_id,
            config=cfg,
            device=cfg["device"],
            pid=1,
            host={"hostname": "gpu-box", "cores": 16, "gpu_name": "NVIDIA H100 80GB HBM3"},
        )
        rl.write(
            "startup",
            startup_imports_s=6.1,
            startup_cuda_s=2.4 if gpu_run else None,
            startup_build_s=3.0,
            startup_first_batch_s=0.9,
            startup_s=12.4 if gpu_run else 10.0,
        )
        for i, gpu in enumerate(epochs):
            wall = gpu["wall_s"]
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=i,
                warmup=i == 0,
                samples=512,
                samples_per_s=512 / wall,
                ttfb_s=0.05,
                data_wait_s=0.30,
                h2d_s=0.01,
                compute_s=0.25,
                n_steps=8,
                t_start=t,
                t_end=t + wall,
                loss=2.3,
                steps=[[s, 0.03, 0.001, 0.03, 0.06] for s in range(8)],
                **gpu,
            )
            t += wall
        nvml = [(40.0, 3_000_000_000), (60.0, 3_400_000_000), (56.0, 3_200_000_000)] if gpu_run else [(None, None)]
        rl.write("samples", rows=[[t + k, 150.0, 2_000_000_000, util, mem] for k, (util, mem) in enumerate(nvml)])
        rl.write("summary", calibration_s=1.7, peak_rss_bytes=2_000_000_000)
        rl.write("end", status="done", error=None)
    return runs_root / run_id
