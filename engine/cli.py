"""The CLI, wired in one place: `python -m engine <command>` (or `loaderlab <command>`). `--help` lists them.

Each command is a function `cmd_<name>(args) -> exit status` with its options beside it (`_<name>_options`),
registered by `@command`. Flags of `run` are generated from RunConfig (kebab case), so a new config field is a
new flag. Every command takes `--db PATH`. Exit status: 0 ok · 2 bad input (one line naming the field) ·
1 a run that failed.

Commands that read (runs, show, query, export, speedups, advise, export-bundle) never write: they run inside
store.reads_only(), refuse a store path that does not exist, and only say when finished runs wait to be stored.
Commands that write call _prepare_store() before they start anything: a store that cannot be used is refused
there, and a missing one is created, in one line each.

    python -m engine run --loader threads --workers 4        # run, sweep, runs, show, query, export, advise,
    python -m engine worker --ensure                         # tune, import, export-bundle, demo, worker
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.advisor import advise
from engine.baseline import parse as parse_baseline
from engine.config import RunConfig, SweepConfig, config_fields, field_choices, load_toml
from engine.demo import ensure_demo
from engine.errors import ConfigError, StoreBusy, StoreCorrupt, StoreError, StoreVersionError, UsageError, printable
from engine.jobs import ensure_worker, run_worker, worker_pid
from engine.paths import Db, db_path
from engine.preflight import preflight
from engine.ray_executor import require_ray, run_sweep_ray
from engine.runner import launch
from engine.stats import speedup_vs_sequential
from engine.status import RunStatus
from engine.store import (export, export_bundle, get_epochs, get_run, import_results, ingest_pending, list_runs,
                          pending_summary, prepare, reads_only, run_query)
from engine.sweep import run_sweep
from engine.tune import parse_budget, tune

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]


def _no_options(p: argparse.ArgumentParser) -> None:
    """A command with no options besides --db."""


@dataclass(frozen=True)
class Command:
    """handler(args) -> exit status; options(parser) adds its flags; pending: when the RunLogs that waited
    for the store are stored, "before" the command, "after" it (a run never waits for the store), or "never";
    reads: the command only reads, so it stores nothing, not even what waits (it says so instead)."""

    handler: Handler
    options: Callable[[argparse.ArgumentParser], None] = _no_options
    pending: str = "before"
    help: str | None = None  # the line in the command list (default: the handler's docstring)
    reads: bool = False


COMMANDS: dict[str, Command] = {}


def command(options: Callable[[argparse.ArgumentParser], None] = _no_options, *, pending: str = "before",
            help: str | None = None, reads: bool = False) -> Callable[[Handler], Handler]:
    """Register `cmd_<name>` as the command <name> (underscores become dashes), in the order of this file."""
    def register(fn: Handler) -> Handler:
        COMMANDS[fn.__name__.removeprefix("cmd_").replace("_", "-")] = Command(fn, options, pending, help, reads)
        return fn
    return register


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + traceback
        raise UsageError(f"{self.prog}: {message} (see --help)")


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    groups: dict[str, Any] = {}
    for f in config_fields():
        group = groups.setdefault(f.metadata["group"], p.add_argument_group(f"{f.metadata['group']} fields"))
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        choices = field_choices(f)
        help_ = f.metadata["help"] + (f" [{'|'.join(choices)}]" if choices else "") + f" (default: {default!r})"
        help_ = help_.replace("%", "%%")  # argparse formats help with %
        if f.type == "bool":
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_)
        else:
            group.add_argument(flag, dest=f.name, default=None, metavar=f.type.upper().replace("[STR]", ""),
                               help=help_)


def _config_from_args(args: argparse.Namespace) -> RunConfig:
    data: dict[str, Any] = {}
    if args.config:
        data.update(load_toml(args.config))
    for f in config_fields():
        value = getattr(args, f.name, None)
        if value is not None:
            data[f.name] = value
    return RunConfig.from_dict(data)


# ---------------------------------------------------------------------------- run, sweep


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file of config fields; flags override it")
    p.add_argument("--dry-run", action="store_true", help="validate and print the config, run nothing")
    p.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    _add_config_flags(p)


@command(_run_options, pending="after")
def cmd_run(args: argparse.Namespace) -> int:
    """Run one config (flags, or --config FILE.toml with flags overriding it)."""
    cfg = _config_from_args(args)
    if args.dry_run:
        preflight(cfg)  # a plugin's one-batch check is validation too: --dry-run is how to try your plugin
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    _prepare_store(args.db)

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "epoch" and not args.quiet:
            warm = " (warm-up)" if event["warmup"] else ""
            print(f"  epoch {event['epoch']} model {event['model_idx']} rank {event['rank']}: "
                  f"{event['wall_s']:.3f} s  {event['samples_per_s']:.0f} samples/s  "
                  f"wait {event['data_wait_s']:.3f} s  copy {event['h2d_s']:.3f} s  "
                  f"compute {event['compute_s']:.3f} s{warm}", flush=True)

    result = launch(cfg, db=args.db, on_event=on_event)
    if result.stored:  # else the store is held: main() says so in one line after the command
        _print_summary(result.run_id, args.db)
    else:
        log_file = result.run_dir / "events.jsonl"
        print(f"run {result.run_id}: {result.status} · not stored yet; its RunLog is {log_file}")
    if result.status != RunStatus.DONE:
        print(f"run {result.run_id} {result.status}: {result.error}", file=sys.stderr)
        return 1
    return 0


def _print_summary(run_id: str, db: Db) -> None:
    run = get_run(run_id, db=db)
    if run is None:
        return
    parts = [f"run {run_id}: {run['status']}"]
    if run.get("epoch_s") is not None:
        parts.append(f"epoch {run['epoch_s']:.3f} s (median, warm-up excluded)")
    if run.get("samples_per_s") is not None:
        parts.append(f"{run['samples_per_s']:.0f} samples/s")
    if run.get("efficiency") is not None:
        parts.append(f"bound {run['bound_s']:.3f} s, efficiency {run['efficiency']:.0%}"
                     + (f", {run['verdict']}" if run.get("verdict") else ""))
    if _given(run.get("overlap")):  # concurrent modes: how much of A + B's compute the concurrency hid
        parts.append(f"overlap {run['overlap']:.0%}")
    print(" · ".join(parts))
    for key, what in (("bound_note", "note"), ("bound_error", "no lower bound")):
        if run.get(key):
            print(f"  {what}: {run[key]}")


def _given(value: Any) -> bool:
    return value is not None and value == value  # NaN from the store is "not measured"


def _sweep_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="sweep TOML (name, repeats, seed, [base], [grid])")
    p.add_argument("--repeats", help="override the file's repeats")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--address", default=None, help="Ray cluster address (auto, ray://host:port)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


@command(_sweep_options, pending="after")
def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a grid of configs × repeats from a TOML file, in a seeded random order."""
    data = load_toml(args.file)
    if args.repeats is not None:
        data["repeats"] = int(args.repeats)
    sweep = SweepConfig.from_dict(data)
    if args.executor == "ray":
        require_ray()  # a missing Ray is bad input too: named before the store is looked at or created
    _prepare_store(args.db)
    if args.executor == "ray":
        result = run_sweep_ray(sweep, db=args.db, address=args.address, progress=not args.quiet)
    else:
        print(f"sweep {sweep.name}: {len(sweep.plan())} runs ({len(sweep.configs())} configs × {sweep.repeats})",
              file=sys.stderr)
        result = run_sweep(sweep, db=args.db, progress=not args.quiet)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(result.counts.items()))
    print(f"sweep {result.sweep_id}: {counts}")
    return 0 if result.counts.get(RunStatus.DONE, 0) == len(result.results) else 1


