"""A hybrid search embeds its query in a worker thread while the keyword search runs
(docs/retrieval.md, "Round two: speed"): its latency is the longer of the two, not
their sum. Pinned by events and thread ids, never by timing: the keyword search waits
(up to a generous bound that only a broken build reaches) for the embedding to have
started, which only happens if the two run at once."""

from __future__ import annotations

import multiprocessing
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy.typing as npt
import pytest

from ledgermem import Hit, Memory, ProviderError
from ledgermem.retrieval.embedding import QUERIES, embed_query_soon
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock

BOUND_S = 30.0
"""How long the keyword search waits for the embedding to start: reached only when
the two do not overlap (the test then fails), never when they do."""


class WatchedEmbedder(HashEmbedder):
    """The hashing embedder, noting which thread embeds each query and when it starts."""

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.started = threading.Event()
        self.query_threads: list[int] = []
        self.fail = False

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        if query:
            self.query_threads.append(threading.get_ident())
            self.started.set()
            if self.fail:
                raise RuntimeError("the model fell over")
        return super()._embed(texts, query=query)


@pytest.fixture
def watched(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Memory, WatchedEmbedder]]:
    embedder = WatchedEmbedder()
    with Memory.open(tmp_path / "o.db", embedder=embedder, clock=clock) as memory:
        alice = memory.for_user("alice")
        alice.add_turns([{"role": "user", "content": f"I painted a sunrise by the lake {n}"}
                         for n in range(20)], session_id="s")
        memory.flush()
        QUERIES.clear()
        yield memory, embedder
    QUERIES.clear()


def _keyword_waits_for_embedding(memory: Memory, embedder: WatchedEmbedder) -> list[bool]:
    """Make the first conversation keyword statement of the calling thread wait for
    the query embedding to start; returns [whether it had] once traced."""
    store = memory.store
    assert isinstance(store, SQLiteStore)
    me, seen = threading.get_ident(), list[bool]()

    def note(sql: str) -> None:
        if threading.get_ident() == me and "bm25(conversations_fts" in sql and not seen:
            seen.append(embedder.started.wait(BOUND_S))

    store.trace(note)
    return seen


def test_the_query_is_embedded_while_the_keyword_search_runs(
        watched: tuple[Memory, WatchedEmbedder]) -> None:
    memory, embedder = watched
    overlapped = _keyword_waits_for_embedding(memory, embedder)
    try:
        hits = memory.for_user("alice").search_conversations("sunrise lake painting")
    finally:
        memory.store.trace(None)   # type: ignore[attr-defined]
    assert overlapped == [True]
    assert embedder.query_threads and embedder.query_threads[0] != threading.get_ident()
    assert hits and "vector_rank" in hits[0].why and "keyword_rank" in hits[0].why


def test_sqlite_reads_nothing_beside_the_caller(watched: tuple[Memory, WatchedEmbedder]
                                                ) -> None:
    """SQLite's reads are this process's CPU: the vector search runs in the caller's
    thread after the keyword search (``Store.reads_beside``; PostgreSQL's run beside,
    tests/postgres/test_pg_beside.py)."""
    memory, embedder = watched
    store = memory.store
    threads: list[int] = []
    method = store.vector_search_turns

    def watch(*args: object, **kwargs: object) -> list[tuple[str, float]]:
        threads.append(threading.get_ident())
        return method(*args, **kwargs)  # type: ignore[arg-type]

    store.vector_search_turns = watch  # type: ignore[method-assign]
    assert memory.for_user("alice").search_conversations("sunrise lake")
    assert not store.reads_beside
    assert threads == [threading.get_ident()] != embedder.query_threads


def test_overlap_changes_no_ranking(watched: tuple[Memory, WatchedEmbedder]) -> None:
    memory, embedder = watched
    alice = memory.for_user("alice")
    first = alice.search_conversations("sunrise by the lake 7")
    # Now the vector comes from the query cache, in the caller's thread, at once.
    again = alice.search_conversations("sunrise by the lake 7")
    assert len(embedder.query_threads) == 1
    assert [(h.id, h.score, h.why) for h in first] == [(h.id, h.score, h.why) for h in again]


def test_a_cached_query_costs_no_thread(watched: tuple[Memory, WatchedEmbedder]) -> None:
    _, embedder = watched
    embed_query_soon(embedder, "green tea").result()
    calls = embedder.calls
    before = {t.ident for t in threading.enumerate()}
    assert embed_query_soon(embedder, "green tea").result() is not None
    assert embedder.calls == calls
    assert {t.ident for t in threading.enumerate()} <= before


