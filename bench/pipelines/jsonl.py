"""Session logs as JSON lines: each item is a record of nested fields (a user, a session's events with their
timestamps and kinds, free-text tags), written as text, parsed with the json module and folded in Python into a
fixed-length vector (counts per event kind, gaps between events, hashed tags); an MLP predicts the session's outcome.
The work is the json module's C parser and Python's dicts: most of it holds the GIL.

Added at 9e2d642 as a pipeline the prediction model had never seen (bench/predict.py, kind `unseen`).
"""

from __future__ import annotations

import json
import math
import random
import zlib

import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = ["Sessions", "build", "model"]

_KINDS = ("view", "click", "scroll", "search", "add_to_cart", "remove", "checkout", "share", "login", "logout")
_WORDS = ("blue", "sale", "new", "gift", "kids", "sport", "home", "garden", "tech", "book", "shoes", "winter")
_TAGS = 32  # hashed tag buckets


class Sessions(Dataset):
    """(float32 [len(_KINDS) * 2 + 4 + _TAGS] features, label) from one session's JSON record."""

    def __init__(self, n: int, num_classes: int, events: int = 60, seed: int = 0):
        self.n, self.num_classes, self.events, self.seed = n, num_classes, events, seed

    def __len__(self) -> int:
        return self.n

    def _line(self, index: int) -> str:
        """The record as it would sit in a .jsonl file."""
        rng = random.Random(self.seed * 1_000_003 + index)
        t = 1_700_000_000.0 + rng.random() * 1e6
        events = []
        for _ in range(rng.randint(self.events // 2, self.events)):
            t += rng.expovariate(1 / 20.0)
            events.append(
                {
                    "ts": round(t, 3),
                    "kind": rng.choice(_KINDS),
                    "page": f"/p/{rng.randrange(5000)}",
                    "meta": {"tags": [rng.choice(_WORDS) for _ in range(rng.randint(0, 4))], "ms": rng.randrange(900)},
                }
            )
        return json.dumps(
            {"user": f"u{rng.randrange(10**6)}", "device": rng.choice(("ios", "android", "web")), "events": events}
        )

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        record = json.loads(self._line(index))
        k = len(_KINDS)
        counts, dwell = [0.0] * k, [0.0] * k
        tags = [0.0] * _TAGS
        gaps = []
        last = None
        for e in record["events"]:
            i = _KINDS.index(e["kind"])
            counts[i] += 1
            dwell[i] += e["meta"]["ms"] / 1000
            for tag in e["meta"]["tags"]:
                tags[zlib.crc32(tag.encode()) % _TAGS] += 1
            if last is not None:
                gaps.append(e["ts"] - last)
            last = e["ts"]
        n = max(1, len(record["events"]))
        mean_gap = sum(gaps) / max(1, len(gaps))
        spread = math.sqrt(sum((g - mean_gap) ** 2 for g in gaps) / max(1, len(gaps)))
        head = [c / n for c in counts] + [d / n for d in dwell]
        tail = [math.log1p(mean_gap), math.log1p(spread), math.log1p(n), float(record["device"] == "web")]
        label = int(counts[_KINDS.index("checkout")] > counts[_KINDS.index("remove")]) % self.num_classes
        return torch.tensor(head + tail + [math.log1p(x) for x in tags]), label


def build(*, n_samples: int = 2048, num_classes: int = 2, seed: int = 0, **_: object) -> Sessions:
    return Sessions(n_samples, num_classes, seed=seed)


def model(*, in_shape: tuple[int, ...], num_classes: int, width: int = 128, **_: object) -> nn.Module:
    return nn.Sequential(nn.Linear(in_shape[-1], width), nn.ReLU(), nn.Linear(width, num_classes))
