"""The CLI, wired in one place: `python -m engine <command>` (or `loaderlab <command>`). `--help` lists them.

Each command is a function `cmd_<name>(args) -> exit status` with its options beside it (`_<name>_options`),
registered by `@command`. Flags of `run` are generated from RunConfig (kebab case), so a new config field is a
new flag. Every command takes `--db PATH`. Exit status: 0 ok · 2 bad input (one line naming the field) ·
1 a run that failed.

Commands that read (runs, show, query, export, speedups, advise, export-bundle, predict) never write: they run
inside store.reads_only(), refuse a store path that does not exist, and only say when finished runs wait to be
stored. (predict only reads the store, where one exists, for earlier runs to learn from; it writes its probe's cache file.)
Commands that write call _prepare_store() before they start anything: a store that cannot be used is refused
there, and a missing one is created, in one line each.

    python -m engine run --loader threads --workers 4        # run, sweep, runs, show, query, export, advise,
    python -m engine predict --workload jpeg --model cnn     # predict, tune, import, export-bundle, demo,
    python -m engine worker --ensure                         # worker,
    python -m engine serve                                   # serve (the dashboard and its worker: `make run`)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

import pandas as pd

from engine.advice import observed_line, predict_fields, read_loader, resolve_baseline
from engine.advice.advisor import advise, describe, render_advice
from engine.advice.baseline import parse as parse_baseline
from engine.advice.code import code_of_run, parse_setting, snippet
from engine.advice.learned import learned_residuals
from engine.advice.memory import parse_size
from engine.predict import MODES
from engine.advice.tune import candidates, parse_budget, tune, waits_of
from engine.advice.tune_script import tune_script
from engine.analysis.stats import speedup_vs_sequential
from engine.config import DEFAULT_MAX_RUNS, RunConfig, SweepConfig, config_fields, field_choices, load_toml
from engine.errors import ConfigError, StoreBusy, StoreCorrupt, StoreError, StoreVersionError, UsageError, printable
from engine.jobs import ensure_worker, run_worker, serve, stop_worker, worker_pid
from engine.measure import efficiency_text
from engine.paths import Db, calibrations_dir, db_path
from engine.run.observed import observe
from engine.run.hostfit import HEAVY, OVERSUBSCRIBE_ENV, check_all, check_host, check_machine, check_rules
from engine.run.preflight import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, preflight, set_time_limit
from engine.run.runner import launch
from engine.status import RunStatus
from engine.store import (export, export_bundle, get_epochs, get_run, import_results, ingest_pending, list_runs,
                          pending_summary, prepare, reads_only, stream_query)
from engine.jobs.demo import ensure_demo
from engine.sweeps.local import run_sweep
from engine.sweeps.ray import require_ray, run_sweep_ray

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

    def format_help(self) -> str:
        """Help, with the registries' names filled in only now: listing them imports torch (seconds), which a
        command that only runs (`run` launches a child that imports it) would pay for nothing."""
        for action, field, tail in getattr(self, "named_flags", []):
            names = "|".join(field_choices(field) or ())
            action.help = f"{field.metadata['help']} [{names}]{tail}".replace("%", "%%")
        self.named_flags = []
        return super().format_help()


_MAX_COUNT = 2**63 - 1  # DuckDB's BIGINT: a larger LIMIT is a binder error, not a result


def _count(text: str) -> int:
    """argparse type of a row count (--limit, --max-rows): a whole number from 1 up; argparse names the flag."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{printable(text[:40])}' is not a whole number; give one from 1 up") \
            from None
    if not 1 <= value <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{printable(text[:40])} is out of range; give a whole number from 1 to "
                                         f"{_MAX_COUNT}")
    return value


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field; the names of a registry's field are listed when help is shown (_Parser)."""
    groups: dict[str, Any] = {}
    for f in config_fields():
        group = groups.setdefault(f.metadata["group"], p.add_argument_group(f"{f.metadata['group']} fields"))
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        named = isinstance(f.metadata.get("choices"), str)  # a registry's names, not a fixed tuple
        choices = None if named else field_choices(f)
        tail = f" (default: {default!r})"
        help_ = f.metadata["help"] + (f" [{'|'.join(choices)}]" if choices else "") + tail
        help_ = help_.replace("%", "%%")  # argparse formats help with %
        if f.type == "bool":
            action = group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                        help=help_)
        else:
            action = group.add_argument(flag, dest=f.name, default=None, metavar=f.type.upper().replace("[STR]", ""),
                                        help=help_)
        if named:
            p.named_flags = [*getattr(p, "named_flags", []), (action, f, tail)]


