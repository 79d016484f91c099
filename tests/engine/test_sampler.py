"""engine.measure.sampler: the sampled RSS covers child processes (loader workers), not just the run itself."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from engine.measure.sampler import Sampler
from engine.runlog import RunLog, read_events

MB = 2**20
# A child that makes 200 MiB resident (bytes repetition writes every page), says so, and waits for stdin to close.
_CHILD = ("import sys; block = b'\\x01' * (200 * 2**20); print('ready', flush=True); sys.stdin.read()")


def test_sampler_sees_child_process_memory(tmp_path):
    parent_rss = psutil.Process().memory_info().rss
    children = [subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    try:
        with RunLog(tmp_path / "run") as log, Sampler(log, hz=20.0, flush_every_s=0.2) as sampler:
            for child in children:
                assert child.stdout.readline().strip() == "ready"
            time.sleep(0.5)  # about 10 samples with both children holding their memory
        summary = sampler.summary()
    finally:
        for child in children:
            child.stdin.close()
            child.wait(timeout=30)
    # two children x 200 MiB on top of this process
    assert summary["peak_rss_bytes"] > parent_rss + 300 * MB
    assert summary["mean_cpu_pct"] is not None
    rows = [r for e in read_events(tmp_path / "run") if e["type"] == "samples" for r in e["rows"]]
    assert len(rows) >= 5
    assert max(r[2] for r in rows) == summary["peak_rss_bytes"]  # [t, cpu, rss, gpu_util, gpu_mem]
    assert rows[0][3] is None  # no GPU asked for: no GPU columns


def test_sampler_off_writes_nothing(tmp_path):
    with RunLog(tmp_path / "run") as log, Sampler(log, hz=0.0) as sampler:
        time.sleep(0.1)
    assert sampler.summary() == {"peak_rss_bytes": None, "mean_cpu_pct": None}
    assert not [e for e in read_events(tmp_path / "run") if e["type"] == "samples"]
