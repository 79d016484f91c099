"""Opening a dashboard page in Chromium the way the browser tests do: wait for the page's heading (and, on Launch,
its form, whose first check imports torch), then for the network to settle, and hold that nothing raised."""

from __future__ import annotations

import re


def slow_page(new_page):
    """A page whose waits allow for a loaded machine (the worker's runs share its cores)."""
    page = new_page()
    page.set_default_timeout(120_000)
    return page


def open_page(page, url: str, title: str, ready: str | re.Pattern | None = None) -> None:
    """Go to url and wait for the heading `title`, then for the text `ready` where given (its first match)."""
    page.goto(url)
    page.get_by_role("heading", name=title).first.wait_for(timeout=120_000)
    if title == "Launch":  # the form checks its config with the registry, which imports torch on a first visit
        page.get_by_role("button", name="Queue run").wait_for(timeout=120_000)
    page.wait_for_load_state("networkidle")
    if ready is not None:
        page.get_by_text(ready).first.wait_for(timeout=90_000)
    assert page.locator('[data-testid="stException"]').count() == 0, f"{url} raised an exception"