def _config_from_args(args: argparse.Namespace) -> RunConfig:
    """The config of the flags and --config, checked against the schema (the machine: hostfit.check_rules)."""
    data: dict[str, Any] = {}
    if args.config:
        data.update(load_toml(args.config))
    for f in config_fields():
        value = getattr(args, f.name, None)
        if value is not None:
            data[f.name] = value
    return RunConfig.from_dict(data)


# ---------------------------------------------------------------------------- run, sweep


def _launch_options(p: argparse.ArgumentParser) -> None:
    """What every launching command (run, sweep, tune) shares: preflight's time limit, insisting on oversubscribing."""
    p.add_argument("--preflight-timeout", metavar="SECONDS", default=None,
                   help=f"how long each call into a plugin may take while it is tried on one batch before launch "
                        f"(default: ${TIMEOUT_ENV} or {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--oversubscribe", action="store_true",
                   help=f"run even when ranks or worker processes exceed {HEAVY}x this host's usable cores (memory "
                        f"that cannot fit is refused regardless; also ${OVERSUBSCRIBE_ENV}=1)")


def _launch_settings(args: argparse.Namespace) -> None:
    """Set the launch options for this process and what it starts (the launchers read the environment)."""
    if args.preflight_timeout is not None:
        set_time_limit(args.preflight_timeout)
    if args.oversubscribe:
        os.environ[OVERSUBSCRIBE_ENV] = "1"


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"warning: {printable(warning)}", file=sys.stderr)


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file of config fields; flags override it")
    p.add_argument("--dry-run", action="store_true", help="validate and print the config, run nothing")
    p.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    _launch_options(p)
    _add_config_flags(p)


@command(_run_options, pending="after")
def cmd_run(args: argparse.Namespace) -> int:
    """Run one config (flags, or --config FILE.toml with flags overriding it)."""
    _launch_settings(args)
    # NOTE: a run's child imports torch and makes the machine's checks (the device, the mode's rules) before its
    # RunLog starts; launch() raises what it refuses. Checking here too imported torch twice (seconds).
    cfg = _config_from_args(args)
    # refused here, in one line, when this host cannot run it (--dry-run: the machine's rules too, as the run's)
    _warn(check_machine(cfg) if args.dry_run else check_host(cfg))
    if args.dry_run:
        preflight(cfg)  # a plugin's one-batch check is validation too: --dry-run is how to try your plugin
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    _prepare_store(args.db, defer=True)

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
        print(f"run {result.run_id} {result.status}: {_line(result.error)}", file=sys.stderr)
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
    if run.get("efficiency") is not None:  # above 1 no fraction and no verdict (engine/measure/verdicts.py)
        parts.append(f"bound {run['bound_s']:.3f} s, efficiency {efficiency_text(run['efficiency'])}"
                     + (f", {run['verdict']}" if run.get("verdict") and run["efficiency"] <= 1 else ""))
    if _given(run.get("overlap")):  # concurrent modes: how much of A + B's compute the concurrency hid
        parts.append(f"overlap {run['overlap']:.0%}")
    print(" · ".join(parts))
    for key, what in (("verdict_help", run.get("verdict")), ("bound_note", "note"), ("bound_error", "no lower bound")):
        if run.get(key):
            print(f"  {what}: {_line(run[key])}")
    for line in _costs(run):
        print(f"  {line}")


def _line(text: object) -> str:
    """Text for one line of the terminal: whitespace runs (newlines too) collapsed, control characters escaped."""
    return printable(" ".join(str(text).split()))



