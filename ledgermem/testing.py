"""Test helpers shipped for users' tests too: a deterministic offline embedder.

``HashEmbedder`` maps words (and their 4-character prefixes) to vector slots by
hashing: texts sharing words are close, it needs no model, and it is the same on
every machine. It is no substitute for a real model's semantics.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .providers.embedders import BaseEmbedder
from .retrieval.keyword import query_terms

__all__ = ["HashEmbedder"]


class HashEmbedder(BaseEmbedder):
    """Feature-hashing embedder: deterministic, fast, offline."""

    def __init__(self, model: str = "64", *, dimensions: int | None = None) -> None:
        self.dimensions = dimensions or int(model)
        self.model_id = f"hash:{self.dimensions}"
        self.calls = 0

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        self.calls += 1
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in query_terms(text, max_terms=512):
                for feature in (word, word[:4]):
                    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                    slot = int.from_bytes(digest[:4], "little") % self.dimensions
                    sign = 1.0 if digest[4] & 1 else -1.0
                    out[row, slot] += sign
        return out
