"""The router: every page renders on an empty and on a seeded store, and the sidebar names the store."""

from __future__ import annotations

import contextlib
import fcntl
import os

import pytest

from engine.paths import jobs_dir
from tests._markup import seen

PAGES = ("explore", "runs", "history", "launch")


@contextlib.contextmanager
def _no_worker(db):
    """Hold the store's job-worker lock, so the Launch page starts no worker.
    NOTE: a worker (and its warm parent, which imports torch) is no part of what these tests render."""
    jobs_dir(db).mkdir(parents=True, exist_ok=True)
    fd = os.open(jobs_dir(db) / "worker.lock", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_an_empty_store(store, open_page, page):
    with _no_worker(store):
        at = open_page(page)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.title, f"page {page} drew no title"


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_a_seeded_store(seeded, open_page, no_problems, page):
    with _no_worker(seeded[0]):
        no_problems(open_page(page))


def test_sidebar_shows_the_store_and_its_run_count(seeded, open_page):
    db, ids = seeded
    captions = " ".join(seen(c.value) for c in open_page("explore").sidebar.caption)
    assert str(db) in captions
    assert f"{len(ids)} runs" in captions


def test_explore_is_the_default_page(store, open_page):
    at = open_page("explore")
    assert at.title[0].value == "Explore"
