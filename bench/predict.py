"""How close predicted epoch times come (issue 20 §3): engine/predict/model.py against real runs of settings it never saw.

    .venv/bin/python bench/predict.py [--workload all|jpeg|pyloop|tensor] [--work-us 300] [--latency-ms 5]
        [--n-samples 512] [--epochs 3] [--repeats 1] [--quick] [--out FILE] [--db PATH]

Three workloads: jpeg decode (jpeg + cnn width 16, 48 px), GIL-bound Python (pyloop + mlp, --work-us per sample)
and a per-sample sleep (tensor + mlp, --latency-ms). For each, ONE probe is measured (engine/predict/probe.py, in
a child, into a fresh calibrations folder: what a calibration measures, once) and predicts every loader setting;
then each setting runs for real (engine.run.runner.launch, forked from one warm parent, bound off, 1 warm-up epoch +
the rest steady) and its median steady epoch comes from the store. No run is used for fitting: every row is held
out. With --repeats N the settings run N rounds, each round in the same order, and the measured figure is the
median of the runs' medians.

Prints Markdown (and writes it to --out): per workload, a table of setting, predicted, measured, error and the
limit the model predicted; median and p90 |error| per workload and overall against the goal (median <= 10%,
p90 <= 20% on a 2-core machine); and the settings it misses most, with what it thought limited them. Take it on
a quiet machine: a figure taken while anything else runs says nothing about the model. --quick (3 settings, small
data) is the smoke test's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.predict.model import Prediction, predict  # noqa: E402
from engine.config import RunConfig  # noqa: E402
from engine.measure.host import fingerprint  # noqa: E402
from engine.paths import ROOT  # noqa: E402
from engine.run.hostfit import usable_cpus  # noqa: E402
from engine.run.runner import launch  # noqa: E402
from engine.run.warm import WarmParent, run_env  # noqa: E402
from engine.store import get_run  # noqa: E402

# (loader, workers, intra-op threads): threads 0 = torch's default
SETTINGS = [("sync", 0, 0), ("sync", 0, 1), ("prefetch", 0, 0), ("prefetch", 0, 1),
            ("threads", 1, 1), ("threads", 2, 1), ("threads", 2, 0), ("threads", 4, 1),
            ("processes", 1, 1), ("processes", 1, 0), ("processes", 2, 1), ("processes", 2, 0), ("processes", 4, 1)]
QUICK = [("sync", 0, 1), ("prefetch", 0, 1), ("processes", 1, 1)]
GOAL = (10.0, 20.0)  # median and p90 |error| %, the goal on 2 cores


def workloads(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    return {"jpeg": {"workload": "jpeg", "model": "cnn", "width": 16, "image_size": 48},
            "pyloop": {"workload": "pyloop", "model": "mlp", "image_size": 16, "work_us": args.work_us},
            "tensor": {"workload": "tensor", "model": "mlp", "image_size": 16, "latency_ms": args.latency_ms}}


def main() -> None:
    args = _args()
    db = args.db or Path(tempfile.mkdtemp()) / "predict.duckdb"
    host = fingerprint()
    chosen = workloads(args) if args.workload == "all" else {args.workload: workloads(args)[args.workload]}
    settings = QUICK if args.quick else SETTINGS
    lines = [f"machine: {host['cpu_model']}, {usable_cpus():g} usable cores, torch {host['torch_version']}; "
             f"{args.n_samples} samples, {args.epochs} epochs (1 warm-up), {args.repeats} run(s) per setting", ""]
    errors: dict[str, list[dict[str, Any]]] = {}
    with WarmParent() as warm:
        for name, fields in chosen.items():
            base = RunConfig.from_dict({**fields, "n_samples": args.n_samples, "epochs": args.epochs,
                                        "device": "cpu", "bound": False, "sample_hz": 0.0, "tag": "bench-predict"})
            rows = _workload(name, base, settings, args.repeats, db, warm, lines)
            errors[name] = [r for r in rows if r["measured"] is not None]
    lines += _summary(errors)
    lines.append(f"\nstore: {db}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("all", "jpeg", "pyloop", "tensor"), default="all")
    ap.add_argument("--work-us", type=float, default=300.0, help="pyloop: microseconds of Python per sample")
    ap.add_argument("--latency-ms", type=float, default=5.0, help="tensor: milliseconds of sleep per sample")
    ap.add_argument("--n-samples", type=int, default=None, help="default 512 (128 with --quick)")
    ap.add_argument("--epochs", type=int, default=None, help="warm-up included; default 3 (2 with --quick)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="3 settings on small data: a smoke test, not a figure")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown here too")
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args()
    args.n_samples = args.n_samples or (128 if args.quick else 512)
    args.epochs = args.epochs or (2 if args.quick else 3)
    return args


def _workload(name: str, base: RunConfig, settings: list[tuple[str, int, int]], repeats: int, db: Path,
              warm: WarmParent, lines: list[str]) -> list[dict[str, Any]]:
    """One probe, every setting predicted, then run; the workload's Markdown section appended to lines."""
    probe = _probe(base, db.parent / f"calibrations-{name}")
    cfgs = [base.replace(loader=loader, workers=workers, threads=threads) for loader, workers, threads in settings]
    measured: dict[int, list[float]] = {i: [] for i in range(len(cfgs))}
    for _ in range(repeats):
        for i, cfg in enumerate(cfgs):
            result = launch(cfg, db=db, warm=warm)
            run = get_run(result.run_id, db=db) if result.status == "done" else None
            if run and run.get("epoch_s"):
                measured[i].append(run["epoch_s"])
    compute = ", ".join(f"{t} thread(s) {c['wall_s'] * 1e3:.1f} ms" for t, c in probe["compute"].items())
    gil = "unmeasured (1 core)" if probe["gil_share"] is None else f"{probe['gil_share']:.2f}"
    lines += [f"### {name}: {base.workload} + {base.model}", "",
              f"probe: load {probe['load_wall_s'] * 1e3:.1f} ms wall / {probe['load_cpu_s'] * 1e3:.1f} ms CPU per "
              f"batch of {probe['batch_size']}, GIL share {gil}; step {compute}; {probe['cores']:g} cores", "",
              "| setting | predicted s | measured s | error % | predicted limit |",
              "| --- | ---: | ---: | ---: | --- |"]
    rows = []
    for i, cfg in enumerate(cfgs):
        p = predict(cfg, probe)
        got = statistics.median(measured[i]) if measured[i] else None
        err = None if got is None else 100.0 * (p.epoch_s - got) / got
        rows.append({"workload": name, "setting": _setting(cfg), "predicted": p, "measured": got, "error": err})
        lines.append(f"| {_setting(cfg)} | {p.epoch_s:.3f} | {'failed' if got is None else f'{got:.3f}'} | "
                     f"{'-' if err is None else f'{err:+.1f}'} | {p.limit} |")
    lines.append("")
    return rows