def _costs(run: dict[str, Any]) -> list[str]:
    """What the GPU waited on (GPU runs only) and how long the start-up took: lines under the summary."""
    out = []
    if _given(run.get("gpu_idle_share")):
        parts = [(f"gpu_idle_{key}_share", what) for key, what in (("data", "data"), ("copy", "copies"),
                                                                   ("other", "the host"))]
        split = ", ".join(f"{what} {run[k]:.0%}" for k, what in parts if _given(run.get(k)))
        out.append(f"GPU idle {run['gpu_idle_share']:.0%} of the steady epochs" + (f", waiting on {split}" if split
                                                                                      else ""))
    if _given(run.get("startup_s")):
        out.append(f"start-up {run['startup_s']:.1f} s to the first batch (interpreter and imports "
                   f"{run['startup_imports_s']:.1f} s)")
    return out


def _given(value: Any) -> bool:
    return value is not None and value == value  # NaN from the store is "not measured"


def _sweep_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="sweep TOML (name, repeats, seed, [base], [grid])")
    p.add_argument("--repeats", help="override the file's repeats")
    p.add_argument("--max-runs", type=int, default=None, metavar="N",
                   help=f"refuse a sweep of more runs (configs × repeats) than this, before building any (default: "
                        f"the file's max_runs, else {DEFAULT_MAX_RUNS})")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--address", default=None, help="Ray cluster address (auto, ray://host:port)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _launch_options(p)


@command(_sweep_options, pending="after")
def cmd_sweep(args: argparse.Namespace) -> int:
    """Run a grid of configs × repeats from a TOML file, in a seeded random order."""
    _launch_settings(args)
    data = load_toml(args.file, "file")
    if args.repeats is not None:
        data["repeats"] = int(args.repeats)
    if args.max_runs is not None:
        data["max_runs"] = args.max_runs
    if args.executor == "ray":
        require_ray()  # before anything else: without Ray there is nothing to size
    sweep = SweepConfig.from_dict(data, expand=False)  # its size, from the axes' lengths, is checked against the cap
    _prepare_store(args.db, defer=True)  # a store that cannot be used is refused before the grid is even built
    print(f"sweep {printable(sweep.name)}: {sweep.describe()}", file=sys.stderr)  # said before a config is built
    distinct = len(sweep.configs())  # every config validated, once: the runs below reuse them
    check_rules(sweep.configs())  # on this machine, as before any run; a Ray node's runs check theirs again
    if distinct < sweep.size():
        print(f"  {distinct} distinct configs ({distinct * sweep.repeats} runs): the others differ only in fields "
              "their loader or mode ignores", file=sys.stderr)
    if args.executor == "local":  # NOTE: a Ray cluster's runs are checked on the node that runs them (launch)
        _warn(check_all(sweep.configs()))
    if args.executor == "ray":
        result = run_sweep_ray(sweep, db=args.db, address=args.address, progress=not args.quiet)
    else:
        result = run_sweep(sweep, db=args.db, progress=not args.quiet)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(result.counts.items()))
    print(f"sweep {printable(result.sweep_id)}: {counts}")
    return 0 if result.counts.get(RunStatus.DONE, 0) == len(result.results) else 1


# ---------------------------------------------------------------------------- reading the store


def _shown(df: pd.DataFrame) -> pd.DataFrame:
    """A frame for the terminal: control characters in its text (tags, notes, names, query results) escaped, so that
    a tag holding an ANSI escape prints as text instead of recolouring or rewriting the user's terminal."""
    out = df.rename(columns=lambda c: printable(str(c)))
    for i in range(out.shape[1]):
        col = out.iloc[:, i]
        if col.dtype == object or pd.api.types.is_string_dtype(col):
            out.isetitem(i, col.map(lambda v: printable(v) if isinstance(v, str) else v))
    return out


def _runs_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=_count, default=30, help="how many runs, newest first (default: 30)")


@command(_runs_options, reads=True)
def cmd_runs(args: argparse.Namespace) -> int:
    """A table of recent runs."""
    df = list_runs(db=args.db, limit=args.limit)
    cols = [c for c in ("run_id", "status", "workload", "model", "loader", "workers", "mode", "batch_size",
                        "epoch_s", "samples_per_s", "efficiency", "verdict", "tag") if c in df.columns]
    print(_shown(df[cols]).to_string(index=False) if len(df) else "no runs yet: try `python -m engine run`")
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
    print(_shown(get_epochs(args.run_id, db=args.db)).to_string(index=False))
    return 0


