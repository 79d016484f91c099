"""Real-browser fixtures: the dashboard served by `streamlit run` on a free port with a temporary store,
its job worker, and Debian's chromium driven by Playwright. Screenshots of every open page land in
test-artifacts/ when a test fails.

One server, worker and chromium serve every browser module a test process runs in a row (issue 36): they start at
the first browser test and stop after the last one before a test from elsewhere (or the session's end). So the store
is shared: a test reads its own runs, jobs and sweeps by their ids, never the store's whole contents.

Without chromium or playwright the tests skip, unless LOADERLAB_REQUIRE_BROWSER=1 (`make test`), where
they fail and say how to install them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: run `make install` (it is pinned in requirements.txt)"
    if not shutil.which("chromium"):
        return "chromium is not installed: run `make browser-deps` (or `sudo apt-get install chromium`)"
    return None


# what the browser modules share in this test process: "chromium" -> (playwright, browser), "dashboard" -> (base URL,
# store, processes); filled at the first use, emptied by _stop_shared()
_SHARED: dict[str, tuple] = {}


def _stop_shared() -> None:
    """Stop the shared dashboard (server, then worker: both process groups) and chromium, if started."""
    if "dashboard" in _SHARED:
        _, db, procs = _SHARED.pop("dashboard")
        for proc in reversed(procs):
            _kill_group(proc)
        from engine import jobs

        jobs.stop_worker(db)  # a worker the launch page started, if ours had died
    if "chromium" in _SHARED:
        pw, browser = _SHARED.pop("chromium")
        browser.close()
        pw.stop()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last browser test in a row (its own fixtures torn down first): stop what the modules shared.
    NOTE: not a session-scoped fixture: that would outlive the browser tests on this xdist worker, and the engine's
    tests that count this process's children would count the server and its worker."""
    if nextitem is None or Path(str(nextitem.path)).parent != Path(__file__).parent:
        _stop_shared()


def pytest_sessionfinish(session, exitstatus):
    _stop_shared()  # interrupted, or a last test that never reached its teardown


@pytest.fixture(scope="module")
def chromium():
    """A headless Debian chromium under Playwright (no browser download), shared by the browser modules."""
    why = _missing()
    if why:
        if os.environ.get("LOADERLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser tests required but {why}", pytrace=False)
        pytest.skip(why)
    if "chromium" not in _SHARED:
        from playwright.sync_api import sync_playwright

        pw = sync_playwright().start()
        _SHARED["chromium"] = (pw, pw.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS))
    return _SHARED["chromium"][1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:  # the child keeps its own copy of the file descriptor
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )  # its own process group: teardown kills it whole


def _kill_group(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory, chromium):
    """(base URL, store path) of a running dashboard with its worker, shared by the browser modules (_stop_shared)."""
    if "dashboard" not in _SHARED:
        _SHARED["dashboard"] = _serve(tmp_path_factory.mktemp("dashboard"))
    base, db, _ = _SHARED["dashboard"]
    return base, db


def _serve(tmp: Path) -> tuple[str, Path, list[subprocess.Popen]]:
    """Start the worker and `streamlit run` on a store in tmp; return once the server answers."""
    db = tmp / "store" / "loaderlab.duckdb"
    db.parent.mkdir()
    env = {
        **os.environ,
        "LOADERLAB_DB": str(db),
        "LOADERLAB_DATA": str(tmp / "data"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    port = _free_port()
    procs = [
        _start([sys.executable, "-m", "engine", "worker", "--db", str(db)], env, tmp / "worker.log"),
        _start(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.headless",
                "true",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--browser.gatherUsageStats",
                "false",
                "--server.fileWatcherType",
                "none",
            ],
            env,
            tmp / "streamlit.log",
        ),
    ]
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read() == b"ok":
                return base, db, procs
        except OSError:
            pass
        if time.monotonic() > deadline or procs[1].poll() is not None:
            for proc in reversed(procs):
                _kill_group(proc)
            pytest.fail(f"streamlit did not come up; its log:\n{(tmp / 'streamlit.log').read_text()[-3000:]}")
        time.sleep(0.3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.failed_call = report.failed


@pytest.fixture
def new_page(chromium, request):
    """new_page() -> a Playwright page in a fresh browser context (no shared cookies or session)."""
    contexts = []

    def make():
        ctx = chromium.new_context(viewport={"width": 1400, "height": 1000})
        contexts.append(ctx)
        return ctx.new_page()

    yield make
    if getattr(request.node, "failed_call", False):
        ARTIFACTS.mkdir(exist_ok=True)
        for i, ctx in enumerate(contexts):
            for j, page in enumerate(ctx.pages):
                page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{i}-{j}.png"), full_page=True)
    for ctx in contexts:
        ctx.close()
