"""The banner over every page when finished runs wait to be stored (a RunLog the store does not hold)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import api
from engine.runlog import claim
from tests._markup import seen
from ui import pending
from ui.pending import message

# A program outside LoaderLab holding the store read-only, as a notebook's duckdb.connect(..., read_only=True) does
HOLD = (
    "import sys, time, duckdb; c = duckdb.connect(sys.argv[1], read_only=True); print('holding', flush=True); "
    "time.sleep(120)"
)


def test_message_names_the_count_and_the_holder():
    assert message({"count": 0, "holder": None}) is None
    assert message({"count": 1, "holder": None}) == "1 run waiting to be stored (the next write stores them)."
    text = message({"count": 3, "holder": "pid 4242 (duckdb)"})
    assert text.startswith("3 runs waiting to be stored (the store is held by pid 4242 (duckdb)).")


def _waiting_run(seeded, seeded_template) -> Path:
    db, _ = seeded
    src = next(p for p in (seeded_template[0].parent / "runs").iterdir() if (p / "events.jsonl").is_file())
    copy = db.parent / "runs" / "waiting-run"
    shutil.copytree(src, copy)
    (copy / "ingested").unlink(missing_ok=True)  # the marker would say it is stored
    claim(copy, db)  # a RunLog of this store (the copy named the template's)
    return copy


@pytest.mark.parametrize("page", ["explore", "runs", "launch"])
def test_while_a_program_holds_the_store_every_page_says_runs_wait_and_by_whom(
    seeded, seeded_template, open_page, page
):
    db, _ = seeded
    _waiting_run(seeded, seeded_template)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        at = open_page(page)
        assert not at.exception
        banners = [seen(w.value) for w in at.warning if "waiting to be stored" in seen(w.value)]
        held = f"1 run waiting to be stored (the store is held by pid {holder.pid}"
        assert banners and banners[0].startswith(held), [seen(w.value) for w in at.warning]
    finally:
        holder.kill()
        holder.wait()


def test_once_the_holder_is_gone_the_dashboard_stores_the_waiting_runs(seeded, seeded_template, open_page):
    db, _ = seeded
    _waiting_run(seeded, seeded_template)
    assert api.pending_summary(db)["count"] == 1
    at = open_page("explore")
    assert not at.exception and not [w for w in at.warning if "waiting to be stored" in w.value]
    assert api.pending_summary(db) == {"count": 0, "holder": None}


def test_no_banner_when_everything_is_stored(seeded, open_page):
    at = open_page("explore")
    assert not [w for w in at.warning if "waiting to be stored" in w.value]


def test_the_dashboard_stores_only_its_own_stores_runlogs(seeded, seeded_template, open_page):
    """A RunLog of another store in the same folder (they share runs/) is neither counted by the banner nor
    stored by a page view: it is the other store's."""
    db, _ = seeded
    run_dir = _waiting_run(seeded, seeded_template)
    claim(run_dir, db.with_name("other.duckdb"))
    assert api.pending_summary(db)["count"] == 0
    at = open_page("explore")
    assert not at.exception and not [w for w in at.warning if "waiting to be stored" in w.value]
    assert not (run_dir / "ingested").exists()  # never ingested: each ingest leaves this marker
    claim(run_dir, db)  # the same RunLog named for this store: the next look stores it (the test can fail)
    pending._summary.clear()  # the banner's count is cached for 5 s
    open_page("explore")
    assert (run_dir / "ingested").exists()
