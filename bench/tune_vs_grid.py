"""tune, ranked by prediction, against the exhaustive grid of the same space (issue 20 §4).

    .venv/bin/python bench/tune_vs_grid.py [--pipeline jpeg|own] [--repeats 7] [--share 0.2] [--quick] [--out FILE]

The grid: every candidate of tune's space (engine.advice.tune.candidates: loader x workers x prefetch depth x intra-op
threads, batch size fixed) runs --repeats times, the rounds interleaved (each round in its own seeded order),
each run with tune's first-rung epochs (1 warm-up + RUNG0_EPOCHS steady), forked from one warm parent as tune's
runs are. Its wall time, start-ups included, is what an exhaustive search costs. Then tune runs with a budget of
--share (20%) of that wall time, in a store of its own (so its probe is measured, not found cached: its cost is
in the budget), over the same space. Tune's answer is then scored on the grid's runs of the same setting, like
with like: its throughput as a share of the grid best's (goal >= 95%), with the exact 95% interval of the ratio of
medians (engine.analysis.stats.compare), and against processes, 1 worker, 1 intra-op thread, the issue's hand-found
setting (the check: tune's answer is at least as fast).

Pipelines: jpeg (jpeg + cnn width 16, 512 images at 48 px: the issue's table) and own (examples/own_pipeline: PIL
decode and augmentation, a small ResNet of width 16, 512 images at 64 px in batches of 32, as its sweep.toml). Take
it on a quiet machine. --quick (a few candidates, small data, one repeat) is the smoke test's, not a figure.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from engine.advice.tune import CONFIRM_REPEATS, RUNG0_EPOCHS, candidates, tune  # noqa: E402
from engine.analysis import stats  # noqa: E402
from engine.config import RunConfig  # noqa: E402
from engine.measure import fingerprint
from engine.run.hostfit import usable_cpus  # noqa: E402
from engine.run.runner import launch  # noqa: E402
from engine.run.warm import WarmParent  # noqa: E402
from engine.store import get_run  # noqa: E402

PIPELINES = {
    "jpeg": {"workload": "jpeg", "model": "cnn", "width": 16, "image_size": 48},
    # examples/own_pipeline/sweep.toml's pipeline (the default width 64 made an epoch 18-32 s: a 4-hour grid)
    "own": {
        "workload": "examples.own_pipeline.data:build",
        "model": "examples.own_pipeline.nets:resnet",
        "image_size": 64,
        "num_classes": 8,
        "width": 16,
        "depth": 2,
        "batch_size": 32,
    },
}
KNOBS = ("loader", "workers", "prefetch_depth", "threads")
REFERENCE = {"loader": "processes", "workers": 1, "prefetch_depth": 2, "threads": 1}
GOAL_SHARE, GOAL_TIME = 0.95, 0.20


def main() -> None:
    args = _args()
    folder = args.db_dir or Path(tempfile.mkdtemp())
    fields = {**PIPELINES[args.pipeline], "n_samples": args.n_samples, "device": "cpu", "sample_hz": 0.0}
    base = RunConfig.from_dict({**fields, "bound": False, "tag": "bench-grid"})
    space = _space(base, args.quick)
    host = fingerprint()
    lines = [
        f"machine: {host['cpu_model']}, {usable_cpus():g} usable cores, torch {host['torch_version']}; "
        f"{base.workload} + {base.model}, {args.n_samples} samples, {len(space)} candidates, "
        f"{args.steady} steady epochs per run",
        "",
    ]
    grid_s, runs = _grid(space, base.warmup_epochs + args.steady, args.repeats, folder / "grid" / "grid.duckdb")
    medians = {i: statistics.median(r) for i, r in runs.items() if r}
    if not medians:
        sys.exit("every grid run failed; see the store at " + str(folder / "grid"))
    best = min(medians, key=medians.__getitem__)
    result = tune(
        base.workload,
        base.model,
        budget_s=args.share * grid_s,
        db=folder / "tune" / "tune.duckdb",
        base={k: v for k, v in fields.items() if k not in ("workload", "model")},
        progress=False,
        space=[{k: getattr(c, k) for k in KNOBS} for c in space],
        rung0_epochs=args.steady,
        confirm_repeats=args.confirm_repeats,
    )
    lines += _report(space, runs, medians, best, grid_s, result, args)
    lines += ["", f"stores: {folder}/grid, {folder}/tune"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", choices=sorted(PIPELINES), default="jpeg")
    ap.add_argument("--n-samples", type=int, default=None, help="default 512 (64 with --quick)")
    ap.add_argument("--repeats", type=int, default=None, help="grid runs per candidate; default 7 (1 with --quick)")
    ap.add_argument(
        "--steady",
        type=int,
        default=None,
        help=f"steady epochs per run; default {RUNG0_EPOCHS} (tune's first rung; 1 with --quick)",
    )
    ap.add_argument("--share", type=float, default=GOAL_TIME, help="tune's budget as a share of the grid's wall time")
    ap.add_argument("--confirm-repeats", type=int, default=None, help="tune's; default its own (1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a few candidates on small data: a smoke test")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown here too")
    ap.add_argument("--db-dir", type=Path, default=None, help="folder for the grid's and tune's stores")
    args = ap.parse_args()
    args.n_samples = args.n_samples or (64 if args.quick else 512)
    args.repeats = args.repeats or (1 if args.quick else 7)
    args.steady = args.steady or (1 if args.quick else RUNG0_EPOCHS)
    if args.confirm_repeats is None:
        args.confirm_repeats = 1 if args.quick else CONFIRM_REPEATS
    return args


def _space(base: RunConfig, quick: bool) -> list[RunConfig]:
    """tune's own space (torch's default thread count known here, so auto's explicit twin is left out)."""
    space = candidates(base, default_threads=torch.get_num_threads())
    if quick:  # sync, prefetch and one worker, depth 2 only: the reference among them
        space = [c for c in space if c.prefetch_depth == base.prefetch_depth and c.workers <= 1][:4]
        if not any(_is(c, REFERENCE) for c in space):
            space.append(base.replace(**REFERENCE))
    return space


