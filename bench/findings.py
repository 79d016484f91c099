"""Findings: run the sweeps in examples/findings_*.toml and judge each claim they stand for, on this machine.

    .venv/bin/python bench/findings.py                        # run every finding's sweep, then judge
    .venv/bin/python bench/findings.py fused batch_size       # only these findings
    .venv/bin/python bench/findings.py --from-store           # judge the latest stored sweeps, run nothing
    .venv/bin/python bench/findings.py --db /tmp/f.duckdb     # keep the runs out of the default store
    .venv/bin/python bench/findings.py --threads 0            # torch's default intra-op threads (see below)
    .venv/bin/python bench/findings.py --repeats 1 --db /tmp/smoke.duckdb   # a smoke run (no intervals)

NOTE: runs get one intra-op thread (OMP_NUM_THREADS=1) unless --threads says otherwise. On a small
shared machine, a trainer whose OpenMP threads outnumber the free cores (loader workers or other
programs hold them) spins and slows down by 10-50x at random, which would swamp every claim here;
with one thread the comparisons measure the loaders and modes. `--threads 0` measures that effect too.

Per claim: the two sides' medians over repeats (7 per config: 6 + 7 is the least for an interval), their
ratio (A time / B time, > 1: B is faster) with its exact 95% interval (engine.analysis.stats.compare: order-statistic
intervals of each median whose coverages multiply to 95%), and the status, by the rules in _status:
  B faster      confirmed when the interval is above 1, contradicted when below, else no clear difference
  B not slower  confirmed when the interval's low end is >= 1 - NOT_SLOWER_MARGIN (B at most 5% slower),
                contradicted when its high end is below that, else no clear difference
  within 10%    confirmed when the interval lies inside [1/1.1, 1.1], contradicted when wholly outside
Only this host's runs are judged. The machine is printed first: results hold for that machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.analysis import stats  # noqa: E402
from engine.config import SweepConfig, load_toml  # noqa: E402
from engine.measure import fingerprint  # noqa: E402
from engine.store import connect  # noqa: E402
from engine.sweeps.local import run_sweep  # noqa: E402


NOT_SLOWER_MARGIN = 0.05  # "B not slower": B's median at most 5% above A's, with 95% confidence


@dataclass
class Claim:
    finding: str  # examples/findings_<finding>.toml
    text: str
    a: dict[str, Any]  # runs of side A (the baseline) ...
    b: dict[str, Any]  # ... and of side B
    expect: str  # "B faster" | "B not slower" | "within 10%" (see judge)
    metric: str = "epoch_s"  # or "s_per_sample": 1 / samples of all models per second
    label_a: str = ""
    label_b: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


CLAIMS = [
    Claim(
        "threads_vs_processes",
        "pyloop (GIL-holding work): 2 processes beat 2 threads",
        {"workload": "pyloop", "loader": "threads"},
        {"workload": "pyloop", "loader": "processes"},
        "B faster",
        label_a="threads",
        label_b="processes",
    ),
    Claim(
        "threads_vs_processes",
        "jpeg (decode releases the GIL): 2 threads keep up with 2 processes",
        {"workload": "jpeg", "loader": "processes"},
        {"workload": "jpeg", "loader": "threads"},
        "B not slower",
        label_a="processes",
        label_b="threads",
    ),
    Claim(
        "spdl",
        "jpeg: SPDL's claim (+74% over DataLoader): 2 SPDL threads beat 2 DataLoader processes",
        {"workload": "jpeg", "loader": "processes"},
        {"workload": "jpeg", "loader": "spdl"},
        "B faster",
        label_a="DataLoader",
        label_b="spdl",
    ),
    Claim(
        "spdl",
        "pyloop (GIL-holding work): 2 DataLoader processes beat SPDL's 2 threads",
        {"workload": "pyloop", "loader": "spdl"},
        {"workload": "pyloop", "loader": "processes"},
        "B faster",
        label_a="spdl",
        label_b="DataLoader",
    ),
    Claim(
        "prefetch_latency",
        "4 ms/sample latency: a deeper queue (1 -> 8) changes one producer's epoch by < 10%",
        {"loader": "prefetch", "prefetch_depth": 1},
        {"loader": "prefetch", "prefetch_depth": 8},
        "within 10%",
        label_a="depth 1",
        label_b="depth 8",
    ),
    Claim(
        "prefetch_latency",
        "4 ms/sample latency: 4 threads beat one producer, even on 2 cores",
        {"loader": "prefetch", "prefetch_depth": 8},
        {"loader": "threads", "prefetch_depth": 8},
        "B faster",
        label_a="prefetch",
        label_b="4 threads",
    ),
    Claim(
        "batch_size",
        "equal samples: batches of 256 train an epoch faster than batches of 8",
        {"batch_size": 8},
        {"batch_size": 256},
        "B faster",
        label_a="batch 8",
        label_b="batch 256",
    ),
    Claim(
        "fused",
        "4 models fused (vmap) beat 4 single runs in turn (samples of all models / s)",
        {"mode": "single"},
        {"mode": "fused"},
        "B faster",
        metric="s_per_sample",
        label_a="4 x single",
        label_b="fused x4",
    ),
    Claim(
        "fused",
        "dual-sequential costs what single runs cost per sample, within 10% (an honest baseline)",
        {"mode": "single"},
        {"mode": "dual-sequential"},
        "within 10%",
        metric="s_per_sample",
        label_a="single",
        label_b="dual-sequential",
    ),
    Claim(
        "dual_processes",
        "two processes on one CPU beat the same two models in turn",
        {"mode": "dual-sequential"},
        {"mode": "dual-processes"},
        "B faster",
        metric="s_per_sample",
        label_a="dual-sequential",
        label_b="dual-processes",
    ),
]


def sweep_runs(
    name: str, db: str | None, from_store: bool, progress: bool, repeats: int | None = None
) -> tuple[str | None, pd.DataFrame]:
    """The runs of the finding's sweep: run it now, or take the latest stored sweep of that name on this host."""
    sweep = SweepConfig.from_dict(load_toml(ROOT / "examples" / f"findings_{name}.toml"))
    if repeats:
        sweep = dataclasses.replace(sweep, repeats=repeats)
    sweep_id = None if from_store else run_sweep(sweep, db=db, progress=progress).sweep_id
    host = fingerprint()["fingerprint"]
    with connect(db, read_only=True) as conn:
        if sweep_id is None:
            row = conn.execute(
                "SELECT sweep_id FROM runs WHERE sweep_id LIKE ? AND host_fingerprint = ? "
                "ORDER BY created_at DESC LIMIT 1",
                [f"{sweep.name}-%", host],
            ).fetchone()
            sweep_id = row[0] if row else None
        # NOTE: this host only: a ratio of two machines' times says nothing about either
        df = conn.execute(
            "SELECT * FROM runs WHERE sweep_id = ? AND host_fingerprint = ? AND status = 'done' "
            "AND NOT coalesce(deleted, false)",
            [sweep_id, host],
        ).df()
        if df.empty and sweep_id:  # say why nothing is judged rather than "not measured" alone
            seen = conn.execute("SELECT DISTINCT host_fingerprint FROM runs WHERE sweep_id = ?", [sweep_id]).fetchall()
            print(f"  note: the sweep's runs have host fingerprint(s) {[r[0] for r in seen]}; this process {host}")
    return sweep_id, df


