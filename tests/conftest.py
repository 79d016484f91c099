"""Shared fixtures: every test gets its own store and data folder, never the repo's data/."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYTHONPATH", str(ROOT))


def share_the_cores(environ: dict[str, str] = os.environ) -> int | None:
    """Under pytest-xdist, each of N workers gets 1/N of the cores as torch's intra-op threads (OMP_NUM_THREADS,
    which the runs these tests start inherit); returns that count, or None when there is nothing to share.

    NOTE: torch's default is one thread per core in every process: 15 workers on a 16-core GPU box ran 240
    threads, and OpenMP's spinning barriers made a 16-sample CNN step take seconds (over 60 s for 30 steps,
    against 0.2 s on one thread). A user's OMP_NUM_THREADS is left alone."""
    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers <= 1 or "OMP_NUM_THREADS" in environ:
        return None
    threads = max(1, len(os.sched_getaffinity(0)) // workers)
    environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:  # imported already (a plugin did): its default was taken before the variable was set
        sys.modules["torch"].set_num_threads(threads)
    return threads


share_the_cores()


@pytest.fixture(scope="session")
def shared_calibrations(tmp_path_factory) -> Path:
    """One calibrations folder for the whole test session, every xdist worker included (their temporary folders
    sit in the session's). Probes are keyed by pipeline, machine and thread settings, and the bound's passes by
    their run's or sweep's id, so a file one test wrote is valid in another, and a probe a pipeline's first run
    took saves the next run of the pipeline its own. Writers write a temporary file and rename it (atomic: a
    reader sees a whole file or none) under a name unique to the writer (probes) or to the run (passes)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "calibrations"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture
def store(tmp_path, monkeypatch, request) -> Path:
    """A fresh store path (RunLogs land beside it) set as LOADERLAB_DB for this test. Its calibrations folder is the
    session's (shared_calibrations), except for a test marked own_calibrations (one about the probe's cache
    itself: what is measured, cached or saved for this store), which gets a fresh one."""
    db = tmp_path / "store" / "loaderlab.duckdb"
    db.parent.mkdir()
    if request.node.get_closest_marker("own_calibrations") is None:
        (db.parent / "calibrations").symlink_to(request.getfixturevalue("shared_calibrations"), True)
    monkeypatch.setenv("LOADERLAB_DB", str(db))
    return db


@pytest.fixture(autouse=True)
def _data_dir(tmp_path_factory, monkeypatch) -> None:
    # generated datasets are shared across the session (the JPEG set takes seconds to make)
    monkeypatch.setenv("LOADERLAB_DATA", str(tmp_path_factory.getbasetemp() / "data"))


@pytest.fixture(scope="module")
def warm_runs():
    """For a module whose tests check what runs measure, not how a run's process starts: every launch() there that
    names no warm parent forks its run from this one (engine/run/warm.py), which imported torch once, instead of
    starting a cold interpreter that imports it again. A run the parent cannot take (one in flight already, a
    thread variable changed since it started) starts cold, as before. It is this process's shared parent, which
    sweeps and tunes borrow too (engine/run/warm.py), so one test worker imports torch in one parent, not one per
    module; the tests that count this process's children leave it out (tests/engine/_mode_runs.py).

        pytestmark = pytest.mark.usefixtures("warm_runs")
    """
    from engine.run import runner
    from engine.run.warm import borrowed

    with borrowed() as parent:  # started, or kept from an earlier module; given back at once for sweeps to borrow
        pass
    # NOTE: launch's keyword default, not the module attribute: test modules hold launch by name (from ... import)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(runner.launch.__kwdefaults__, "warm", parent)
        yield parent


# this process's own __main__ (pytest's, or an xdist worker's), as it started, before any AppTest ran
_MAIN = sys.modules.get("__main__")


@pytest.fixture(autouse=True)
def _keep_main_module():
    """This process's own sys.modules["__main__"] before and after each test. Streamlit's script runner (every
    AppTest) installs its own fake __main__, whose __file__ is the page it ran, and never puts this process's back; a
    spawn or forkserver DataLoader worker started later then ran that page as its __mp_main__ before unpickling its
    loader, and died importing torch ("cannot import name 'set_module' from partially initialized module
    'torch.utils'"). NOTE: the one this process started with, not the one a test starts with: a page's script thread
    that outlived its AppTest's timeout, or a fixture that ran a page, left the fake in place before a test began
    (ci14: test_bound's spawn and forkserver loader passes, on three xdist workers)."""
    if _MAIN is not None:
        sys.modules["__main__"] = _MAIN
    yield
    if _MAIN is not None:
        sys.modules["__main__"] = _MAIN


# `make test`'s first part (pytest.ini's markers): its mark expression, and what a file says to hold such a test
QUIET_PART = "quiet or serial"
_QUIET_MARKS = ("mark.quiet", "mark.serial")


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """The quiet part (`-m "quiet or serial"`) leaves unread the test files that mark no test quiet or serial: it
    selects a few dozen tests from a handful of files, and importing the others (Streamlit, Ray, hypothesis,
    Playwright) cost it 8 of its CPU-seconds. Marks are set with pytest.mark in the file itself (a `pytestmark` line included);
    a mark added any other way (a hook, a conftest) would need this to read it too. None: pytest decides."""
    if config.option.markexpr != QUIET_PART or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    text = collection_path.read_text(encoding="utf-8", errors="replace")
    return None if any(mark in text for mark in _QUIET_MARKS) else True


# Each test module's seconds in the parallel part (its tests' wall time summed, from a `--durations=0` run of
# `make test`; tests/_module_seconds.py makes it again): only the order the modules run in comes from it
MODULE_SECONDS = ROOT / "tests" / "module_seconds.json"
UNTIMED_S = 30.0  # a module not in it yet: a middling one


# the browser modules share one dashboard server, job worker and Chromium while they run in a row on one worker
# (tests/browser/conftest.py): xdist hands them out as one unit
BROWSER = "tests/browser/"


def work_unit(nodeid: str) -> str:
    """What xdist hands a worker whole: the test's file, or the browser modules together."""
    return BROWSER if nodeid.startswith(BROWSER) else nodeid.split("::")[0]


def module_order(items: list, seconds: dict[str, float]) -> None:
    """Sorts items longest work unit first (a module, or the browser modules together), by `seconds` (a test
    file's path -> its seconds); each module's tests stay together and in their own order (the sort is stable)."""
    units: dict[str, float] = {}
    for module in {item.nodeid.split("::")[0] for item in items}:
        unit = work_unit(module)
        units[unit] = units.get(unit, 0.0) + seconds.get(module, UNTIMED_S)
    items.sort(key=lambda item: -units[work_unit(item.nodeid)])


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope` with the browser modules as one unit (work_unit); any other mode is xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return Units(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist (make test's parallel part), the longest modules run first. `make test` hands out whole
    modules (`--dist loadscope`), so each module's fixtures (a warm parent, a dashboard server with its Chromium, a
    local Ray) are made once, not once on each worker; the longest first keeps the last module handed out short, so
    no worker ends alone. NOTE: with tests handed out one by one (xdist's default), each of three workers made every
    module's fixtures; and a 100 s test collected last (the storage tune, in tests/engine/test_tune.py) ran on one
    worker while the others sat idle (ci13's parallel part ended on 90 s of one busy core). Every worker sorts
    alike, so they collect the same order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    module_order(items, json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.is_file() else {})
