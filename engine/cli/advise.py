"""The commands that answer "which loader setting?": `advise` (the best measured, and what to try next), `tune`
(a search with real runs, of a workload or of your own script), `predict` (from a probe, nothing run) and `code`
(the Python that builds a setting's loader). Each prints the answer as code last: what the user pastes."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from typing import Any, Callable

import pandas as pd

from engine.advice import observed_line, predict_fields, read_loader, resolve_baseline
from engine.advice.advisor import advise, describe, render_advice
from engine.advice.baseline import parse as parse_baseline
from engine.advice.code import code_of_run, parse_setting, snippet
from engine.advice.memory import parse_size
from engine.advice.tune import candidates, parse_budget, tune, waits_of
from engine.advice.tune_script import tune_script
from engine.cli._format import predicted_table, print_code, setting
from engine.cli._options import Parser, add_config_flags, config_from_args, launch_options, launch_settings
from engine.cli._store import prepare_store
from engine.config import RunConfig, load_toml
from engine.errors import ConfigError, printable
from engine.paths import calibrations_dir
from engine.predict import MODES
from engine.predict.learned import learned_residuals
from engine.store import recent_done_runs
from engine.run.hostfit import check_rules
from engine.run.observed import script_command

__all__ = [
    "advise_options",
    "cmd_advise",
    "cmd_code",
    "cmd_predict",
    "cmd_tune",
    "code_options",
    "predict_options",
    "tune_options",
]


def _baseline_options(p: Parser) -> None:
    """What advise and tune share: the problem, the user's setup, the confirmation sweep."""
    p.add_argument("--workload", default="tensor", help="workload to advise on / tune (default: tensor)")
    p.add_argument("--model", default="mlp", help="model to advise on / tune (default: mlp)")
    p.add_argument(
        "--baseline",
        default=None,
        metavar="FIELD=VALUE,...",
        help="your current loader setup, the side the best is compared with (default: sync), "
        "e.g. --baseline loader=processes,workers=4,batch_size=64",
    )
    p.add_argument(
        "--baseline-from",
        default=None,
        metavar="MODULE:CALLABLE",
        help="your setup read from your own DataLoader: a callable (no arguments) that returns it, e.g. "
        "mypkg.train:make_loader; instead of --baseline",
    )
    p.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="no answer peaks above this much memory (PSS of the whole process tree), e.g. 8G or 512M",
    )
    p.add_argument(
        "--write-confirm",
        metavar="PATH",
        help="write the confirmation sweep (TOML) to PATH: your setup "
        "(or sync) and the best, 7 runs each in a random order",
    )
    _baseline_run_option(p)


def _baseline_run_option(p: Parser) -> None:
    p.add_argument(
        "--baseline-run",
        default=None,
        metavar="RUN_ID",
        help="a stored run's loader settings as your setup, e.g. a run of your own loop (python -m engine "
        "observe); the lab runs them on the --workload and --model you name",
    )


def _baseline_of(args: argparse.Namespace) -> str | dict[str, Any] | None:
    """--baseline, the settings read from --baseline-from's DataLoader, or --baseline-run's (saying on which pipeline
    the lab will measure them); more than one is bad input."""
    if args.baseline_from and (args.baseline or args.baseline_run):
        raise ConfigError(
            "baseline_from", "give one of --baseline, --baseline-from and --baseline-run, not both or all three"
        )
    if args.baseline_from:
        return read_loader(args.baseline_from)
    given = resolve_baseline(args.baseline, args.baseline_run, args.db)
    if args.baseline_run:
        print(
            f"your setup from run {args.baseline_run}: {given}; measured on --workload {args.workload} --model "
            f"{args.model} (name your own dataset and model as module:callable for an answer about your "
            "pipeline)",
            file=sys.stderr,
        )
    return given


def _write_confirm(path: str, make_toml: Callable[[], str] | None) -> None:
    if make_toml is None:
        print("no confirmation sweep written: the reference is the fastest measured, or nothing ran", file=sys.stderr)
        return
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(make_toml())
    print(f"wrote {path}; run it: python -m engine sweep {path}")


# ---------------------------------------------------------------------------- advise


