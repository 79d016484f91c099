"""Work the Launch page needs on its first visit, done in the background once the first page has rendered.

The form checks its config against the registry (engine.registry imports torch): seconds on a quiet machine, and
many more while the demo's runs hold the cores, all spent on the first visit to Launch. Started once per server
process, after app.py has run the page the user asked for, so it never delays that page.

    warm.start()
"""

from __future__ import annotations

import logging
import threading

from engine import api

__all__ = ["start"]

log = logging.getLogger(__name__)
_lock = threading.Lock()
_started = False


def start() -> None:
    """Check the default config once in a daemon thread (it imports the registry); later calls do nothing."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_check_default, name="loaderlab-warm", daemon=True).start()


def _check_default() -> None:
    try:
        api.check_host(api.RunConfig())
    except Exception:  # noqa: BLE001 - a warm-up only: the Launch page checks (and says) what is wrong itself
        log.debug("warm-up check failed", exc_info=True)