# ---------------------------------------------------------------------------- reading the store


def _runs_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=30)


@command(_runs_options, reads=True)
def cmd_runs(args: argparse.Namespace) -> int:
    """A table of recent runs."""
    df = list_runs(db=args.db, limit=args.limit)
    cols = [c for c in ("run_id", "status", "workload", "model", "loader", "workers", "mode", "batch_size",
                        "epoch_s", "samples_per_s", "efficiency", "verdict", "tag") if c in df.columns]
    print(df[cols].to_string(index=False) if len(df) else "no runs yet: try `python -m engine run`")
    return 0


def _show_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id")


@command(_show_options, reads=True)
def cmd_show(args: argparse.Namespace) -> int:
    """One run: config, summary and epochs."""
    run = get_run(args.run_id, db=args.db)
    if run is None:
        raise UsageError(f"run_id: no run '{args.run_id}' in the store; list them with `python -m engine runs`")
    print(json.dumps({k: v for k, v in run.items() if k != "config"}, indent=2, default=str))
    print(get_epochs(args.run_id, db=args.db).to_string(index=False))
    return 0


def _query_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("sql")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--max-rows", type=int, default=10_000)


@command(_query_options, reads=True)
def cmd_query(args: argparse.Namespace) -> int:
    """Read-only SQL over the store (one SELECT; 10 s limit; row cap)."""
    result = run_query(args.sql, db=args.db, max_rows=args.max_rows)
    if args.format == "json":
        print(result.df.to_json(orient="records"))
    elif args.format == "csv":
        print(result.df.to_csv(index=False), end="")
    else:
        print(result.df.to_string(index=False))
    if result.truncated:
        print(f"(truncated at {args.max_rows} rows)", file=sys.stderr)
    return 0


