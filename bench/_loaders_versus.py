"""DataLoader, torchdata.nodes and SPDL side by side: `bench/loaders.py --versus` (see that script's docstring).

Each measurement is one fresh process (a child of this one) that builds the workload's dataset and one loader at
`workers`, loads one untimed epoch (worker start-up, warm files), then `--epochs` timed epochs with no model, and
prints one JSON line: the median epoch's seconds (its time to first batch included: spdl builds its pipeline per
epoch, a persistent DataLoader does not, and that difference is the loader's), the CPU-seconds per timed epoch
of its whole process tree (workers included); this process polls the child tree's peak PSS over the child's life
(pages shared copy-on-write counted once, as a run's sampler does), so that the polling's CPU is not the child's.
Loader-only: SPDL's claim (+74 %, 38 % less CPU, 50 GB less memory than DataLoader) is a data-loading claim, and a
model would dilute it by its compute.

The children run interleaved: every repeat runs every (workload, loader), the loaders' order rotated each repeat,
so the machine's drift hits all alike. Per (workload, loader): medians with their exact 95 % intervals, and each
loader's epoch-time ratio to DataLoader with its interval (engine.analysis.stats.compare).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.analysis import stats  # noqa: E402

PSS_EVERY_S = 0.1  # how often the parent reads the child tree's PSS

LOADERS = {"processes": "DataLoader", "threads": "torchdata.nodes", "spdl": "SPDL"}
WORKLOADS = {  # name -> the fields that make it; the jpeg files and own_pipeline's folder are made once, up front
    "jpeg": {"workload": "jpeg"},
    "pyloop": {"workload": "pyloop", "work_us": 1000},  # 1 ms of GIL-holding Python per sample
    "own_pipeline": {"workload": "examples.own_pipeline.data:build", "num_classes": 8},
}


def child(setting: dict[str, Any], epochs: int) -> dict[str, float]:
    """One loader over one workload in this process: epoch_s and cpu_s (the parent adds the peak PSS)."""
    import torch

    from engine.config import RunConfig
    from engine.loaders import open_loader
    from engine.measure import tree_cpu_s
    from engine.workloads import build_dataset

    torch.set_num_threads(1)  # the training process's threads stay out of the loaders' way (bench/findings.py's)
    cfg = RunConfig.from_dict(setting)
    with open_loader(build_dataset(cfg), cfg, torch.device("cpu")) as loader:
        for _ in loader.epoch(0):
            pass
        walls, cpu0 = [], tree_cpu_s()
        for e in range(1, epochs + 1):
            t0 = time.perf_counter()
            for _ in loader.epoch(e):
                pass
            walls.append(time.perf_counter() - t0)
        cpu = (tree_cpu_s() - cpu0) / epochs
    return {"epoch_s": statistics.median(walls), "cpu_s": cpu}


def _tree_pss(pid: int) -> int:
    """PSS of a process and its descendants (pages they share counted once), 0 once it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            continue
    return total


def _measure(setting: dict[str, Any], epochs: int) -> dict[str, float]:
    """One child, its tree's PSS polled from here: the polling's CPU is not the child's (tree CPU-seconds)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), json.dumps(setting), str(epochs)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_pss(proc.pid))
            time.sleep(PSS_EVERY_S)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{setting['loader']} on {setting['workload']} failed:\n{err.read()[-2000:]}")
        return {**json.loads(out.read().strip().splitlines()[-1]), "peak_pss_mib": peak / 2**20}


def run(workloads: list[str], workers: int, repeats: int, epochs: int, base: dict[str, Any]) -> None:
    from engine.config import RunConfig
    from engine.workloads import build_dataset

    settings = {w: {**base, **WORKLOADS[w], "workers": workers} for w in workloads}
    for w, s in settings.items():  # generate files before anything is timed
        build_dataset(RunConfig.from_dict({**s, "loader": "sync", "workers": 0}))
    got: dict[tuple[str, str], list[dict[str, float]]] = {(w, n): [] for w in workloads for n in LOADERS}
    names = list(LOADERS)
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotated: no loader always runs first
        for w in workloads:
            for name in order:
                got[(w, name)].append(_measure({**settings[w], "loader": name}, epochs))
        print(f"  repeat {r + 1}/{repeats} done", flush=True)
    _report(got, workloads, workers)


def _cell(values: list[float], fmt: str) -> str:
    med, lo, hi = stats.median_ci(values)
    return f"{fmt.format(med)} [{stats.ci_text(lo, hi, len(values), fmt)}]"


def _report(got: dict[tuple[str, str], list[dict[str, float]]], workloads: list[str], workers: int) -> None:
    print(f"\nmedians over repeats [95% CI of the median]; {workers} workers each; loader only, no model")
    print(
        f"{'workload':<14}{'loader':<17}{'epoch s':<34}{'CPU-s / epoch':<34}{'peak PSS MiB':<34}"
        f"{'DataLoader epoch / this (>1: faster)'}"
    )
    for w in workloads:
        base = [m["epoch_s"] for m in got[(w, "processes")]]
        for name, label in LOADERS.items():
            ms = got[(w, name)]
            cmp = stats.compare(base, [m["epoch_s"] for m in ms])
            ci = stats.ci_text(cmp["speedup_lo"], cmp["speedup_hi"], len(ms), "{:.2f}")
            said = {"B faster": f"{label} faster", "A faster": "DataLoader faster"}.get(
                cmp["difference"], cmp["difference"]
            )
            ratio = "-" if name == "processes" else f"{cmp['speedup']:.2f}x [{ci}] {said}"
            cells = [
                _cell([m[k] for m in ms], fmt)
                for k, fmt in (("epoch_s", "{:.3f}"), ("cpu_s", "{:.2f}"), ("peak_pss_mib", "{:.0f}"))
            ]
            print(f"{w:<14}{label:<17}" + "".join(f"{c:<34}" for c in cells) + ratio)


if __name__ == "__main__":  # a child: setting JSON, timed epochs
    print(json.dumps(child(json.loads(sys.argv[1]), int(sys.argv[2]))))
