"""The dashboard's commands: `serve` (streamlit and the job worker, as `make run` starts them), `worker` (run the
queued jobs) and `demo` (queue the demo sweep into an empty store). They store what waited themselves."""

from __future__ import annotations

import argparse
import logging
import sys

from engine.cli._format import line
from engine.cli._options import Parser
from engine.cli._store import prepare_store
from engine.errors import StoreBusy
from engine.jobs import ensure_worker, run_worker, serve, stop_worker, worker_pid
from engine.jobs.demo import ensure_demo

__all__ = ["cmd_demo", "cmd_serve", "cmd_worker", "serve_options", "worker_options"]


def cmd_demo(args: argparse.Namespace) -> int:
    """Queue the demo sweep as jobs for the worker, if the store has no runs and no jobs yet."""
    prepare_store(args.db)
    try:
        ran = ensure_demo(db=args.db)
    except StoreBusy as e:  # `make run` goes on to serve the dashboard: a held store is no reason to stop there
        print(f"demo skipped: {line(e)}; `make run` offers it again next time", file=sys.stderr)
        return 0
    print(
        "demo sweep queued: the job worker runs it; watch it on the Launch page"
        if ran
        else "store already has runs or jobs; demo skipped"
    )
    return 0


def worker_options(p: Parser) -> None:
    p.add_argument("--ensure", action="store_true", help="start a detached worker if none is alive, then return")
    p.add_argument(
        "--stop", action="store_true", help="stop the running worker (its run is cancelled; queued jobs stay queued)"
    )
    p.add_argument("--once", action="store_true", help="run the queued jobs, then exit")
    p.add_argument("--poll-s", type=float, default=1.0, help="seconds between looks at an empty queue")
    p.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)  # handed over by ensure_worker


def cmd_worker(args: argparse.Namespace) -> int:
    """`python -m engine worker`: run the job worker in the foreground, or --ensure one runs in the background."""
    # NOTE: force: the worker's log (worker.log when ensure_worker starts it) has timestamps and INFO lines
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", force=True)
    logging.getLogger("engine").setLevel(logging.INFO)
    prepare_store(args.db)
    if args.ensure:
        pid = ensure_worker(args.db)
        print(f"worker started (pid {pid})" if pid else f"worker already running (pid {worker_pid(args.db)})")
        return 0
    if args.stop:
        pid = worker_pid(args.db)
        print(f"worker stopped (pid {pid})" if stop_worker(args.db) else "no worker is running")
        return 0
    return run_worker(args.db, once=args.once, poll_s=args.poll_s, lock_fd=args.lock_fd)


def serve_options(p: Parser) -> None:
    p.add_argument("--address", default="127.0.0.1", help="address to serve on (0.0.0.0: the LAN, see make share)")
    p.add_argument("--port", type=int, default=8501, help="port to serve on")


def cmd_serve(args: argparse.Namespace) -> int:
    """`python -m engine serve`: `streamlit run app.py` and the job worker, stopped together."""
    return serve(args.db, address=args.address, port=args.port, say=lambda text: print(text, flush=True))
