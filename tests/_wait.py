"""Waiting on real processes in tests: poll a condition until it holds, or fail naming what never happened."""

from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["wait_for"]


def wait_for(predicate: Callable[[], Any], what: str = "condition", timeout_s: float = 180.0,
             poll_s: float = 0.2) -> Any:
    """predicate()'s first truthy value; AssertionError naming `what` after timeout_s. A short poll_s for
    conditions that a test must act on at once (a kill while a worker is mid-epoch)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