def _probe(base: RunConfig, calibrations: Path) -> dict[str, Any]:
    """Measured once, in a child, into a folder of its own: never an earlier cached one."""
    out = subprocess.run([sys.executable, "-m", "engine.predict._probe_child", str(calibrations)],
                         input=json.dumps(base.to_dict()), capture_output=True, text=True, cwd=ROOT, env=run_env(),
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["probe"]


def _setting(cfg: RunConfig) -> str:
    pool = f" {cfg.workers}w" if cfg.loader in ("threads", "processes") else ""
    return f"{cfg.loader}{pool}, threads {cfg.threads or 'auto'}"


def _summary(errors: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = ["### accuracy", "", "| workload | settings | median \\|error\\| % | p90 \\|error\\| % |",
             "| --- | ---: | ---: | ---: |"]
    every = [r for rows in errors.values() for r in rows]
    for name, rows in [*errors.items(), ("overall", every)]:
        if rows:
            med, p90 = _stats(rows)
            lines.append(f"| {name} | {len(rows)} | {med:.1f} | {p90:.1f} |")
    if every:
        med, p90 = _stats(every)
        met = med <= GOAL[0] and p90 <= GOAL[1]
        lines += ["", f"goal: median <= {GOAL[0]:g}%, p90 <= {GOAL[1]:g}%: {'met' if met else 'not met'}", "",
                  "largest misses (what the model thought limited them):", ""]
        for r in sorted(every, key=lambda r: -abs(r["error"]))[:5]:
            lines.append(f"- {r['workload']}, {r['setting']}: predicted {r['predicted'].epoch_s:.3f} s, measured "
                         f"{r['measured']:.3f} s ({r['error']:+.1f}%); {_limits(r['predicted'])}")
    return lines


def _stats(rows: list[dict[str, Any]]) -> tuple[float, float]:
    errs = [abs(r["error"]) for r in rows]
    return float(np.median(errs)), float(np.percentile(errs, 90))


def _limits(p: Prediction) -> str:
    terms = ", ".join(f"{k} {v:.3f} s" for k, v in sorted(p.terms.items(), key=lambda kv: -kv[1]))
    over = f"; {p.runnable} runnable threads on {p.cores:g} cores" if p.oversubscribed else ""
    return f"limit {p.limit} ({terms}){over}"


if __name__ == "__main__":
    main()