_TABLE_ROWS = 100_000  # a table is read by a person and laid out whole; csv and json stream any number of rows


def _query_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("sql")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--max-rows", type=_count, default=10_000,
                   help=f"row cap (default: 10000); csv and json stream any number, a table shows at most "
                        f"{_TABLE_ROWS}")


@command(_query_options, reads=True)
def cmd_query(args: argparse.Namespace) -> int:
    """Read-only SQL over the store (one SELECT; 10 s limit; row cap)."""
    if args.format == "table" and args.max_rows > _TABLE_ROWS:
        raise UsageError(f"--max-rows: a table shows at most {_TABLE_ROWS} rows; for {args.max_rows}, write them "
                         "with --format csv or json (they stream)")
    with stream_query(args.sql, db=args.db, max_rows=args.max_rows) as stream:
        _WRITERS[args.format](stream.batches, sys.stdout)
    if stream.truncated:
        print(f"(truncated at {args.max_rows} rows)", file=sys.stderr)
    return 0


def _write_table(batches: Iterator[pd.DataFrame], out: TextIO) -> None:
    frames = list(batches)
    out.write(_shown(frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)).to_string(index=False)
              + "\n")


def _write_csv(batches: Iterator[pd.DataFrame], out: TextIO) -> None:
    for i, df in enumerate(batches):  # NOTE: a batch at a time: no result is ever held whole, nor written at once
        df.to_csv(out, index=False, header=i == 0)


def _write_json(batches: Iterator[pd.DataFrame], out: TextIO) -> None:
    """One JSON array of records, as DataFrame.to_json writes it, written a batch at a time."""
    sep = "["
    for df in batches:
        if len(df):
            out.write(sep + df.to_json(orient="records")[1:-1])
            sep = ","
    out.write("[]\n" if sep == "[" else "]\n")


_WRITERS = {"table": _write_table, "csv": _write_csv, "json": _write_json}


def _speedups_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", help="only this sweep's runs (its id, as `runs` lists it)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")


@command(_speedups_options, reads=True,
         help="dual-* and fused vs the same models one after another, with 95%% intervals")
def cmd_speedups(args: argparse.Namespace) -> int:
    """Each dual-* and fused config's speedup over training its models in turn
    (engine.analysis.stats.speedup_vs_sequential)."""
    filters = {"status": RunStatus.DONE, **({"sweep_id": args.sweep} if args.sweep else {})}
    table = speedup_vs_sequential(list_runs(db=args.db, limit=1_000_000, filters=filters))
    if table.empty:
        print("no dual-* or fused runs yet" + (f" in sweep {args.sweep}" if args.sweep else "")
              + ": try `python -m engine sweep examples/dual.toml` (or fused.toml)")
        return 0
    cols = [c for c in ("sweep_id", "mode", "n_models", "model", "model_b", "dual_data", "loader", "n", "baseline_mode",
                        "baseline_n", "speedup", "speedup_lo", "speedup_hi", "difference", "note") if c in table.columns]
    table = table[cols]
    if args.format == "json":
        print(table.to_json(orient="records"))
    elif args.format == "csv":
        print(table.to_csv(index=False), end="")
    else:
        print(_shown(table).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
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


# ---------------------------------------------------------------------------- observe


def _observe_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default=None, help="a tag for the runs (default: none)")
    p.add_argument("script", nargs=argparse.REMAINDER, metavar="-- python train.py ARGS",
                   help="your training script's command, unchanged, after --")


@command(_observe_options, pending="after",
         help="run your training script unchanged and store a run for each DataLoader it iterates")
def cmd_observe(args: argparse.Namespace) -> int:
    """Run `python train.py ARGS` as it is; each DataLoader it iterates is observed and stored as its own run
    (source 'observed'). The script's exit status is this command's."""
    _prepare_store(args.db, defer=True)
    return observe(args.script, name=args.name, db=args.db, say=lambda line: print(line, file=sys.stderr))


# ---------------------------------------------------------------------------- advise, tune


