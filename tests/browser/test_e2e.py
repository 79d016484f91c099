"""End to end in a real chromium: open every page, queue a tiny run from the Launch form, wait for the
worker to finish it, copy Explore's share link and open it in a new browser context: same runs charted.

    make test            # runs it (it is marked slow); screenshots of a failure go to test-artifacts/
"""

from __future__ import annotations

import re
import time

import pytest

from tests._wait import wait_for

pytestmark = pytest.mark.slow

# a tiny CPU run with no lower bound (nothing here reads one): its passes and the demo pipeline's JPEGs cost seconds
TINY = "workload=tensor&model=mlp&n_samples=64&image_size=8&width=8&batch_size=8&epochs=2&bound=false&device=cpu"
TITLES = {"launch": "Launch", "explore": "Explore", "runs": "Runs", "history": "History"}
# Every run id the Plotly charts on the page carry in customdata (ui/explore: a group's ids, comma-separated).
_CHART_IDS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .flatMap(g => (g.data || []).flatMap(t => Array.from(t.customdata || [])))
    .flatMap(row => String(Array.isArray(row) ? row[0] : row).split(',')).filter(s => s.length > 0)"""


def _open(page, url: str, title: str) -> None:
    page.goto(url)
    page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)
    page.wait_for_load_state("networkidle")
    assert page.locator('[data-testid="stException"]').count() == 0, f"{url} raised an exception"


def _chart_ids(page) -> set[str]:
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    deadline = time.monotonic() + 30
    while not (ids := set(page.evaluate(_CHART_IDS))) and time.monotonic() < deadline:
        time.sleep(0.3)  # plotly draws after the element appears
    return ids


def _wait_for_job(db, job_id: str, timeout_s: float = 240.0) -> dict:
    """The job's row once it has ended (the store is shared with the other browser modules: found by its id)."""
    from engine import api

    def ended() -> dict | None:
        jobs = api.list_jobs(db=db, limit=1000)
        row = jobs[jobs["job_id"] == job_id]
        return row.iloc[0].to_dict() if len(row) and row.iloc[0]["status"] in ("done", "failed", "cancelled") else None

    return wait_for(ended, f"job {job_id} to end", timeout_s)


def test_launch_a_run_then_share_the_explore_view(dashboard, new_page):
    base, db = dashboard
    page = new_page()
    # 1. every page opens without an exception
    for path, title in TITLES.items():
        _open(page, f"{base}/{path}", title)
    # .streamlit/config.toml (toolbarMode = "viewer"), which `make run` serves with: no Deploy button
    assert page.get_by_text("Deploy", exact=True).count() == 0

    # 2. queue a tiny run from the form (values come in through the URL, as a shared launch link would)
    _open(page, f"{base}/launch?{TINY}", "Launch")
    page.get_by_role("button", name="Queue run").click()
    # NOTE: the success box, not any text: a job card or the queue's table could repeat the words
    said = page.get_by_test_id("stAlertContentSuccess").filter(has_text=re.compile(r"Queued 1 job")).first
    said.wait_for(timeout=30_000)
    job = _wait_for_job(db, said.inner_text().replace("\u2060", "").rsplit(" ", 1)[-1].strip())
    assert job["status"] == "done", job
    run_id = job["run_id"]

    # 3. Explore charts the run; "Copy share link" shows a link
    # its pipeline named: Explore opens on the newest with two settings or more, and the store is shared
    _open(page, f"{base}/explore?workload=tensor&model=mlp&x=loader&color=workers", "Explore")
    assert run_id in _chart_ids(page)
    page.get_by_role("button", name="Copy share link").click()
    code = page.locator('[data-testid="stCode"]').filter(has_text="view=").first  # the link, not a config's code
    code.wait_for(timeout=30_000)
    link = re.search(r"\S*/explore\?view=[A-Za-z0-9_-]+", code.inner_text()).group(0)
    before = _chart_ids(page)

    # 4. the link in a new context (no shared session) shows the same runs with the same settings
    other = new_page()
    _open(other, link if link.startswith("http") else base + link, "Explore")
    assert _chart_ids(other) == before
    other.wait_for_url(re.compile(r"color=workers"), timeout=30_000)  # the view's state is in the URL again

    # 5. the run opens from its link
    _open(other, f"{base}/runs?run={run_id}", "Runs")
    other.get_by_role("heading", name=f"Run {run_id}").wait_for(timeout=30_000)
