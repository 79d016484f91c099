"""The commands over the store's results: reading them (`runs`, `show`, `query`, `speedups`, `export`,
`export-bundle`, which never write) and merging another store's (`import`, engine/store/merge.py)."""

from __future__ import annotations

import argparse
import json
import sys

from engine.analysis.stats import speedup_vs_sequential
from engine.cli._format import WRITERS, shown
from engine.cli._options import Parser, count
from engine.cli._store import prepare_store
from engine.errors import UsageError
from engine.status import RunStatus
from engine.store import export, export_bundle, get_epochs, get_run, import_results, list_runs, stream_query

__all__ = [
    "cmd_export",
    "cmd_export_bundle",
    "cmd_import",
    "cmd_query",
    "cmd_runs",
    "cmd_show",
    "cmd_speedups",
    "export_bundle_options",
    "export_options",
    "import_options",
    "query_options",
    "runs_options",
    "show_options",
    "speedups_options",
]


def runs_options(p: Parser) -> None:
    p.add_argument("--limit", type=count, default=30, help="how many runs, newest first (default: 30)")


def cmd_runs(args: argparse.Namespace) -> int:
    """A table of recent runs."""
    df = list_runs(db=args.db, limit=args.limit)
    cols = [
        c
        for c in (
            "run_id",
            "status",
            "workload",
            "model",
            "loader",
            "workers",
            "mode",
            "batch_size",
            "epoch_s",
            "samples_per_s",
            "efficiency",
            "verdict",
            "tag",
        )
        if c in df.columns
    ]
    print(shown(df[cols]).to_string(index=False) if len(df) else "no runs yet: try `python -m engine run`")
    return 0


def show_options(p: Parser) -> None:
    p.add_argument("run_id")


def cmd_show(args: argparse.Namespace) -> int:
    """One run: config, summary and epochs."""
    run = get_run(args.run_id, db=args.db)
    if run is None:
        raise UsageError(f"run_id: no run '{args.run_id}' in the store; list them with `python -m engine runs`")
    print(json.dumps({k: v for k, v in run.items() if k != "config"}, indent=2, default=str))
    print(shown(get_epochs(args.run_id, db=args.db)).to_string(index=False))
    return 0


_TABLE_ROWS = 100_000  # a table is read by a person and laid out whole; csv and json stream any number of rows


def query_options(p: Parser) -> None:
    p.add_argument("sql")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument(
        "--max-rows",
        type=count,
        default=10_000,
        help=f"row cap (default: 10000); csv and json stream any number, a table shows at most {_TABLE_ROWS}",
    )


def cmd_query(args: argparse.Namespace) -> int:
    """Read-only SQL over the store (one SELECT; 10 s limit; row cap)."""
    if args.format == "table" and args.max_rows > _TABLE_ROWS:
        raise UsageError(
            f"--max-rows: a table shows at most {_TABLE_ROWS} rows; for {args.max_rows}, write them "
            "with --format csv or json (they stream)"
        )
    with stream_query(args.sql, db=args.db, max_rows=args.max_rows) as stream:
        WRITERS[args.format](stream.batches, sys.stdout)
    if stream.truncated:
        print(f"(truncated at {args.max_rows} rows)", file=sys.stderr)
    return 0


def speedups_options(p: Parser) -> None:
    p.add_argument("--sweep", help="only this sweep's runs (its id, as `runs` lists it)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")


def cmd_speedups(args: argparse.Namespace) -> int:
    """Each dual-* and fused config's speedup over training its models in turn
    (engine.analysis.stats.speedup_vs_sequential)."""
    filters = {"status": RunStatus.DONE, **({"sweep_id": args.sweep} if args.sweep else {})}
    table = speedup_vs_sequential(list_runs(db=args.db, limit=1_000_000, filters=filters))
    if table.empty:
        print(
            "no dual-* or fused runs yet"
            + (f" in sweep {args.sweep}" if args.sweep else "")
            + ": try `python -m engine sweep examples/dual.toml` (or fused.toml)"
        )
        return 0
    cols = [
        c
        for c in (
            "sweep_id",
            "mode",
            "n_models",
            "model",
            "model_b",
            "dual_data",
            "loader",
            "n",
            "baseline_mode",
            "baseline_n",
            "speedup",
            "speedup_lo",
            "speedup_hi",
            "difference",
            "note",
        )
        if c in table.columns
    ]
    table = table[cols]
    if args.format == "json":
        print(table.to_json(orient="records"))
    elif args.format == "csv":
        print(table.to_csv(index=False), end="")
    else:
        print(shown(table).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


def export_options(p: Parser) -> None:
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet")
    p.add_argument("--table", default="runs")
    p.add_argument("--out", help="output file (default: loaderlab-<table>.<format>)")


def cmd_export(args: argparse.Namespace) -> int:
    """Export a table to Parquet or CSV."""
    out = export(args.out or f"loaderlab-{args.table}.{args.format}", args.format, db=args.db, table=args.table)
    print(out)
    return 0


def import_options(p: Parser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="another LoaderLab .duckdb store, a folder from export-bundle, or .parquet exports",
    )


def cmd_import(args: argparse.Namespace) -> int:
    """Merge results from another store file or a Parquet bundle, deduplicated by run id."""
    prepare_store(args.db)
    result = import_results(args.paths, db=args.db)
    rows = ", ".join(f"{n} {t}" for t, n in result.rows.items() if t != "runs")
    print(
        f"imported {result.runs_added} runs ({result.runs_present} already here)" + (f"; rows: {rows}" if rows else "")
    )
    return 0


def export_bundle_options(p: Parser) -> None:
    p.add_argument(
        "out_dir", metavar="DIR", help="folder to write runs/epochs/steps/samples/calibrations/tunes.parquet"
    )


def cmd_export_bundle(args: argparse.Namespace) -> int:
    """Export every table as Parquet into a folder, for `import` on another machine."""
    print(export_bundle(args.out_dir, db=args.db))
    return 0
