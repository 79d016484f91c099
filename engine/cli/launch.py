"""The commands that run something and store its runs: `run` (one config), `sweep` (a grid from a TOML file) and
`observe` (your own training script, unchanged). The RunLogs that waited for the store are stored after them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine.cli._format import line, summary, warn
from engine.cli._options import Parser, add_config_flags, config_from_args, launch_options, launch_settings
from engine.cli._store import prepare_store
from engine.config import DEFAULT_MAX_RUNS, SweepConfig, load_toml
from engine.errors import printable
from engine.paths import Db
from engine.run.hostfit import check_all, check_host, check_machine, check_rules
from engine.run.observed import observe
from engine.run.preflight import preflight
from engine.run.runner import launch
from engine.status import RunStatus
from engine.store import get_run
from engine.sweeps.local import run_sweep
from engine.sweeps.ray import require_ray, run_sweep_ray

__all__ = ["cmd_observe", "cmd_run", "cmd_sweep", "observe_options", "print_summary", "run_options", "sweep_options"]


def run_options(p: Parser) -> None:
    p.add_argument("--config", help="TOML file of config fields; flags override it")
    p.add_argument("--dry-run", action="store_true", help="validate and print the config, run nothing")
    p.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    launch_options(p)
    add_config_flags(p)


def cmd_run(args: argparse.Namespace) -> int:
    """Run one config (flags, or --config FILE.toml with flags overriding it)."""
    launch_settings(args)
    # NOTE: a run's child imports torch and makes the machine's checks (the device, the mode's rules) before its
    # RunLog starts; launch() raises what it refuses. Checking here too would import torch twice (seconds).
    cfg = config_from_args(args)
    # refused here, in one line, when this host cannot run it (--dry-run: the machine's rules too, as the run's)
    warn(check_machine(cfg) if args.dry_run else check_host(cfg))
    if args.dry_run:
        preflight(cfg)  # a plugin's one-batch check is validation too: --dry-run is how to try your plugin
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    prepare_store(args.db, defer=True)

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "epoch" and not args.quiet:
            warm = " (warm-up)" if event["warmup"] else ""
            print(
                f"  epoch {event['epoch']} model {event['model_idx']} rank {event['rank']}: "
                f"{event['wall_s']:.3f} s  {event['samples_per_s']:.0f} samples/s  "
                f"wait {event['data_wait_s']:.3f} s  copy {event['h2d_s']:.3f} s  "
                f"compute {event['compute_s']:.3f} s{warm}",
                flush=True,
            )

    result = launch(cfg, db=args.db, on_event=on_event)
    if result.stored:  # else the store is held: main() says so in one line after the command
        print_summary(result.run_id, args.db)
    else:
        log_file = result.run_dir / "events.jsonl"
        print(f"run {result.run_id}: {result.status} · not stored yet; its RunLog is {log_file}")
    if result.status != RunStatus.DONE:
        print(f"run {result.run_id} {result.status}: {line(result.error)}", file=sys.stderr)
        return 1
    return 0


def print_summary(run_id: str, db: Db) -> None:
    """The stored run's summary lines (_format.summary); nothing when it is not in the store."""
    run = get_run(run_id, db=db)
    if run is not None:
        print("\n".join(summary(run_id, run)))


def sweep_options(p: Parser) -> None:
    p.add_argument("file", help="sweep TOML (name, repeats, seed, [base], [grid])")
    p.add_argument("--repeats", help="override the file's repeats")
    p.add_argument(
        "--max-runs",
        type=int,
        default=None,
        metavar="N",
        help=f"refuse a sweep of more runs (configs × repeats) than this, before building any (default: "
        f"the file's max_runs, else {DEFAULT_MAX_RUNS})",
    )
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--address", default=None, help="Ray cluster address (auto, ray://host:port)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    launch_options(p)


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a grid of configs × repeats from a TOML file, in a seeded random order."""
    launch_settings(args)
    data = load_toml(args.file, "file")
    if args.repeats is not None:
        data["repeats"] = int(args.repeats)
    if args.max_runs is not None:
        data["max_runs"] = args.max_runs
    if args.executor == "ray":
        require_ray()  # before anything else: without Ray there is nothing to size
    sweep = SweepConfig.from_dict(data, expand=False)  # its size, from the axes' lengths, is checked against the cap
    prepare_store(args.db, defer=True)  # a store that cannot be used is refused before the grid is even built
    print(f"sweep {printable(sweep.name)}: {sweep.describe()}", file=sys.stderr)  # said before a config is built
    distinct = len(sweep.configs())  # every config validated, once: the runs below reuse them
    check_rules(sweep.configs())  # on this machine, as before any run; a Ray node's runs check theirs again
    if distinct < sweep.size():
        print(
            f"  {distinct} distinct configs ({distinct * sweep.repeats} runs): the others differ only in fields "
            "their loader or mode ignores",
            file=sys.stderr,
        )
    if args.executor == "local":  # NOTE: a Ray cluster's runs are checked on the node that runs them (launch)
        warn(check_all(sweep.configs()))
    if args.executor == "ray":
        result = run_sweep_ray(sweep, db=args.db, address=args.address, progress=not args.quiet)
    else:
        result = run_sweep(sweep, db=args.db, progress=not args.quiet)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(result.counts.items()))
    print(f"sweep {printable(result.sweep_id)}: {counts}")
    return 0 if result.counts.get(RunStatus.DONE, 0) == len(result.results) else 1


def observe_options(p: Parser) -> None:
    p.add_argument("--name", default=None, help="a tag for the runs (default: none)")
    p.add_argument(
        "script",
        nargs=argparse.REMAINDER,
        metavar="-- python train.py ARGS",
        help="your training script's command, unchanged, after --",
    )


def cmd_observe(args: argparse.Namespace) -> int:
    """Run `python train.py ARGS` as it is; each DataLoader it iterates is observed and stored as its own run
    (source 'observed'). The script's exit status is this command's."""
    prepare_store(args.db, defer=True)
    return observe(args.script, name=args.name, db=args.db, say=lambda text: print(text, file=sys.stderr))
