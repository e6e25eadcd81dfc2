"""The query-vector cache: a repeated query is not embedded again, per embedder object."""

from __future__ import annotations

import functools
import gc
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from ledgermem import Memory, ProviderError
from ledgermem.retrieval.embedding import QUERIES, QueryCache, embed_query
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock


class Counting(HashEmbedder):
    """HashEmbedder counting the queries it embeds."""

    def __init__(self) -> None:
        super().__init__("32")
        self.queries: list[str] = []

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        if query:
            self.queries.extend(texts)
        return super()._embed(texts, query=query)


def test_a_repeated_search_embeds_its_query_once(tmp_path: Path, clock: FakeClock) -> None:
    embedder = Counting()
    with Memory.open(tmp_path / "m.db", embedder=embedder, clock=clock) as mem:
        alice = mem.for_user("alice")
        alice.remember("Alice drinks green tea every morning")
        mem.flush()
        first = alice.search("what tea does alice drink", touch=False)
        again = alice.search("what tea does alice drink", touch=False)
        alice.search("coffee", touch=False)
    assert embedder.queries == ["what tea does alice drink", "coffee"]
    assert [(h.id, h.score) for h in first] == [(h.id, h.score) for h in again]


def test_embedders_do_not_share_vectors() -> None:
    one, other = Counting(), Counting()
    embed_query(one, "tea")
    embed_query(other, "tea")
    embed_query(one, "tea")
    assert (one.queries, other.queries) == (["tea"], ["tea"])


def test_the_least_recent_query_is_dropped_first() -> None:
    cache = QueryCache(size=2)
    embedder = Counting()
    for text in ("a", "b", "a", "c", "a", "b"):
        cache.vector(embedder, text, functools.partial(embedder.embed_query, text))
    # a, b computed; a kept; c evicts b (a was used later); a kept; b computed again.
    assert embedder.queries == ["a", "b", "c", "b"]


def test_a_cached_vector_cannot_be_changed_by_a_caller() -> None:
    embedder = Counting()
    vector = embed_query(embedder, "tea")
    with pytest.raises(ValueError, match="read-only"):
        vector[0] = 5.0
    np.testing.assert_array_equal(embed_query(embedder, "tea"), embedder.embed_query("tea"))


def test_a_failed_embedding_is_not_cached() -> None:
    class Flaky(Counting):
        fail = True

        def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
            if self.fail:
                raise RuntimeError("model crashed")
            return super()._embed(texts, query=query)

    embedder = Flaky()
    with pytest.raises(ProviderError, match="model crashed"):
        embed_query(embedder, "tea")
    embedder.fail = False
    assert embed_query(embedder, "tea").shape == (32,)
    assert embedder.queries == ["tea"]


def test_an_embedder_that_cannot_be_weakly_referenced_is_not_cached() -> None:
    class Slotted:
        __slots__ = ("calls", "dimensions", "model_id")

        def __init__(self) -> None:
            self.model_id, self.dimensions, self.calls = "slotted", 2, 0

        def embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            return np.ones((len(texts), 2), dtype=np.float32)

        def embed_query(self, text: str) -> npt.NDArray[np.float32]:
            self.calls += 1
            return np.ones(2, dtype=np.float32)

    embedder = Slotted()
    embed_query(embedder, "tea")
    embed_query(embedder, "tea")
    assert embedder.calls == 2


def test_a_dropped_embedder_takes_its_entries_along() -> None:
    gc.collect()                      # embedders of earlier tests go first
    before = len(QUERIES._entries)
    embedder = Counting()
    embed_query(embedder, "tea")
    assert len(QUERIES._entries) == before + 1
    del embedder
    gc.collect()
    assert len(QUERIES._entries) == before