def _speedups_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", help="only this sweep's runs (its id, as `runs` lists it)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")


@command(_speedups_options, reads=True,
         help="dual-* and fused vs the same models one after another, with 95%% intervals")
def cmd_speedups(args: argparse.Namespace) -> int:
    """Each dual-* and fused config's speedup over training its models in turn (engine.stats.speedup_vs_sequential)."""
    filters = {"status": RunStatus.DONE, **({"sweep_id": args.sweep} if args.sweep else {})}
    table = speedup_vs_sequential(list_runs(db=args.db, limit=1_000_000, filters=filters))
    if table.empty:
        print("no dual-* or fused runs yet" + (f" in sweep {args.sweep}" if args.sweep else "")
              + ": try `python -m engine sweep examples/dual.toml` (or fused.toml)")
        return 0
    cols = [c for c in ("sweep_id", "mode", "n_models", "model", "model_b", "dual_data", "loader", "n", "baseline_mode",
                        "baseline_n", "speedup", "speedup_lo", "speedup_hi", "verdict", "note") if c in table.columns]
    table = table[cols]
    if args.format == "json":
        print(table.to_json(orient="records"))
    elif args.format == "csv":
        print(table.to_csv(index=False), end="")
    else:
        print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


def _export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet")
    p.add_argument("--table", default="runs")
    p.add_argument("--out", help="output file (default: loaderlab-<table>.<format>)")


@command(_export_options, reads=True)
def cmd_export(args: argparse.Namespace) -> int:
    """Export a table to Parquet or CSV."""
    out = export(args.out or f"loaderlab-{args.table}.{args.format}", args.format, db=args.db, table=args.table)
    print(out)
    return 0


# ---------------------------------------------------------------------------- advise, tune


def _baseline_options(p: argparse.ArgumentParser) -> None:
    """What advise and tune share: the problem, the user's setup, the confirmation sweep."""
    p.add_argument("--workload", default="tensor", help="workload to advise on / tune (default: tensor)")
    p.add_argument("--model", default="mlp", help="model to advise on / tune (default: mlp)")
    p.add_argument("--baseline", default=None, metavar="FIELD=VALUE,...",
                   help="your current loader setup, the side the best is compared with (default: sync), "
                        "e.g. --baseline loader=processes,workers=4,batch_size=64")
    p.add_argument("--write-confirm", metavar="PATH", help="write the confirmation sweep (TOML) to PATH: your setup "
                   "(or sync) and the best, 7 runs each in a random order")


def _advise_options(p: argparse.ArgumentParser) -> None:
    _baseline_options(p)
    p.add_argument("--host", default="this", help="this (default), any, or a host fingerprint")
    p.add_argument("--write-sweep", metavar="PATH", help="write the proposed next sweep (TOML) to PATH")


@command(_advise_options, reads=True)
def cmd_advise(args: argparse.Namespace) -> int:
    """The best measured config for a workload and model on this host, and what to try next."""
    advice = advise(args.workload, args.model, host=args.host, db=args.db, baseline=args.baseline)
    print(advice.render())
    if args.write_confirm:
        _write_confirm(args.write_confirm, advice.confirm_sweep_toml if advice.default != advice.best else None)
    if args.write_sweep and advice.base_config:
        with open(args.write_sweep, "w", encoding="utf-8") as fh:
            fh.write(advice.next_sweep_toml())
        print(f"wrote {args.write_sweep}; run it: python -m engine sweep {args.write_sweep}")
    elif args.write_sweep:
        print("no sweep written: nothing measured yet", file=sys.stderr)
    return 0


