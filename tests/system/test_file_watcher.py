"""The served dashboard puts no file watch on the checkout (issue 19, section 7): Streamlit's watcher put a recursive
inotify watch on app.py's folder, .venv and data/ included, and logged thousands of "Inotify queue overflowed".
.streamlit/config.toml turns it off; this reads that file as `streamlit run` does and looks at the watches held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Reads .streamlit/config.toml from the working directory as `streamlit run` does, builds the watcher a session
# gets for app.py, and prints the inodes of the directories that this process holds inotify watches on.
_WATCHES = """
import json, os, time
from streamlit import config
config.get_config_options(force_reparse=True)
from streamlit.runtime.pages_manager import PagesManager
from streamlit.watcher.local_sources_watcher import LocalSourcesWatcher
watcher = LocalSourcesWatcher(PagesManager(os.path.abspath("app.py")))
inodes, deadline = set(), time.monotonic() + 3
while time.monotonic() < deadline:
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            lines = open(f"/proc/self/fdinfo/{fd}").read().splitlines()
        except OSError:
            continue
        inodes |= {int(line.split("ino:")[1].split()[0], 16) for line in lines if line.startswith("inotify wd:")}
    time.sleep(0.2)
print(json.dumps({"watcher": config.get_option("server.fileWatcherType"), "inodes": sorted(inodes)}))
"""


def _watching(cwd: Path, home: Path) -> subprocess.Popen:
    """The probe started in `cwd`; _watched(probe) waits for what it saw."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHES], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _watched(probe: subprocess.Popen) -> dict:
    stdout, stderr = probe.communicate(timeout=120)
    assert probe.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="inotify watches are read from Linux's /proc")
def test_the_served_dashboard_watches_nothing_in_the_checkout(tmp_path):
    """Streamlit's watcher put a recursive inotify watch on app.py's folder, .venv and data/ included
    ("Inotify queue overflowed"). HOME is empty, so only the checkout's .streamlit/config.toml counts."""
    home = tmp_path / "home"
    home.mkdir()
    # the probe sees watches: an app with Streamlit's default watcher watches its folder and data/ below it
    bare = tmp_path / "bare"
    (bare / "data").mkdir(parents=True)
    (bare / "app.py").write_text("")
    # NOTE: both probes at once: each looks for 3 s, and reads only its own process's watches
    probes = _watching(bare, home), _watching(ROOT, home)
    try:
        control, result = map(_watched, probes)
    finally:
        for probe in probes:
            if probe.poll() is None:
                probe.kill()
                probe.wait()
    assert control["watcher"] == "auto" and (bare / "data").stat().st_ino in control["inodes"], control

    folders = [ROOT, *(ROOT / name for name in (".venv", "data", ".git") if (ROOT / name).is_dir())]
    assert not {p.stat().st_ino for p in folders} & set(result["inodes"]), result
