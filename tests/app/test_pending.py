"""The banner over every page when finished runs wait to be stored (a RunLog the store does not hold)."""

from __future__ import annotations

import shutil

import pytest

from ui.pending import message


def test_message_names_the_count_and_the_holder():
    assert message({"count": 0, "holder": None}) is None
    assert message({"count": 1, "holder": None}) == "1 run waiting to be stored (the next write stores them)."
    text = message({"count": 3, "holder": "pid 4242 (duckdb)"})
    assert text.startswith("3 runs waiting to be stored (the store is held by pid 4242 (duckdb)).")


@pytest.mark.parametrize("page", ["explore", "runs", "launch"])
def test_a_run_log_the_store_lacks_shows_a_banner_on_every_page(seeded, seeded_template, open_page, page):
    db, ids = seeded
    src = next(p for p in (seeded_template[0].parent / "runs").iterdir() if (p / "events.jsonl").is_file())
    copy = db.parent / "runs" / "waiting-run"
    shutil.copytree(src, copy)
    (copy / "ingested").unlink(missing_ok=True)  # the marker would say it is stored
    at = open_page(page)
    assert not at.exception
    banners = [w.value for w in at.warning if "waiting to be stored" in w.value]
    assert banners == ["1 run waiting to be stored (the next write stores them)."], [w.value for w in at.warning]


def test_no_banner_when_everything_is_stored(seeded, open_page):
    at = open_page("explore")
    assert not [w for w in at.warning if "waiting to be stored" in w.value]