def _tune_options(p: argparse.ArgumentParser) -> None:
    _baseline_options(p)
    p.add_argument("--budget", default="10m", help="wall time to spend: 90s, 10m, 1h (default: 10m)")
    p.add_argument("--config", help="TOML file of RunConfig fields every candidate shares (e.g. n_samples)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a RunConfig field every candidate shares (repeatable), e.g. --set batch_size=128")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


@command(_tune_options)
def cmd_tune(args: argparse.Namespace) -> int:
    """Search loader settings by successive halving within a time budget, with real runs."""
    budget = parse_budget(args.budget)
    base: dict[str, Any] = dict(load_toml(args.config)) if args.config else {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("set", f"'{item}' is not FIELD=VALUE, e.g. --set batch_size=128")
        base[key.strip()] = value.strip()
    parse_baseline(args.baseline)  # bad input is named before the store is looked at or created
    RunConfig.from_dict({**base, "workload": args.workload, "model": args.model})
    _prepare_store(args.db)
    result = tune(args.workload, args.model, budget_s=budget, db=args.db, base=base, progress=not args.quiet,
                  baseline=args.baseline)
    print(result.render())
    if args.write_confirm:
        _write_confirm(args.write_confirm, result.confirm_sweep_toml if result.best_idx else None)
    return 0 if result.best is not None else 1


def _write_confirm(path: str, make_toml: Callable[[], str] | None) -> None:
    if make_toml is None:
        print("no confirmation sweep written: the reference is the fastest measured, or nothing ran",
              file=sys.stderr)
        return
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(make_toml())
    print(f"wrote {path}; run it: python -m engine sweep {path}")


# ---------------------------------------------------------------------- import, export-bundle (engine/store/merge.py)


def _import_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="another LoaderLab .duckdb store, a folder from export-bundle, or .parquet exports")


@command(_import_options)
def cmd_import(args: argparse.Namespace) -> int:
    """Merge results from another store file or a Parquet bundle, deduplicated by run id."""
    _prepare_store(args.db)
    result = import_results(args.paths, db=args.db)
    rows = ", ".join(f"{n} {t}" for t, n in result.rows.items() if t != "runs")
    print(f"imported {result.runs_added} runs ({result.runs_present} already here)"
          + (f"; rows: {rows}" if rows else ""))
    return 0


def _export_bundle_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("out_dir", metavar="DIR", help="folder to write runs/epochs/steps/samples/calibrations.parquet")


@command(_export_bundle_options, reads=True)
def cmd_export_bundle(args: argparse.Namespace) -> int:
    """Export every table as Parquet into a folder, for `import` on another machine."""
    print(export_bundle(args.out_dir, db=args.db))
    return 0


# ---------------------------------------------------------------------------- the dashboard's demo and job worker


@command(pending="never")
def cmd_demo(args: argparse.Namespace) -> int:
    """Queue the demo sweep as jobs for the worker, if the store has no runs and no jobs yet."""
    _prepare_store(args.db)
    try:
        ran = ensure_demo(db=args.db)
    except StoreBusy as e:  # `make run` goes on to serve the dashboard: a held store is no reason to stop there
        print(f"demo skipped: {printable(' '.join(str(e).split()))}; `make run` offers it again next time",
              file=sys.stderr)
        return 0
    print("demo sweep queued: the job worker runs it; watch it on the Launch page" if ran
          else "store already has runs or jobs; demo skipped")
    return 0


def _worker_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ensure", action="store_true", help="start a detached worker if none is alive, then return")
    p.add_argument("--once", action="store_true", help="run the queued jobs, then exit")
    p.add_argument("--poll-s", type=float, default=1.0, help="seconds between looks at an empty queue")
    p.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)  # handed over by ensure_worker


@command(_worker_options, pending="never",  # it stores what waited itself, in its loop
         help="run queued dashboard jobs one at a time (--ensure: start one in the background if none is alive)")