def judge(claim: Claim, df: pd.DataFrame) -> tuple[str, str]:
    """(status, one line of figures) for one claim."""
    sides = []
    for filt in (claim.a, claim.b):
        mask = pd.Series(True, index=df.index)
        for k, v in filt.items():
            mask &= df[k] == v
        rows = df[mask]
        sides.append(rows["epoch_s"] if claim.metric == "epoch_s" else 1.0 / rows["samples_per_s"])
    if min(len(s) for s in sides) == 0:
        return "not measured", "no done runs on one side; run the finding's sweep"
    c = stats.compare(*sides, margin=NOT_SLOWER_MARGIN)
    unit, scale = ("s per epoch", 1.0) if claim.metric == "epoch_s" else ("us per sample", 1e6)
    ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
    line = (
        f"{claim.label_a} {c['median_a'] * scale:.3g} -> {claim.label_b} {c['median_b'] * scale:.3g} {unit}: "
        f"{c['speedup']:.2f}x ({ci}; n={c['n_a']}+{c['n_b']})"
    )
    return _status(claim.expect, c), line


def _status(expect: str, c: dict[str, Any]) -> str:
    """The rules of the module docstring, all on stats.compare's interval of the ratio (no interval: no
    claim either way)."""
    lo, hi = c["speedup_lo"], c["speedup_hi"]
    if math.isnan(lo):
        return "no clear difference"
    if expect == "B faster":
        return {"B faster": "confirmed", "A faster": "contradicted"}.get(c["difference"], "no clear difference")
    if expect == "B not slower":
        if c["b_not_slower"]:
            return "confirmed"
        return "contradicted" if hi < 1 - NOT_SLOWER_MARGIN else "no clear difference"
    if 1 / 1.1 <= lo and hi <= 1.1:
        return "confirmed"
    return "contradicted" if lo > 1.1 or hi < 1 / 1.1 else "no clear difference"


