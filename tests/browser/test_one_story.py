"""Issue 39 in a real chromium: Explore's headline and the Advisor name the same setting from the same runs, one
machine is one host, and no config name shows a hash.

The store holds a pyloop + mlp sweep of an older date (so it is no other test's default view): rows copied from two
real runs through the runner (by the dashboard's worker), one at torch's default intra-op threads and one at 1
thread (their host facts and fingerprints as the runner wrote them), with other ids, settings and epoch times.
Processes at 1 intra-op thread win; processes at torch's default threads lose to threads, as on the issue's 2-core
machine.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from tests.browser._pages import open_page
from tests.browser._runs import done_runs

pytestmark = pytest.mark.slow

# name -> (loader, workers, threads, median epoch s); 7 runs each: every speedup has its 95 % interval
SWEEP = {
    "sync": ("sync", 0, 0, 2.0),
    "threads": ("threads", 2, 0, 1.6),
    "processes": ("processes", 2, 0, 3.85),
    "processes1": ("processes", 2, 1, 0.9),
}
RUNS = 7
HASH = re.compile(r"\b[0-9a-f]{12}\b")


def _seed(db) -> None:
    from engine import api
    from engine.store import connect

    configs = [
        {
            "workload": "tensor",
            "n_samples": 64,
            "image_size": 8,
            "width": 8,
            "epochs": 2,
            "batch_size": 32,
            "loader": "sync",
            "device": "cpu",
            "threads": threads,
            "bound": False,
            "tag": "one-story",
        }
        for threads in (0, 1)
    ]
    real = dict(zip((0, 1), done_runs(db, *configs)))  # intra-op threads -> run id, each run done
    then = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(days=2)
    with connect(db, read_only=False) as conn:
        for name, (loader, workers, threads, median) in SWEEP.items():
            for i in range(RUNS):
                conn.execute(
                    """INSERT INTO runs SELECT * REPLACE (? AS run_id, 'pyloop' AS workload, ? AS loader,
                                ? AS workers, ? AS epoch_s, ? AS created_at, false AS deleted) FROM runs
                                WHERE run_id = ?""",
                    [
                        f"story-{name}-{i}",
                        loader,
                        workers,
                        median * (1 + 0.01 * (i - RUNS // 2)),
                        then + dt.timedelta(seconds=i),
                        real[threads],
                    ],
                )
        conn.execute("UPDATE runs SET deleted = true WHERE run_id IN (?, ?)", list(real.values()))
    api.bump_data_version(db=db)


@pytest.fixture(scope="module")
def story(dashboard):
    base, db = dashboard
    _seed(db)
    return base, db


def _advisor(page):
    advisor = page.locator('[data-testid="stExpander"]').filter(has_text="Advisor: what is fastest here").first
    advisor.get_by_text(re.compile("done runs")).first.wait_for(timeout=90_000)
    return advisor


def test_the_headline_and_the_advisor_name_the_same_setting_from_the_same_runs(story, new_page):
    base, _ = story
    page = new_page()
    open_page(page, base + "/explore?workload=pyloop&model=mlp", "Explore", re.compile(r"Fastest for pyloop \+ mlp"))
    headline = page.locator(".st-key-explore_fastest_0").inner_text().replace("\u2060", "")
    assert headline.count("processes, workers=2, threads=1 is the fastest") == 1, headline
    said = _advisor(page).inner_text().replace("\u2060", "")
    assert f"pyloop + mlp on any host: {len(SWEEP) * RUNS} done runs, {len(SWEEP)} configs" in said, said
    assert re.search(r"best: processes, 2 workers, depth \d+, batch 32, 1 intra-op thread: epoch 0\.9", said), said
    # processes at torch's default threads is the slowest here: neither page calls processes as such the answer
    table = page.locator('[data-testid="stTable"]').first.inner_text()
    assert "speedup over sync, workers=0, threads=auto" in table  # sync, not the slowest outlier, is the reference
    body = table[table.index("\ncall") :]  # after the header, which names the reference too
    order = [
        body.index(c)
        for c in (
            "processes, workers=2, threads=1",
            "threads, workers=2, threads=auto",
            "sync, workers=0, threads=auto",
            "processes, workers=2, threads=auto",
        )
    ]
    assert order == sorted(order), body


def test_one_machine_is_one_host_and_no_config_name_shows_a_hash(story, new_page):
    base, _ = story
    page = new_page()
    open_page(page, base + "/explore?workload=pyloop&model=mlp", "Explore", re.compile(r"Fastest for pyloop \+ mlp"))
    words = " ".join(
        [
            page.locator(".st-key-explore_fastest_0").inner_text(),
            page.locator('[data-testid="stTable"]').first.inner_text(),
            *_advisor(page).locator('[data-testid="stMarkdown"]').all_inner_texts(),
        ]
    )
    assert not HASH.search(words), HASH.search(words)
    assert "host_fingerprint" not in words and "threads=1" in words
    body = page.locator("body").inner_text()
    assert "several hosts" not in body and "other thread settings" not in body