def cmd_worker(args: argparse.Namespace) -> int:
    """`python -m engine worker`: run the job worker in the foreground, or --ensure one runs in the background."""
    # NOTE: force: the worker's log (worker.log when ensure_worker starts it) has timestamps and INFO lines
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", force=True)
    logging.getLogger("engine").setLevel(logging.INFO)
    _prepare_store(args.db)
    if args.ensure:
        pid = ensure_worker(args.db)
        print(f"worker started (pid {pid})" if pid else f"worker already running (pid {worker_pid(args.db)})")
        return 0
    return run_worker(args.db, once=args.once, poll_s=args.poll_s, lock_fd=args.lock_fd)


# ---------------------------------------------------------------------------- wiring


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command with --db; the options of `only` (a command's name), or of all commands when None.

    NOTE: `run`'s flags list the registry's choices, which imports torch (seconds): main() builds only the
    options of the command it runs, so `worker`, `query`, `runs`... start without it.
    """
    prog = "loaderlab" if Path(sys.argv[0]).name == "loaderlab" else "python -m engine"  # the installed command
    parser = _Parser(prog=prog, description="LoaderLab: which data-loading and concurrency "
                     "setup trains your model fastest on this machine, why, and by how much.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help or cmd.handler.__doc__, description=cmd.handler.__doc__)
        p.add_argument("--db", default=None, help="store file (default: $LOADERLAB_DB or data/loaderlab.duckdb)")
        if only in (None, name):
            cmd.options(p)
    return parser


def _db_field(db: Db) -> str:
    """The setting that chose the store, for error messages: --db, else $LOADERLAB_DB, else --db's default."""
    return "LOADERLAB_DB" if db is None and os.environ.get("LOADERLAB_DB") else "--db"


def _prepare_store(db: Db) -> None:
    """Before a command that writes starts anything: refuse a store that cannot be used, create a missing one."""
    try:
        created = prepare(db)
    except StoreError as e:
        raise UsageError(f"{_db_field(db)}: {e}") from None
    if created:
        print(f"creating a new store at {db_path(db)}", file=sys.stderr)


def _waiting(count: int, holder: str | None) -> None:
    """The one line saying that finished runs wait to be stored, and what will store them."""
    when = (f"once the other session ({holder}) closes the store" if holder
            else "by the next command that writes (run, sweep, tune, import, worker) or by the dashboard")
    print(f"{count} run(s) waiting to be stored: the results are safe in their RunLogs and will be stored {when}",
          file=sys.stderr)


def _store_pending(db: Db) -> None:
    """Store the RunLogs that waited while another session held the store; if one still holds it, say so."""
    if not db_path(db).exists():
        return  # a store is created by the command itself, in its own words (_prepare_store)
    try:
        ingest_pending(db=db)
        return
    except StoreBusy as e:
        holder = getattr(e, "holder", None)
    pending = pending_summary(db)
    if pending["count"]:
        _waiting(pending["count"], pending["holder"] or holder or "another program")


def _read(cmd: Command, args: argparse.Namespace) -> int:
    """A command that reads: nothing is written, and a store that does not exist is an error, never a new file."""
    path = db_path(args.db)
    with reads_only():  # NOTE: the store is checked when the command first opens it, so bad input is named first
        pending = pending_summary(args.db) if path.is_file() else {"count": 0}
        if pending["count"]:
            _waiting(pending["count"], pending["holder"])
        try:
            return cmd.handler(args)
        except StoreError as e:
            if not path.is_file():
                what = "a folder, not a store file" if path.is_dir() else "not there"
                raise UsageError(f"{_db_field(args.db)}: the store {path} is {what}; check the path (a command that "
                                 "reads creates no store; `run`, `sweep` or `import` create one)") from None
            if isinstance(e, (StoreCorrupt, StoreVersionError)):
                raise UsageError(f"{_db_field(args.db)}: {e}") from None
            raise


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
        cmd = COMMANDS[args.command]
        if cmd.reads:
            return _read(cmd, args)
        if cmd.pending == "before":
            _store_pending(args.db)
        status = cmd.handler(args)
        if cmd.pending == "after" and not getattr(args, "dry_run", False):
            _store_pending(args.db)  # a run never waits for the store: what waited is stored after it
        return status
    except (ConfigError, UsageError, ValueError, StoreError) as e:  # store/query rejections are ValueErrors too;
        # StoreError: a corrupt, newer or busy store, whose message says how to recover
        print(f"error: {printable(' '.join(str(e).split()))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # --help
        return int(e.code or 0)
