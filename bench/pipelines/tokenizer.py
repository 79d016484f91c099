"""A text classification pipeline with a pure-Python tokenizer: lower-case, split, hash words and bigrams into ids.

Every item is a synthetic sentence drawn from a Zipf-like vocabulary by a generator seeded with the item's index;
the label is the topic its words were drawn around. The tokenising holds the GIL the whole time.
"""

from __future__ import annotations

import random
import zlib

import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = ["Texts", "build", "model"]

_WORDS = [f"w{i:04d}" for i in range(5000)]
_BUCKETS = 1 << 16


def _ids(text: str, length: int) -> list[int]:
    words = [w.strip(".,;:!?").lower() for w in text.split()]
    grams = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
    ids = [zlib.crc32(g.encode()) % (_BUCKETS - 1) + 1 for g in grams][:length]
    return ids + [0] * (length - len(ids))


class Texts(Dataset):
    """(LongTensor [length] of hashed word and bigram ids, topic label)."""

    def __init__(self, n: int, num_classes: int, length: int = 256, words: int = 160, seed: int = 0):
        self.n, self.num_classes, self.length, self.words, self.seed = n, num_classes, length, words, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        rng = random.Random(self.seed * 1_000_003 + index)
        topic = rng.randrange(self.num_classes)
        text = " ".join(
            _WORDS[(topic * 37 + int(rng.paretovariate(1.2))) % len(_WORDS)] + rng.choice(",. ")
            for _ in range(self.words)
        )
        return torch.tensor(_ids(text, self.length)), topic


def build(*, n_samples: int = 2048, num_classes: int = 10, seed: int = 0, **_: object) -> Texts:
    return Texts(n_samples, num_classes, seed=seed)


def model(*, num_classes: int, width: int = 64, **_: object) -> nn.Module:
    """Mean of the ids' embeddings, then a two-layer MLP."""
    return nn.Sequential(
        nn.EmbeddingBag(_BUCKETS, width, mode="mean"), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, num_classes)
    )