def test_a_failing_embedder_fails_the_search_and_caches_nothing(
        watched: tuple[Memory, WatchedEmbedder]) -> None:
    memory, embedder = watched
    embedder.fail = True
    with pytest.raises(ProviderError, match="fell over"):
        memory.for_user("alice").search_conversations("sunrise")
    embedder.fail = False
    assert memory.for_user("alice").search_conversations("sunrise")
    assert len(embedder.query_threads) == 2    # the failure was not remembered


def test_knowledge_search_overlaps_too(watched: tuple[Memory, WatchedEmbedder]) -> None:
    memory, embedder = watched
    alice = memory.for_user("alice")
    alice.remember("Alice paints sunrises at the lake")
    memory.flush()
    store = memory.store
    assert isinstance(store, SQLiteStore)
    me, seen = threading.get_ident(), list[bool]()

    def note(sql: str) -> None:
        if threading.get_ident() == me and "bm25(knowledge_fts" in sql and not seen:
            seen.append(embedder.started.wait(BOUND_S))

    store.trace(note)
    try:
        assert alice.search("sunrise lake", touch=False)
    finally:
        store.trace(None)
    assert seen == [True]
    assert embedder.query_threads[-1] != threading.get_ident()


def _search_in_child(path: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with Memory.open(path, embedder=WatchedEmbedder()) as memory:
        out.put([h.id for h in memory.for_user("alice").search_conversations("lake sunrise")])


def test_a_forked_child_embeds_its_queries(watched: tuple[Memory, WatchedEmbedder],
                                           tmp_path: Path) -> None:
    memory, _ = watched
    memory.for_user("alice").search_conversations("sunrise")   # the parent's threads exist
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_search_in_child, args=(str(tmp_path / "o.db"), out))
    child.start()
    found = out.get(timeout=BOUND_S)
    child.join(BOUND_S)
    assert child.exitcode == 0 and found


class GatedEmbedder(HashEmbedder):
    """The hashing embedder whose query embeddings wait for ``gate`` (up to
    ``BOUND_S``), so a search's other work runs while its embedding is pending."""

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.gate = threading.Event()
        self.opened_in_time: list[bool] = []

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        if query:
            self.opened_in_time.append(self.gate.wait(BOUND_S))
        return super()._embed(texts, query=query)


_ID = re.compile(r"'([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})'")


@pytest.mark.parametrize("kind", ["turns", "items"])
def test_candidates_rows_are_read_while_the_query_is_embedded(
        tmp_path: Path, clock: FakeClock, kind: str) -> None:
    """The keyword candidates' rows are read before the search waits for its query's
    vector; after it, only the rows of candidates not read yet. Each row is read once,
    and the ranking is the one a cached vector gives."""
    embedder = GatedEmbedder()
    with Memory.open(tmp_path / "g.db", embedder=embedder, clock=clock) as memory:
        alice = memory.for_user("alice")
        search: Callable[[str], list[Hit]]
        if kind == "turns":
            alice.add_turns([{"role": "user", "content": f"A sunrise by the lake {n}"}
                             for n in range(20)] +
                            [{"role": "user", "content": f"Morning light, day {n}"}
                             for n in range(20)], session_id="s")
            table, search = "conversations", alice.search_conversations
        else:
            alice.remember_many([f"Painted a sunrise by the lake {n}" for n in range(20)] +
                                [f"Morning light on day {n}" for n in range(20)])
            table, search = "knowledge", lambda q: alice.search(q, touch=False)
        embedder.gate.set()
        memory.flush()
        embedder.gate.clear()
        QUERIES.clear()
        store = memory.store
        assert isinstance(store, SQLiteStore)
        me, loads = threading.get_ident(), list[tuple[bool, set[str]]]()

        def note(sql: str) -> None:
            if (threading.get_ident() == me and f"FROM {table} WHERE +user_id" in sql
                    and "content" in sql):
                loads.append((embedder.gate.is_set(), set(_ID.findall(sql))))
                embedder.gate.set()     # the first load lets the embedding finish

        store.trace(note)
        try:
            hits = search("sunrise lake")
        finally:
            store.trace(None)
        assert embedder.opened_in_time == [True]
        assert [waiting for waiting, _ in loads] == [False, True]
        (_, early), (_, late) = loads
        assert early and late and not early & late
        assert {h.id for h in hits} <= early | late
        assert [(h.id, h.score) for h in search("sunrise lake")] == [
            (h.id, h.score) for h in hits]     # the vector now comes from the cache
    QUERIES.clear()
