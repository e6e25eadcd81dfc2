"""On PostgreSQL a search's vector search, and the reading of its hits' rows, run in
the thread that embedded its query, on a pooled connection of their own, while the
caller's keyword searches run (``Store.reads_beside``, ``Searcher._vector_beside``).
Pinned by events and thread ids, never by timing: the caller's keyword search waits
(up to a bound that only a broken build reaches) for the vector search to start."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy.typing as npt
import pytest

from ledgermem import Hit, Memory, ProviderError
from ledgermem.retrieval.embedding import QUERIES
from ledgermem.store.postgres import PostgresStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock

BOUND_S = 30.0
"""How long the caller's keyword search waits for the vector search to start: reached
only when the two do not overlap (the test then fails)."""


class WatchedEmbedder(HashEmbedder):
    """The hashing embedder, noting which thread embeds each query. While ``gated``, a
    query's embedding waits (up to ``BOUND_S``) for ``gate``: a test opens it from the
    caller's first keyword search, so the vector is not there before the search asks
    for it, as with a real model."""

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.query_threads: list[int] = []
        self.fail = False
        self.gated = False
        self.gate = threading.Event()

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        if query:
            self.query_threads.append(threading.get_ident())
            if self.gated:
                assert self.gate.wait(BOUND_S)
            if self.fail:
                raise RuntimeError("the model fell over")
        return super()._embed(texts, query=query)


def _memory(url: str, clock: FakeClock, *, min_size: int, max_size: int = 10
            ) -> tuple[Memory, WatchedEmbedder]:
    embedder = WatchedEmbedder()
    memory = Memory(PostgresStore(url, min_size=min_size, max_size=max_size),
                    embedder=embedder, clock=clock)
    alice = memory.for_user("alice")
    alice.add_turns([{"role": "user", "content": f"I painted a sunrise by the lake {n}"}
                     for n in range(20)] +
                    [{"role": "assistant", "content": f"Morning light on the water, day {n}"}
                     for n in range(20)], session_id="s")
    alice.remember("Alice paints sunrises at the lake")
    memory.flush()
    QUERIES.clear()
    return memory, embedder


@pytest.fixture
def watched(pg_url: str, clock: FakeClock) -> Iterator[tuple[Memory, WatchedEmbedder]]:
    # Connections free from the start (a pool grows only once one is asked for), and
    # more than the caller and the background embedding worker hold at once.
    memory, embedder = _memory(pg_url, clock, min_size=4)
    yield memory, embedder
    memory.close()
    QUERIES.clear()


def _watch(store: Any, name: str, calls: list[int],
           before: Callable[[], None] | None = None) -> None:
    """Note the thread of each call of ``store.name`` (and run ``before`` first)."""
    method = getattr(store, name)

    def watched(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.get_ident())
        if before is not None:
            before()
        return method(*args, **kwargs)

    setattr(store, name, watched)


def _ranking(hits: list[Hit]) -> list[tuple[str, float]]:
    return [(hit.id, hit.score) for hit in hits]


def _caller_keywords(memory: Memory, embedder: WatchedEmbedder,
                     second: Callable[[], None] = lambda: None) -> list[int]:
    """Watch the caller's keyword searches: each opens the embedder's gate, and the
    second of turns runs ``second`` first. Returns the threads of those of turns."""
    me, threads = threading.get_ident(), list[int]()
    embedder.gated = True

    def opened() -> None:
        if threading.get_ident() == me:
            embedder.gate.set()

    def before() -> None:
        opened()
        if threading.get_ident() == me and len(threads) == 2:
            second()

    _watch(memory.store, "keyword_search_turns", threads, before)
    _watch(memory.store, "keyword_search_items", [], opened)
    return threads


def test_the_vector_search_runs_beside_the_keyword_search(
        watched: tuple[Memory, WatchedEmbedder]) -> None:
    memory, embedder = watched
    started = threading.Event()
    vector_threads: list[int] = []
    overlapped: list[bool] = []
    _watch(memory.store, "vector_search_turns", vector_threads, started.set)
    # The caller's second keyword search (its OR) waits for the vector search to start:
    # it does only if the two run at once.
    _caller_keywords(memory, embedder, lambda: overlapped.append(started.wait(BOUND_S)))
    hits = memory.for_user("alice").search_conversations("painted sunrise lake")
    assert overlapped == [True]
    assert vector_threads == embedder.query_threads[-1:]
    assert vector_threads[0] != threading.get_ident()
    assert hits and "vector_rank" in hits[0].why and "keyword_rank" in hits[0].why


@pytest.mark.parametrize("kind", ["turns", "items"])
def test_reads_beside_change_no_ranking(watched: tuple[Memory, WatchedEmbedder],
                                        kind: str) -> None:
    memory, embedder = watched
    store = memory.store
    alice = memory.for_user("alice")
    search: Callable[[str], list[Hit]] = (
        alice.search_conversations if kind == "turns"
        else lambda q: alice.search(q, touch=False))
    vector_threads: list[int] = []
    _watch(store, f"vector_search_{kind}", vector_threads)
    _caller_keywords(memory, embedder)
    queries = ["sunrise by the lake 7", "morning light on the water", "what does Alice paint"]

    def ranked() -> list[list[tuple[str, float]]]:
        found = []
        for query in queries:
            embedder.gate.clear()   # the vector comes once the caller's search is under way
            found.append(_ranking(search(query)))
        QUERIES.clear()
        return found

    beside = ranked()
    assert len(vector_threads) == 3 and threading.get_ident() not in vector_threads
    store.reads_beside = False
    try:
        after = ranked()
    finally:
        del store.reads_beside
    assert vector_threads[3:] == [threading.get_ident()] * 3
    assert beside == after and all(beside)


def test_with_no_connection_free_the_caller_searches_itself(
        pg_url: str, clock: FakeClock) -> None:
    memory, embedder = _memory(pg_url, clock, min_size=1, max_size=1)
    try:
        store = memory.store
        tried: list[bool] = []
        done = threading.Event()
        method = store.reading_beside

        @contextmanager
        def watched_beside() -> Iterator[bool]:
            with method() as reading:
                tried.append(reading)
                yield reading
            done.set()

        store.reading_beside = watched_beside  # type: ignore[method-assign]
        vector_threads: list[int] = []
        _watch(store, "vector_search_turns", vector_threads)
        # The caller's second keyword search waits for the helper to have tried, while
        # the caller holds the pool's one connection.
        _caller_keywords(memory, embedder, lambda: tried.append(done.wait(BOUND_S)))
        hits = memory.for_user("alice").search_conversations("painted sunrise lake")
        assert tried == [False, True]
        assert vector_threads == [threading.get_ident()]
        assert embedder.query_threads[-1] != threading.get_ident()
        assert hits and "vector_rank" in hits[0].why
    finally:
        memory.close()


def test_reading_beside_never_waits_for_a_connection(pg_url: str) -> None:
    store = PostgresStore(pg_url, min_size=1, max_size=1)
    try:
        got: list[bool] = []

        def helper() -> None:
            with store.reading_beside() as reading:
                got.append(reading)

        with store.reading():
            store.get_meta("schema")      # the caller holds the pool's only connection
            thread = threading.Thread(target=helper)
            thread.start()
            thread.join(BOUND_S)
            with store.reading_beside() as nested:   # nor in a thread holding one
                got.append(nested)
        assert not thread.is_alive() and got == [False, False]
        helper()
        assert got[-1] is True
    finally:
        store.close()


def test_a_failing_embedder_fails_the_search(watched: tuple[Memory, WatchedEmbedder]
                                             ) -> None:
    memory, embedder = watched
    embedder.fail = True
    _caller_keywords(memory, embedder, lambda: None)
    with pytest.raises(ProviderError, match="fell over"):
        memory.for_user("alice").search_conversations("sunrise lake")
    embedder.fail = False
    assert memory.for_user("alice").search_conversations("sunrise lake")