def _baseline_options(p: argparse.ArgumentParser) -> None:
    """What advise and tune share: the problem, the user's setup, the confirmation sweep."""
    p.add_argument("--workload", default="tensor", help="workload to advise on / tune (default: tensor)")
    p.add_argument("--model", default="mlp", help="model to advise on / tune (default: mlp)")
    p.add_argument("--baseline", default=None, metavar="FIELD=VALUE,...",
                   help="your current loader setup, the side the best is compared with (default: sync), "
                        "e.g. --baseline loader=processes,workers=4,batch_size=64")
    p.add_argument("--baseline-from", default=None, metavar="MODULE:CALLABLE",
                   help="your setup read from your own DataLoader: a callable (no arguments) that returns it, e.g. "
                        "mypkg.train:make_loader; instead of --baseline")
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="no answer peaks above this much memory (PSS of the whole process tree), e.g. 8G or 512M")
    p.add_argument("--write-confirm", metavar="PATH", help="write the confirmation sweep (TOML) to PATH: your setup "
                   "(or sync) and the best, 7 runs each in a random order")
    _baseline_run_option(p)


def _baseline_run_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline-run", default=None, metavar="RUN_ID",
                   help="a stored run's loader settings as your setup, e.g. a run of your own loop (python -m engine "
                        "observe); the lab runs them on the --workload and --model you name")


def _baseline_of(args: argparse.Namespace) -> str | dict[str, Any] | None:
    """--baseline, the settings read from --baseline-from's DataLoader, or --baseline-run's (saying on which pipeline
    the lab will measure them); more than one is bad input."""
    if args.baseline_from and (args.baseline or args.baseline_run):
        raise ConfigError("baseline_from", "give one of --baseline, --baseline-from and --baseline-run, not both or all three")
    if args.baseline_from:
        return read_loader(args.baseline_from)
    given = resolve_baseline(args.baseline, args.baseline_run, args.db)
    if args.baseline_run:
        print(f"your setup from run {args.baseline_run}: {given}; measured on --workload {args.workload} --model "
              f"{args.model} (name your own dataset and model as module:callable for an answer about your "
              "pipeline)", file=sys.stderr)
    return given


def _print_code(setting: dict[str, Any] | RunConfig | None, title: str) -> None:
    """The answer as code, last: what the user pastes."""
    if setting is not None:
        print(f"\n# --- the code: paste it where your loader is built ---\n{snippet(setting, title)}", end="")


def _advise_options(p: argparse.ArgumentParser) -> None:
    _baseline_options(p)
    p.add_argument("--host", default="this", help="this (default), any, or a host fingerprint")
    p.add_argument("--write-sweep", metavar="PATH", help="write the proposed next sweep (TOML) to PATH")


@command(_advise_options, reads=True)
def cmd_advise(args: argparse.Namespace) -> int:
    """The best measured config for a workload and model on this host, and what to try next."""
    max_memory = parse_size(args.max_memory)
    advice = advise(args.workload, args.model, host=args.host, db=args.db, baseline=_baseline_of(args),
                    max_memory=max_memory)
    print(render_advice(advice))
    if advice.base_config:
        _print_code({**advice.base_config, **advice.best}, f"the best for {args.workload} + {args.model}: "
                                                            f"{describe(advice.best)}")
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
    p.add_argument("--no-predict", action="store_true", help="no probe and no ranking by predicted epoch: successive "
                   "halving over every candidate")
    _launch_options(p)
    p.add_argument("script", nargs=argparse.REMAINDER, metavar="-- python train.py ARGS",
                   help="tune your own training script instead of a workload: its training DataLoader (the one that "
                        "runs the most steps) is tried under each candidate setting. THE SCRIPT RUNS ONCE PER TRIAL "
                        "(many times), each stopped after a bounded number of batches, with LOADERLAB_TRIAL=1 set so "
                        "it can skip checkpoints and logging; the answer is a diff of its DataLoader(...) call "
                        "(--budget and --max-memory apply); each trial is stored as a run tagged 'tune' and the answer "
                        "as the tune's row, under one tune id")


