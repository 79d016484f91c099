"""The CLI's front door: `python -m engine <command>` (or `loaderlab <command>`); `--help` lists the commands.

COMMANDS below is the whole CLI: each command's handler and options live in the module of its family (launch,
results, advise, dashboard), the printing in _format.py, the store around a command in _store.py. Every command
takes `--db PATH`. Exit status: 0 ok · 2 bad input (one line naming the field) · 1 a run that failed.

Commands that read (runs, show, query, export, speedups, advise, predict, code, export-bundle) never write: they
run inside store.reads_only(), refuse a store path that does not exist, and only say when finished runs wait to
be stored (predict writes its probe's cache file, nothing else). Commands that write prepare the store before they
start anything: one that cannot be used is refused, a missing one is created, in one line each.

    python -m engine run --loader threads --workers 4
    python -m engine predict --workload jpeg --model cnn
    python -m engine tune -- python train.py
    python -m engine serve                                   # the dashboard and its worker: `make run`
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from engine.cli import advise, dashboard, launch, results
from engine.cli._format import line
from engine.cli._options import Command, Parser, no_options
from engine.cli._store import announce_new_stores, read, store_pending
from engine.errors import ConfigError, StoreError, UsageError, printable

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

# The commands in `--help`'s order: name -> handler, its options, its line in the list. pending: when the RunLogs
# that waited for the store are stored ("after": a run never waits for the store; "never": the command stores them
# itself); reads: the command writes nothing (engine/cli/_store.py).
COMMANDS: dict[str, Command] = {
    # run something, store its runs (launch.py)
    "run": Command(
        launch.cmd_run,
        launch.run_options,
        pending="after",
        help="Run one config (flags, or --config FILE.toml with flags overriding it).",
    ),
    "sweep": Command(
        launch.cmd_sweep,
        launch.sweep_options,
        pending="after",
        help="Run a grid of configs × repeats from a TOML file, in a seeded random order.",
    ),
    # read the store (results.py)
    "runs": Command(results.cmd_runs, results.runs_options, reads=True, help="A table of recent runs."),
    "show": Command(results.cmd_show, results.show_options, reads=True, help="One run: config, summary and epochs."),
    "query": Command(
        results.cmd_query,
        results.query_options,
        reads=True,
        help="Read-only SQL over the store (one SELECT; 10 s limit; row cap).",
    ),
    "speedups": Command(
        results.cmd_speedups,
        results.speedups_options,
        reads=True,
        help="dual-* and fused vs the same models one after another, with 95%% intervals",
    ),
    "export": Command(results.cmd_export, results.export_options, reads=True, help="Export a table to Parquet or CSV."),
    # your own script, observed as it runs (launch.py)
    "observe": Command(
        launch.cmd_observe,
        launch.observe_options,
        pending="after",
        help="run your training script unchanged and store a run for each DataLoader it iterates",
    ),
    # which loader setting (advise.py)
    "advise": Command(
        advise.cmd_advise,
        advise.advise_options,
        reads=True,
        help="The best measured config for a workload and model on this host, and what to try next.",
    ),
    "tune": Command(
        advise.cmd_tune,
        advise.tune_options,
        help="Search loader settings (workers and intra-op threads jointly) within a time budget, with "
        "real runs: the predicted fastest first, then successive halving. With `-- python train.py "
        "ARGS`: your own script's training DataLoader, and the script runs once per trial.",
    ),
    # NOTE: predict reads: it reads the store only where one exists (earlier runs, --baseline-run's run), never
    # creates one; it writes only the probe's cache file beside it
    "predict": Command(
        advise.cmd_predict,
        advise.predict_options,
        reads=True,
        help="the predicted epoch time of a loader setting, or (no --loader) of every setting tune would try, ranked",
    ),
    "code": Command(
        advise.cmd_code,
        advise.code_options,
        reads=True,
        help="The Python that builds a run's loader (or --setting's) from your dataset, to paste into your training.",
    ),
    # move results between stores (results.py, engine/store/merge.py)
    "import": Command(
        results.cmd_import,
        results.import_options,
        help="Merge results from another store file or a Parquet bundle, deduplicated by run id.",
    ),
    "export-bundle": Command(
        results.cmd_export_bundle,
        results.export_bundle_options,
        reads=True,
        help="Export every table as Parquet into a folder, for `import` on another machine.",
    ),
    # the dashboard and its job worker (dashboard.py)
    "demo": Command(
        dashboard.cmd_demo,
        no_options,
        pending="never",
        help="Queue the demo sweep as jobs for the worker, if the store has no runs and no jobs yet.",
    ),
    "worker": Command(
        dashboard.cmd_worker,
        dashboard.worker_options,
        pending="never",  # it stores them in its loop
        help="run queued dashboard jobs one at a time (--ensure: start one in the background if none is alive)",
    ),
    "serve": Command(
        dashboard.cmd_serve,
        dashboard.serve_options,
        pending="never",  # the banner and worker do
        help="serve the dashboard with its job worker (`make run`); Ctrl-C stops both, but not a worker "
        "that was running before",
    ),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command with --db; the options of `only` (a command's name), or of all commands when None.

    NOTE: `run`'s help lists the registry's choices, which imports torch (seconds): main() builds only the
    options of the command it runs, and the names are read only when help is shown (Parser.format_help).
    """
    prog = "loaderlab" if Path(sys.argv[0]).name == "loaderlab" else "python -m engine"  # the installed command
    parser = Parser(
        prog=prog,
        description="LoaderLab: which data-loading and concurrency "
        "setup trains your model fastest on this machine, why, and by how much.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.handler.__doc__)
        p.add_argument("--db", default=None, help="store file (default: $LOADERLAB_DB or data/loaderlab.duckdb)")
        if only in (None, name):
            cmd.options(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command: its exit status, with bad input as one line on stderr and status 2, never a traceback."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        argv = sys.argv[1:] if argv is None else argv
        try:
            args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
        except SystemExit as e:  # --help: argparse printed it; the only SystemExit that is not an error
            return int(e.code or 0)
        cmd = COMMANDS[args.command]
        if cmd.reads:
            return read(cmd, args)
        if cmd.pending == "before":
            store_pending(args.db)
        try:
            status = cmd.handler(args)
            if cmd.pending == "after" and not getattr(args, "dry_run", False):
                store_pending(args.db)  # a run never waits for the store: what waited is stored after it
        finally:
            announce_new_stores()
        return status
    except (ConfigError, UsageError, ValueError, StoreError) as e:  # store/query rejections are ValueErrors too;
        # StoreError: a corrupt, newer or busy store, whose message says how to recover
        print(f"error: {line(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of a streamed result went away (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit: into nothing
        return 141  # 128 + SIGPIPE: what a shell reports for a command that a closed pipe stopped
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # NOTE: code the command called exited (a plugin's sys.exit): an error, never silence
        print(
            f"error: the command was ended by sys.exit({printable(repr(e.code))[:60]}) in code it called; "
            "a plugin must return or raise an exception, never exit the process",
            file=sys.stderr,
        )
        return 2
