"""FanOut: one loader's batches delivered to several training threads, each through its own bounded queue.

dual-threads with dual_data = shared uses it: every thread sees every batch, and a thread can run at
most `depth` batches ahead of the slowest one. A loader error reaches every consumer with its original
message; `stop` (set when any thread fails) ends the feeder and every consumer promptly.

    with FanOut(loader, n=2, epochs=cfg.epochs, depth=2, stop=stop) as fan:
        for x, y in fan.epoch(consumer=0, e=0): ...
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterator

from torch._utils import ExceptionWrapper

__all__ = ["FanOut", "Stopped", "until_stopped"]

_EPOCH_END = object()


class Stopped(Exception):
    """Raised in a consumer when another thread failed; the run reports that thread's error instead."""


def until_stopped(batches: Any, stop: threading.Event) -> Iterator[Any]:
    """Yield from `batches` until `stop` is set (checked between batches)."""
    for batch in batches:
        if stop.is_set():
            raise Stopped
        yield batch


class FanOut:
    def __init__(self, loader: Any, n: int, epochs: int, depth: int, stop: threading.Event):
        self.loader, self.epochs, self.stop = loader, epochs, stop
        self.queues: list[queue.Queue] = [queue.Queue(maxsize=depth) for _ in range(n)]
        self._thread = threading.Thread(target=self._feed, name="loaderlab-fanout", daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        try:
            for e in range(self.epochs):
                for batch in self.loader.epoch(e):
                    if not self._put_all((e, batch)):
                        return
                if not self._put_all((e, _EPOCH_END)):
                    return
        except Exception:  # noqa: BLE001 - carried to every consumer and re-raised there
            self._put_all((None, ExceptionWrapper(where="in the shared loader feeding both models")))

    def _put_all(self, item: Any) -> bool:
        for q in self.queues:
            while True:
                if self.stop.is_set():
                    return False
                try:
                    q.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
        return True

    def epoch(self, consumer: int, e: int) -> Iterator[Any]:
        """Consumer `consumer`'s batches of epoch e (epochs must be read in order, as the feeder sends them)."""
        q = self.queues[consumer]
        while True:
            try:
                epoch, item = q.get(timeout=0.1)
            except queue.Empty:
                if self.stop.is_set():
                    raise Stopped from None
                continue
            if isinstance(item, ExceptionWrapper):
                item.reraise()
            assert epoch == e, f"consumer {consumer} read epoch {epoch} while expecting {e}"
            if item is _EPOCH_END:
                return
            yield item

    def close(self) -> None:
        self.stop.set()
        self._thread.join()

    def __enter__(self) -> "FanOut":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