def advise_options(p: Parser) -> None:
    _baseline_options(p)
    p.add_argument("--host", default="this", help="this (default), any, or a host fingerprint")
    p.add_argument("--write-sweep", metavar="PATH", help="write the proposed next sweep (TOML) to PATH")


def cmd_advise(args: argparse.Namespace) -> int:
    """The best measured config for a workload and model on this host, and what to try next."""
    max_memory = parse_size(args.max_memory)
    advice = advise(
        args.workload, args.model, host=args.host, db=args.db, baseline=_baseline_of(args), max_memory=max_memory
    )
    print(render_advice(advice))
    if advice.base_config:
        print_code(
            {**advice.base_config, **advice.best},
            f"the best for {args.workload} + {args.model}: {describe(advice.best)}",
        )
    if args.write_confirm:
        _write_confirm(args.write_confirm, advice.confirm_sweep_toml if advice.default != advice.best else None)
    if args.write_sweep and advice.base_config:
        with open(args.write_sweep, "w", encoding="utf-8") as fh:
            fh.write(advice.next_sweep_toml())
        print(f"wrote {args.write_sweep}; run it: python -m engine sweep {args.write_sweep}")
    elif args.write_sweep:
        print("no sweep written: nothing measured yet", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------- tune


def tune_options(p: Parser) -> None:
    _baseline_options(p)
    p.add_argument("--budget", default="10m", help="wall time to spend: 90s, 10m, 1h (default: 10m)")
    p.add_argument("--config", help="TOML file of RunConfig fields every candidate shares (e.g. n_samples)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a RunConfig field every candidate shares (repeatable), e.g. --set batch_size=128",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--no-predict",
        action="store_true",
        help="no probe and no ranking by predicted epoch: successive halving over every candidate",
    )
    launch_options(p)
    p.add_argument(
        "script",
        nargs=argparse.REMAINDER,
        metavar="-- python train.py ARGS",
        help="tune your own training script instead of a workload: its training DataLoader (the one that "
        "runs the most steps) is tried under each candidate setting. THE SCRIPT RUNS ONCE PER TRIAL "
        "(many times), each stopped after a bounded number of batches, with LOADERLAB_TRIAL=1 set so "
        "it can skip checkpoints and logging; the answer is a diff of its DataLoader(...) call "
        "(--budget and --max-memory apply); each trial is stored as a run tagged 'tune' and the answer "
        "as the tune's row, under one tune id",
    )


def cmd_tune(args: argparse.Namespace) -> int:
    """Search loader settings (workers and intra-op threads jointly) within a time budget, with real runs: the
    predicted fastest first, then successive halving. With `-- python train.py ARGS`: your own script's training
    DataLoader, and the script runs once per trial."""
    launch_settings(args)
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
    prepare_store(args.db, defer=True)
    result = tune(
        args.workload,
        args.model,
        budget_s=budget,
        db=args.db,
        base=base,
        progress=not args.quiet,
        baseline=given or None,
        predicted=not args.no_predict,
        max_memory=max_memory,
    )
    print(result.render())
    print_code(result.best, f"the best found by tune {result.sweep_id}")
    if args.write_confirm:
        _write_confirm(args.write_confirm, result.confirm_sweep_toml if result.best_idx else None)
    return 0 if result.best is not None else 1


def _tune_script(args: argparse.Namespace, budget: float) -> int:
    """`tune -- python train.py ARGS`: the script's training DataLoader, tuned trial by trial (tune_script.py)."""
    if args.script[:1] == ["--"] and len(args.script) == 1:
        raise ConfigError(
            "script", "no script after --; give its command, e.g. python -m engine tune -- python train.py"
        )
    max_memory = parse_size(args.max_memory)
    # NOTE: a command that cannot run is refused here, alone, before the line below promises trials of it
    script_command(args.script, verb="tune", field="script")
    print(
        "the script runs once per trial, each stopped after a bounded number of batches (LOADERLAB_TRIAL=1 is set)",
        file=sys.stderr,
    )
    result = tune_script(
        args.script, budget_s=budget, db=args.db, max_memory=max_memory, say=lambda text: print(text, file=sys.stderr)
    )
    print(result.render())
    if result.stored or result.unstored:
        late = f"; {result.unstored} waiting for the store, which was busy" if result.unstored else ""
        answer = (
            f", and the answer as tune {result.tune_id}" if result.recorded else ", not the answer (the store was busy)"
        )
        print(f"stored: {result.stored} trial(s) as runs of sweep {result.tune_id} (tag 'tune'){answer}{late}")
    return 1 if result.error else 0


# ---------------------------------------------------------------------------- predict, code


def predict_options(p: Parser) -> None:
    p.add_argument("--config", help="TOML file of config fields; flags override it")
    add_config_flags(p)
    _baseline_run_option(p)


def cmd_predict(args: argparse.Namespace) -> int:
    """Predict the steady epoch time of a loader setting from a few-second probe of the pipeline on this host."""
    # NOTE: imported here: the probe needs torch, which the other commands' parent process does without
    from engine.predict.forecast import cached_or_new, rows  # noqa: PLC0415

    cfg = config_from_args(args)
    if cfg.mode not in MODES:
        raise ConfigError(
            "mode",
            f"predict models the {', '.join(MODES)} mode only, not '{cfg.mode}'; run it and "
            "read its bound (python -m engine run ...) instead",
        )
    one = args.loader is not None or (bool(args.config) and "loader" in load_toml(args.config))
    observed = predict_fields(args.baseline_run, args.db) if args.baseline_run else None
    cfg, one = (cfg.replace(**observed[0]), True) if observed else (cfg, one)
    probe, cached = cached_or_new(
        cfg, calibrations_dir(args.db), say=lambda text: print(text, file=sys.stderr, flush=True)
    )
    if cached:
        taken = probe.get("taken_at") or 0
        print(
            f"probe from {datetime.fromtimestamp(taken):%Y-%m-%d %H:%M}, {time.time() - taken:.0f} s old "
            f"({printable(cfg.workload)} + {printable(cfg.model)}, {probe['device']}, {probe['cores']:g} cores)"
        )
    found, n_runs = learned_residuals(cfg, recent_done_runs(MODES, args.db), probe)
    if n_runs:
        print(f"adjusted by {n_runs} earlier run(s) of this pipeline on this host (prior+runs)")
    space = [cfg] if one else candidates(cfg, default_threads=probe["default_threads"], waits=waits_of(probe))
    table = pd.DataFrame(rows(space, probe, found))
    if one:
        row = table.iloc[0]
        print(
            f"{setting(row)}: predicted epoch {row['predicted_epoch_s']:.3f} s ({row['predicted_lo_s']:.3f}-"
            f"{row['predicted_hi_s']:.3f}) · {row['samples_per_s']:.0f} samples/s · limit: {row['limit']}"
        )
        if observed:
            print(observed_line(observed[1], row["predicted_epoch_s"]))
        print_code(cfg, f"the setting predicted: {setting(row)}")
        return 0
    print(predicted_table(table))
    top = table.iloc[0]
    print_code(
        cfg.replace(**{k: _native(top[k]) for k in ("loader", "workers", "prefetch_depth", "threads")}),
        f"the setting predicted fastest: {printable(setting(top))}",
    )
    return 0


def _native(value: Any) -> Any:
    """A numpy scalar from the table as the Python value RunConfig checks (an int, not an int64)."""
    return value.item() if hasattr(value, "item") else value


def code_options(p: Parser) -> None:
    p.add_argument("run_id", nargs="?", metavar="RUN_ID", help="a stored run: the code for the setting it used")
    p.add_argument(
        "--setting",
        metavar="FIELD=VALUE,...",
        help="a setting not run yet instead, e.g. --setting loader=processes,workers=4,threads=1",
    )


def cmd_code(args: argparse.Namespace) -> int:
    """The Python that builds a run's loader (or --setting's) from your dataset, to paste into your training."""
    if bool(args.run_id) == bool(args.setting):
        raise ConfigError("run_id", "give a RUN_ID or --setting loader=...,workers=..., one of them")
    print(
        code_of_run(args.run_id, args.db)
        if args.run_id
        else snippet(parse_setting(args.setting), f"the setting {args.setting}"),
        end="",
    )
    return 0