def _grid(space: list[RunConfig], epochs: int, repeats: int, db: Path) -> tuple[float, dict[int, list[float]]]:
    """Every candidate `repeats` times, interleaved rounds; the wall time it took and each candidate's run medians."""
    runs: dict[int, list[float]] = {i: [] for i in range(len(space))}
    rng = random.Random(0)
    t0 = time.monotonic()
    with WarmParent() as warm:
        for _ in range(repeats):
            order = list(range(len(space)))
            rng.shuffle(order)
            for i in order:
                result = launch(space[i].replace(epochs=epochs), db=db, warm=warm)
                run = get_run(result.run_id, db=db) if result.status == "done" else None
                if run and run.get("epoch_s"):
                    runs[i].append(run["epoch_s"])
    return time.monotonic() - t0, runs


def _report(
    space: list[RunConfig],
    runs: dict[int, list[float]],
    medians: dict[int, float],
    best: int,
    grid_s: float,
    result: Any,
    args: argparse.Namespace,
) -> list[str]:
    n_grid = sum(len(r) for r in runs.values())
    n_tune = len(result.rows) + len(result.confirm_rows)
    answer = next((i for i, c in enumerate(space) if result.best is not None and _is(c, result.best)), None)
    ref = next((i for i, c in enumerate(space) if _is(c, REFERENCE)), None)
    lines = [
        "| search | wall s | runs | answer | its epoch s (grid median) | throughput vs grid best |",
        "| --- | ---: | ---: | --- | ---: | ---: |",
        f"| grid ({args.repeats} x {len(space)}) | {grid_s:.0f} | {n_grid} | {_name(space[best])} | "
        f"{medians[best]:.3f} | 100% |",
    ]
    tuned = "no answer" if answer is None else _name(space[answer])
    share = medians[best] / medians[answer] if answer in medians else math.nan
    lines.append(
        f"| tune (budget {args.share:.0%} of the grid's) | {result.spent_s:.0f} | {n_tune} | {tuned} | "
        f"{medians.get(answer, math.nan):.3f} | {share:.1%} |"
    )
    lines += [
        "",
        f"tune: {result.probe_note or 'no probe'}; stopped: {result.stop_reason}",
        f"tune's wall time: {result.spent_s / grid_s:.1%} of the grid's (goal <= {GOAL_TIME:.0%})",
    ]
    if answer in medians:
        c = stats.compare(runs[best], runs[answer])
        ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.1%}")
        lines.append(
            f"tune's answer's throughput: {share:.1%} of the grid best's ({ci}; goal >= {GOAL_SHARE:.0%}: "
            f"{'met' if share >= GOAL_SHARE else 'not met'} by the medians)"
        )
    if answer in medians and ref in medians:
        c = stats.compare(runs[ref], runs[answer])
        ci = stats.ci_text(c["speedup_lo"], c["speedup_hi"], min(c["n_a"], c["n_b"]), "{:.2f}", "x")
        lines.append(
            f"vs {_name(space[ref])}: tune's answer is {c['speedup']:.2f}x its speed ({ci}; {c['difference']}); "
            f"at least as fast by the medians: {'yes' if c['speedup'] >= 1 else 'no'}"
        )
    return lines


def _is(cfg: RunConfig, knobs: Any) -> bool:
    get = knobs.get if isinstance(knobs, dict) else (lambda k: getattr(knobs, k))
    return all(getattr(cfg, k) == get(k) for k in KNOBS if not (k == "prefetch_depth" and cfg.loader == "sync"))


def _name(cfg: RunConfig) -> str:
    pool = f" {cfg.workers}w" if cfg.loader in ("threads", "processes") else ""
    depth = f" depth {cfg.prefetch_depth}" if cfg.loader != "sync" else ""
    return f"{cfg.loader}{pool}{depth}, threads {cfg.threads or 'auto'}"


if __name__ == "__main__":
    main()