def machine() -> str:
    h = fingerprint()
    gpu = f"{h['gpu_name']} (CUDA {h['cuda_version']})" if h.get("gpu_name") else "no GPU"
    return (
        f"{h['cpu_model']}, {h['cores']} logical cores (affinity {h['affinity']}), {gpu}, torch "
        f"{h['torch_version']}, Python {h['python_version']}, {h['os']}; host {h['fingerprint']}"
    )


def main() -> None:
    names = sorted(dict.fromkeys(c.finding for c in CLAIMS))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("findings", nargs="*", help=f"which findings (default: all of {', '.join(names)})")
    ap.add_argument("--from-store", action="store_true", help="judge the latest stored sweeps; run nothing")
    ap.add_argument("--db", default=None, help="store file (default: $LOADERLAB_DB or data/loaderlab.duckdb)")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per run (0: torch's default)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs per config instead of the sweeps' 7 (fewer than 6 gives no intervals: a smoke run)",
    )
    args = ap.parse_args()
    t0 = time.monotonic()
    if args.threads > 0:  # inherited by every run's subprocess; torch reads it at import
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
        import torch  # noqa: PLC0415 - already imported (engine.measure.host); threads are part of the fingerprint

        torch.set_num_threads(args.threads)  # NOTE: so this process's fingerprint is the runs' fingerprint
    chosen = args.findings or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        ap.error(f"unknown finding(s) {', '.join(unknown)}; choose from: {', '.join(names)}")
    threads = f"{args.threads} intra-op thread(s) per run" if args.threads > 0 else "torch's default threads"
    when = "read from the store" if args.from_store else f"load average {_load()}"
    print(f"LoaderLab findings, {datetime.now():%Y-%m-%d}, on {machine()}; {threads}; {when}")
    print("ratio = A / B of the medians over repeats (> 1: B is faster), exact 95% interval (order statistics)\n")
    tally: dict[str, int] = {}
    for name in chosen:
        sweep_id, df = sweep_runs(name, args.db, args.from_store, not args.quiet, args.repeats)
        print(f"{name}  (examples/findings_{name}.toml; sweep {sweep_id or 'not found'}, {len(df)} done runs)")
        for claim in (c for c in CLAIMS if c.finding == name):
            status, line = judge(claim, df) if len(df) else ("not measured", "no runs stored; run without --from-store")
            tally[status] = tally.get(status, 0) + 1
            print(f"  {claim.text}\n    {line} -> {status}")
        warn = stats.mixed_hosts_warning(df)
        if warn:
            print(f"  warning: {warn}")
        print()
    load = "" if args.from_store else f"; load average at the end {_load()} (timings include other programs)"
    print(", ".join(f"{n} {k}" for k, n in sorted(tally.items())) + load)
    print(f"took {(time.monotonic() - t0) / 60:.1f} min")


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg()) + " (1/5/15 min)"


if __name__ == "__main__":
    main()