@command(_tune_options)
def cmd_tune(args: argparse.Namespace) -> int:
    """Search loader settings (workers and intra-op threads jointly) within a time budget, with real runs: the
    predicted fastest first, then successive halving. With `-- python train.py ARGS`: your own script's training
    DataLoader, and the script runs once per trial."""
    _launch_settings(args)
    budget = parse_budget(args.budget)
    if args.script:
        return _tune_script(args, budget)
    base: dict[str, Any] = dict(load_toml(args.config)) if args.config else {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("set", f"'{item}' is not FIELD=VALUE, e.g. --set batch_size=128")
        base[key.strip()] = value.strip()
    given = parse_baseline(_baseline_of(args))  # bad input is named before the store is looked at or created
    max_memory = parse_size(args.max_memory)
    check_rules([RunConfig.from_dict({**base, "workload": args.workload, "model": args.model})])
    _prepare_store(args.db, defer=True)
    result = tune(args.workload, args.model, budget_s=budget, db=args.db, base=base, progress=not args.quiet,
                  baseline=given or None, predicted=not args.no_predict, max_memory=max_memory)
    print(result.render())
    _print_code(result.best, f"the best found by tune {result.sweep_id}")
    if args.write_confirm:
        _write_confirm(args.write_confirm, result.confirm_sweep_toml if result.best_idx else None)
    return 0 if result.best is not None else 1


def _tune_script(args: argparse.Namespace, budget: float) -> int:
    """`tune -- python train.py ARGS`: the script's training DataLoader, tuned trial by trial (tune_script.py)."""
    max_memory = parse_size(args.max_memory)
    print("the script runs once per trial, each stopped after a bounded number of batches (LOADERLAB_TRIAL=1 is set)",
          file=sys.stderr)
    result = tune_script(args.script, budget_s=budget, db=args.db, max_memory=max_memory,
                         say=lambda line: print(line, file=sys.stderr))
    print(result.render())
    if result.stored or result.unstored:
        late = f"; {result.unstored} waiting for the store, which was busy" if result.unstored else ""
        answer = f", and the answer as tune {result.tune_id}" if result.recorded else \
            ", not the answer (the store was busy)"
        print(f"stored: {result.stored} trial(s) as runs of sweep {result.tune_id} (tag 'tune'){answer}{late}")
    return 1 if result.error else 0


def _predict_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file of config fields; flags override it")
    _add_config_flags(p)
    _baseline_run_option(p)


# NOTE: reads=True: it reads the store only where one exists (earlier runs, --baseline-run's run), never creates
# one; it writes only the probe's cache file beside it
@command(_predict_options, reads=True,
         help="the predicted epoch time of a loader setting, or (no --loader) of every setting tune would try, ranked")
def cmd_predict(args: argparse.Namespace) -> int:
    """Predict the steady epoch time of a loader setting from a few-second probe of the pipeline on this host."""
    # NOTE: imported here: the probe needs torch, which the other commands' parent process does without
    from engine.predict.forecast import cached_or_new, rows  # noqa: PLC0415

    cfg = _config_from_args(args)
    if cfg.mode not in MODES:
        raise ConfigError("mode", f"predict models the {', '.join(MODES)} mode only, not '{cfg.mode}'; run it and "
                                  "read its bound (python -m engine run ...) instead")
    one = args.loader is not None or (bool(args.config) and "loader" in load_toml(args.config))
    observed = predict_fields(args.baseline_run, args.db) if args.baseline_run else None
    cfg, one = (cfg.replace(**observed[0]), True) if observed else (cfg, one)
    probe, cached = cached_or_new(cfg, calibrations_dir(args.db),
                                  say=lambda line: print(line, file=sys.stderr, flush=True))
    if cached:
        taken = probe.get("taken_at") or 0
        print(f"probe from {datetime.fromtimestamp(taken):%Y-%m-%d %H:%M}, {time.time() - taken:.0f} s old "
              f"({printable(cfg.workload)} + {printable(cfg.model)}, {probe['device']}, {probe['cores']:g} cores)")
    found, n_runs = learned_residuals(cfg, args.db, probe)
    if n_runs:
        print(f"adjusted by {n_runs} earlier run(s) of this pipeline on this host (prior+runs)")
    space = [cfg] if one else candidates(cfg, default_threads=probe["default_threads"], waits=waits_of(probe))
    table = pd.DataFrame(rows(space, probe, found))
    if one:
        row = table.iloc[0]
        print(f"{_setting(row)}: predicted epoch {row['predicted_epoch_s']:.3f} s ({row['predicted_lo_s']:.3f}-"
              f"{row['predicted_hi_s']:.3f}) · {row['samples_per_s']:.0f} samples/s · limit: {row['limit']}")
        if observed:
            print(observed_line(observed[1], row["predicted_epoch_s"]))
        _print_code(cfg, f"the setting predicted: {_setting(row)}")
        return 0
    print(_predicted_table(table))
    top = table.iloc[0]
    _print_code(cfg.replace(**{k: _native(top[k]) for k in ("loader", "workers", "prefetch_depth", "threads")}),
                f"the setting predicted fastest: {printable(_setting(top))}")
    return 0


def _native(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _code_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a stored run: the code for the setting it used")
    p.add_argument("--setting", metavar="FIELD=VALUE,...", help="a setting not run yet instead, e.g. "
                   "--setting loader=processes,workers=4,threads=1")


@command(_code_options, reads=True)
def cmd_code(args: argparse.Namespace) -> int:
    """The Python that builds a run's loader (or --setting's) from your dataset, to paste into your training."""
    if bool(args.run_id) == bool(args.setting):
        raise ConfigError("run_id", "give a RUN_ID or --setting loader=...,workers=..., one of them")
    print(code_of_run(args.run_id, args.db) if args.run_id else snippet(parse_setting(args.setting),
                                                                          f"the setting {args.setting}"), end="")
    return 0


def _predicted_table(table: pd.DataFrame) -> str:
    """One line per prediction: settings the model predicts alike share a line (it cannot tell them apart), and
    a `~` marks a range that overlaps the fastest's (this machine's noise cannot rank the two)."""
    alike: dict[int, list[int]] = {}
    for i, r in table.iterrows():
        alike.setdefault(i if pd.isna(r["same_as"]) else int(r["same_as"]), []).append(i)
    shown = table.loc[sorted(alike)].copy()
    shown.insert(0, "setting", [_setting(r) for _, r in shown.iterrows()])
    shown["alike (the model cannot tell apart)"] = ["; ".join(_differs(table.loc[i], table.loc[j])
                                                             for j in alike[i][1:]) for i in shown.index]
    shown["range (s)"] = [f"{'' if a else '~'}{lo:.3f}-{hi:.3f}" for lo, hi, a in
                          zip(shown["predicted_lo_s"], shown["predicted_hi_s"], shown["apart"])]
    shown = shown[["setting", "predicted_epoch_s", "range (s)", "samples_per_s", "limit",
                   "alike (the model cannot tell apart)"]].rename(
        columns={"predicted_epoch_s": "predicted epoch (s)", "samples_per_s": "samples/s"})
    text = _shown(shown).to_string(index=False, formatters={"predicted epoch (s)": "{:.3f}".format,
                                                            "samples/s": "{:.0f}".format})
    notes = []
    if len(shown) < len(table):
        notes.append("alike: settings predicted the same as the row's, shown once: the model cannot tell them apart "
                     "(run them to know)")
    if not shown["range (s)"].iloc[1:].str.startswith("~").eq(False).all():
        notes.append("~: the range overlaps the fastest's: this machine's noise cannot rank the two")
    return text + ("\n\n" + "\n".join(notes) if notes else "")  # a blank line: the table ends there


def _differs(first: Any, other: Any) -> str:
    """'depth 8' or 'threads, 1 worker': what `other` sets unlike `first`, in the setting's words."""
    names = {"loader": "", "workers": "workers ", "prefetch_depth": "depth ", "threads": "threads ",
             "batch_size": "batch "}
    return ", ".join(f"{names[k]}{other[k]}" for k in names if other[k] != first[k]) or _setting(other)


def _setting(row: Any) -> str:
    """'processes, 2 workers, depth 2, batch 64, 1 thread': the knobs a prediction depends on."""
    threads = int(row["threads"])
    return f"{describe(row)}, " + (f"{threads} thread{'s' * (threads != 1)}" if threads else "default threads")


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
        print(f"demo skipped: {_line(e)}; `make run` offers it again next time",
              file=sys.stderr)
        return 0
    print("demo sweep queued: the job worker runs it; watch it on the Launch page" if ran
          else "store already has runs or jobs; demo skipped")
    return 0


def _worker_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ensure", action="store_true", help="start a detached worker if none is alive, then return")
    p.add_argument("--stop", action="store_true", help="stop the running worker (its run is cancelled; queued jobs "
                   "stay queued)")
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
    if args.stop:
        pid = worker_pid(args.db)
        print(f"worker stopped (pid {pid})" if stop_worker(args.db) else "no worker is running")
        return 0
    return run_worker(args.db, once=args.once, poll_s=args.poll_s, lock_fd=args.lock_fd)


def _serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default="127.0.0.1", help="address to serve on (0.0.0.0: the LAN, see make share)")
    p.add_argument("--port", type=int, default=8501, help="port to serve on")


@command(_serve_options, pending="never",  # the dashboard's banner and the worker store what waited
         help="serve the dashboard with its job worker (`make run`); Ctrl-C stops both, but not a worker that "
              "was running before")
def cmd_serve(args: argparse.Namespace) -> int:
    """`python -m engine serve`: `streamlit run app.py` and the job worker, stopped together."""
    return serve(args.db, address=args.address, port=args.port, say=lambda line: print(line, flush=True))


# ---------------------------------------------------------------------------- wiring


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command with --db; the options of `only` (a command's name), or of all commands when None.

    NOTE: `run`'s help lists the registry's choices, which imports torch (seconds): main() builds only the
    options of the command it runs, and the names are read only when help is shown (_Parser.format_help).
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


_NEW_STORES: set[Path] = set()  # stores a writing command may create: announced once they exist (main)


def _prepare_store(db: Db, *, defer: bool = False) -> None:
    """Before a command that writes starts anything: refuse a store that cannot be used, create a missing one.
    defer (run, sweep, tune): a missing one is only checked to be creatable and is made by the first write, so a
    config refused later (by preflight or the run child) leaves no empty store behind; main() says so then."""
    path = db_path(db)
    try:
        if defer and not path.exists():
            _check_creatable(path)
            _NEW_STORES.add(path)
        elif prepare(db):
            print(f"creating a new store at {path}", file=sys.stderr)
    except StoreError as e:
        raise UsageError(f"{_db_field(db)}: {e}") from None


def _check_creatable(path: Path) -> None:
    """A store can be made at `path`: its nearest existing folder takes a file (tried with a temporary one, since
    permission bits do not tell for root, /proc or a read-only mount)."""
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder")
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise StoreError(f"cannot create the store {path}: {e.strerror or e}; name a file in a folder you can "
                         "write to") from None


def _announce_new_stores() -> None:
    for path in sorted(_NEW_STORES):
        if path.exists():
            print(f"created a new store at {path}", file=sys.stderr)
    _NEW_STORES.clear()


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
        try:
            args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
        except SystemExit as e:  # --help: argparse printed it; the only SystemExit that is not an error
            return int(e.code or 0)
        cmd = COMMANDS[args.command]
        if cmd.reads:
            return _read(cmd, args)
        if cmd.pending == "before":
            _store_pending(args.db)
        try:
            status = cmd.handler(args)
            if cmd.pending == "after" and not getattr(args, "dry_run", False):
                _store_pending(args.db)  # a run never waits for the store: what waited is stored after it
        finally:
            _announce_new_stores()
        return status
    except (ConfigError, UsageError, ValueError, StoreError) as e:  # store/query rejections are ValueErrors too;
        # StoreError: a corrupt, newer or busy store, whose message says how to recover
        print(f"error: {_line(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of a streamed result went away (`| head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit: into nothing
        return 141  # 128 + SIGPIPE: what a shell reports for a command that a closed pipe stopped
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except SystemExit as e:  # NOTE: code the command called exited (a plugin's sys.exit): an error, never silence
        print(f"error: the command was ended by sys.exit({printable(repr(e.code))[:60]}) in code it called; "
              "a plugin must return or raise an exception, never exit the process", file=sys.stderr)
        return 2
