"""Dashboard under load: N concurrent sessions on Explore and History against a big store.

Seeds the store with bench/dashboard.py's seed() (synthetic runs and epochs made in DuckDB), serves the
dashboard with `streamlit run app.py`, then drives N sessions at the same time, each loading Explore and
History in turns. Prints p50 and p95 per page view. Drivers:

  websocket (default)  each session speaks Streamlit's own protocol on /_stcore/stream, as the browser's
                       JavaScript does: a rerun_script message with the page and its query string, then every
                       ForwardMsg until script_finished. A view counts when its main element came (Explore's
                       plotly chart, History's dataframe) with no exception. This is all the server's work per
                       view, with none of a browser's rendering.
  browser              one Debian chromium (Playwright), one context per session; a view counts when the main
                       element is visible. On 2 cores, 20 rendering browsers beside the server mostly measure
                       chromium itself (load average above 30).
  apptest              AppTest sessions, one process each, each with its own cold cache: a worst case.

    .venv/bin/python bench/load.py                               # 20 websocket sessions × 3 rounds, 50,000 runs
    .venv/bin/python bench/load.py --driver browser --sessions 5
    .venv/bin/python bench/load.py --db /tmp/big.duckdb --keep    # reuse a seeded store next time

Target: p95 < 2 s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench.load")

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HISTORY_SQL = "SELECT loader, workers, count(*) AS runs, median(epoch_s) AS epoch_s FROM runs GROUP BY ALL ORDER BY 4"
# page -> (path with query, the element whose visibility means "the page is there")
PAGES = {
    "explore": ("/explore?x=workers&color=loader", '[data-testid="stPlotlyChart"]'),
    "history": ("/history?" + urllib.parse.urlencode({"sql": HISTORY_SQL}), '[data-testid="stDataFrame"]:visible'),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`streamlit run app.py` on a free port for the store `db`; close() kills its process group."""

    def __init__(self, db: Path, log_path: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "LOADERLAB_DB": str(db), "PYTHONPATH": str(ROOT)}
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "streamlit",
                    "run",
                    "app.py",
                    "--server.headless",
                    "true",
                    "--server.port",
                    str(self.port),
                    "--server.address",
                    "127.0.0.1",
                    "--browser.gatherUsageStats",
                    "false",
                    "--server.fileWatcherType",
                    "none",
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        deadline = time.monotonic() + 90
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2).read() == b"ok":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"streamlit did not start; see {log_path}")
            time.sleep(0.3)

    def close(self) -> None:
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(wait)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _session(
    browser,
    base: str,
    i: int,
    rounds: int,
    start: asyncio.Event,
    times: dict[str, list[float]],
    failures: list[str],
    timeout_s: float,
) -> None:
    """One user: a fresh browser context; Explore and History in turns, `rounds` times each."""
    ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await ctx.new_page()
    order = list(PAGES) if i % 2 == 0 else list(reversed(PAGES))  # half the users start on each page
    await start.wait()
    try:
        for _ in range(rounds):
            for name in order:
                path, selector = PAGES[name]
                t0 = time.perf_counter()
                try:
                    await page.goto(base + path, timeout=timeout_s * 1000)
                    await page.locator(selector).first.wait_for(state="visible", timeout=timeout_s * 1000)
                    times[name].append(time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001 - a page that never showed is counted, not fatal
                    failures.append(f"session {i} {name}: {type(e).__name__}: {str(e).splitlines()[0]}")
    finally:
        await ctx.close()


async def drive(base: str, sessions: int, rounds: int, timeout_s: float) -> tuple[dict[str, list[float]], list[str]]:
    from playwright.async_api import async_playwright

    times: dict[str, list[float]] = {name: [] for name in PAGES}
    failures: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        try:
            warm = await browser.new_page()  # the server's first render imports everything: not a user's wait
            for path, selector in PAGES.values():
                await warm.goto(base + path)
                await warm.locator(selector).first.wait_for(state="visible", timeout=120_000)
            await warm.close()
            start = asyncio.Event()
            tasks = [
                asyncio.create_task(_session(browser, base, i, rounds, start, times, failures, timeout_s))
                for i in range(sessions)
            ]
            await asyncio.sleep(0.5)
            start.set()  # every session starts at once
            await asyncio.gather(*tasks)
        finally:
            await browser.close()
    return times, failures


MAIN_ELEMENT = {"explore": "plotly_chart", "history": "dataframe"}  # what the page must have sent to count


async def _ws_view(ws, name: str, timeout_s: float) -> None:
    """One page view over Streamlit's own protocol, as the browser does it: a rerun_script BackMsg with the page
    and its query string, then ForwardMsgs until script_finished. Raises if the page's main element never came."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    page, _, query = PAGES[name][0].lstrip("/").partition("?")
    msg = BackMsg()
    msg.rerun_script.query_string = query
    msg.rerun_script.page_name = page
    await ws.send(msg.SerializeToString())
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        fm = ForwardMsg()
        fm.ParseFromString(await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic())))
        kind = fm.WhichOneof("type")
        if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
            seen.add(fm.delta.new_element.WhichOneof("type"))
        elif kind == "script_finished" and fm.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            break
    if "exception" in seen or MAIN_ELEMENT[name] not in seen:
        raise RuntimeError(f"the page finished without its {MAIN_ELEMENT[name]} (elements: {sorted(seen)})")


async def _ws_session(
    base: str,
    i: int,
    rounds: int,
    start: asyncio.Event,
    times: dict[str, list[float]],
    failures: list[str],
    timeout_s: float,
) -> None:
    """One user as a websocket session: Explore and History in turns, `rounds` times each."""
    import websockets

    order = list(PAGES) if i % 2 == 0 else list(reversed(PAGES))
    async with websockets.connect(
        base.replace("http", "ws", 1) + "/_stcore/stream",
        subprotocols=["streamlit"],
        max_size=None,
        open_timeout=timeout_s,
    ) as ws:
        await start.wait()
        for _ in range(rounds):
            for name in order:
                t0 = time.perf_counter()
                try:
                    await _ws_view(ws, name, timeout_s)
                    times[name].append(time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001 - a page that never showed is counted, not fatal
                    failures.append(f"session {i} {name}: {type(e).__name__}: {str(e)[:200]}")


async def drive_ws(base: str, sessions: int, rounds: int, timeout_s: float) -> tuple[dict[str, list[float]], list[str]]:
    """N sessions over Streamlit's websocket protocol against the running server: everything a browser makes the
    server do (one script run per view, every delta sent), without N browsers' rendering on the same cores."""
    times: dict[str, list[float]] = {name: [] for name in PAGES}
    failures: list[str] = []
    warm = asyncio.Event()
    warm.set()
    await _ws_session(base, -1, 1, warm, {name: [] for name in PAGES}, failures, 120.0)  # first imports: not a wait
    if failures:
        return times, failures
    start = asyncio.Event()
    tasks = [
        asyncio.create_task(_ws_session(base, i, rounds, start, times, failures, timeout_s)) for i in range(sessions)
    ]
    await asyncio.sleep(0.5)
    start.set()  # every session starts at once
    await asyncio.gather(*tasks)
    return times, failures


def _apptest_user(i: int, rounds: int, timeout_s: float, barrier, out) -> None:
    """One session in its own process: open app.py, wait for the others, then load the pages in turns."""
    from streamlit.logger import set_log_level
    from streamlit.testing.v1 import AppTest

    set_log_level("error")
    times: dict[str, list[float]] = {name: [] for name in PAGES}
    failures: list[str] = []
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout_s).run()  # the session opens
    order = list(PAGES) if i % 2 == 0 else list(reversed(PAGES))
    barrier.wait(timeout=600)
    for _ in range(rounds):
        for name in order:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(PAGES[name][0]).query)
            at.switch_page(f"pages/{name}.py")
            at.query_params.clear()
            at.query_params.update({k: v[0] for k, v in query.items()})
            t0 = time.perf_counter()
            try:
                at.run()
                problems = [str(e.value) for e in (*at.exception, *at.error)]
                shown = at.get("plotly_chart") if name == "explore" else at.dataframe
                if problems or not shown:
                    raise RuntimeError(problems or "main element missing")
                times[name].append(time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001 - counted, not fatal
                failures.append(f"session {i} {name}: {type(e).__name__}: {str(e)[:200]}")
    out.put((times, failures))


def drive_apptest(sessions: int, rounds: int, timeout_s: float) -> tuple[dict[str, list[float]], list[str]]:
    """The same sessions as Streamlit AppTest sessions, one process each: the server-side time of each page
    (script run, store reads) without a browser. NOTE: processes, not threads: AppTest sessions sharing a
    process lost elements and deadlocked in testing. Each process has its own cache, so this is a worst case."""
    import multiprocessing as mp

    import streamlit.testing.v1  # noqa: F401 - imported once here, inherited by the forked sessions

    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(sessions), ctx.Queue()
    procs = [ctx.Process(target=_apptest_user, args=(i, rounds, timeout_s, barrier, out)) for i in range(sessions)]
    for p in procs:
        p.start()
    times: dict[str, list[float]] = {name: [] for name in PAGES}
    failures: list[str] = []
    for _ in procs:
        got, failed = out.get(timeout=timeout_s * rounds * len(PAGES) + 600)
        failures += failed
        for name, values in got.items():
            times[name] += values
    for p in procs:
        p.join()
    return times, failures


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20, help="concurrent browser sessions (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="loads of each page per session (default 3)")
    p.add_argument("--runs", type=int, default=50_000, help="synthetic runs in the store (default 50,000)")
    p.add_argument("--epochs", type=int, default=20, help="epoch rows per run (default 20)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a page counts as failed")
    p.add_argument(
        "--driver",
        choices=("websocket", "browser", "apptest"),
        default="websocket",
        help="websocket: sessions speaking Streamlit's own protocol to `streamlit run` (the server's "
        "whole work per view, no rendering); browser: chromium contexts in one browser (on a small "
        "machine this mostly measures chromium); apptest: AppTest sessions, one process each, "
        "cold caches (a worst case)",
    )
    p.add_argument("--db", type=Path, default=None, help="store to seed (default: a temporary file)")
    p.add_argument("--keep", action="store_true", help="reuse --db if it already has runs, and keep it afterwards")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.driver == "browser" and not shutil.which("chromium"):
        log.error("chromium is missing: run `make browser-deps`")
        return 2
    from bench.dashboard import seed
    from engine import api

    tmp = tempfile.TemporaryDirectory(prefix="bench-load-")
    db = (args.db or Path(tmp.name) / "loaderlab.duckdb").resolve()
    os.environ["LOADERLAB_DB"] = str(db)
    if not (args.keep and db.exists() and api.count_runs()):
        seed(db, args.runs, args.epochs)
    n_runs = sum(api.count_runs().values())
    try:
        t0 = time.perf_counter()
        if args.driver == "apptest":
            times, failures = drive_apptest(args.sessions, args.rounds, args.timeout)
        else:
            with Server(db, Path(tmp.name) / "streamlit.log") as server:
                t0 = time.perf_counter()
                driver = drive_ws if args.driver == "websocket" else drive
                times, failures = asyncio.run(driver(server.url, args.sessions, args.rounds, args.timeout))
        wall = time.perf_counter() - t0
    finally:
        if not args.keep:
            tmp.cleanup()
    who = {
        "browser": "chromium sessions",
        "websocket": "websocket sessions (Streamlit's protocol, no rendering)",
        "apptest": "AppTest sessions (a process each; server side only)",
    }[args.driver]
    print(
        f"\nDashboard under load: {args.sessions} concurrent {who} × {args.rounds} rounds of "
        f"Explore + History; {n_runs:,} runs, {n_runs * args.epochs:,} epoch rows; {wall:.1f} s in all"
    )
    shared = " · server and clients on the same machine" if args.driver != "apptest" else ""
    print(
        f"machine: {platform.node()} · {platform.processor() or platform.machine()} · {os.cpu_count()} cores · "
        f"Python {platform.python_version()}{shared}"
    )
    print(f"{'page':<10}{'loads':>6}{'p50':>9}{'p95':>9}{'max':>9}   p95 < 2 s")
    for name, values in [*times.items(), ("all", [v for vs in times.values() for v in vs])]:
        if values:
            p95 = _pct(values, 95)
            print(
                f"{name:<10}{len(values):>6}{_pct(values, 50):>8.2f}s{p95:>8.2f}s{max(values):>8.2f}s   "
                f"{'yes' if p95 < 2.0 else 'NO'}"
            )
    for f in failures[:10]:
        print("failed:", f)
    if failures:
        print(f"{len(failures)} page load(s) did not show their main element within {args.timeout:g} s")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
