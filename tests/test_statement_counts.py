"""What a default call costs in SQL statements on SQLite, pinned (issue 9 §1).

Speed is measured by the benchmarks; these tests pin what causes it. A default search
(recall bookkeeping on) only reads — its bookkeeping is applied later, off the
caller's path — and ``remember``'s dedup is one batched lookup however many
candidates there are. Counted: statements this thread runs (not the background
workers'), without SQLite's own nested statements (FTS5 shadow tables, triggers).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ledgermem import Memory
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock

WRITES = ("BEGIN", "INSERT", "UPDATE", "DELETE", "SAVEPOINT", "RELEASE", "COMMIT",
          "REPLACE")


@contextmanager
def statements(memory: Memory) -> Iterator[list[str]]:
    """The top-level statements the calling thread runs inside the block."""
    store = memory.store
    assert isinstance(store, SQLiteStore)
    me, seen = threading.get_ident(), []

    def note(sql: str) -> None:
        # SQLite's own statements (FTS5 reading its shadow tables, a trigger's body)
        # are traced too: "-- …" or naming the schema ('main'.…).
        if threading.get_ident() == me and not sql.startswith("--") and "'main'." not in sql:
            seen.append(sql)

    store.trace(note)
    try:
        yield seen
    finally:
        store.trace(None)


def writes(seen: list[str]) -> list[str]:
    return [sql for sql in seen if sql.lstrip().upper().startswith(WRITES)]


@pytest.fixture
def keyword_mem(tmp_path: Path, clock: FakeClock) -> Iterator[Memory]:
    memory = Memory.open(tmp_path / "k.db", embedder=None, clock=clock)
    yield memory
    memory.close()


def _fill(memory: Memory, count: int) -> None:
    alice = memory.for_user("alice")
    for n in range(count):
        alice.remember(f"Kettle number {n} boils water for green tea")


def test_a_default_search_only_reads(keyword_mem: Memory) -> None:
    _fill(keyword_mem, 30)
    alice = keyword_mem.for_user("alice")
    with statements(keyword_mem) as seen:
        hits = alice.search("green tea kettle")
    assert hits and writes(seen) == []
    # AND; OR (the row count, a common-term count per term); one load of the hits.
    assert len(seen) == 7
    with statements(keyword_mem) as seen:
        keyword_mem.flush()  # the bookkeeping, applied now: one transaction
    assert [s.split()[0] for s in writes(seen)][:1] == ["BEGIN"]


def test_a_default_hybrid_search_only_reads(tmp_path: Path, clock: FakeClock) -> None:
    with Memory.open(tmp_path / "h.db", embedder=HashEmbedder(), clock=clock) as memory:
        _fill(memory, 30)
        memory.flush()
        with statements(memory) as seen:
            assert memory.for_user("alice").search("green tea kettle")
        assert writes(seen) == []
        assert len(seen) == 9  # keyword as above, vectors fresh?, active filter, one load


def test_search_all_reads_knowledge_keywords_once(keyword_mem: Memory) -> None:
    _fill(keyword_mem, 10)
    alice = keyword_mem.for_user("alice")
    alice.add_turn("user", "The green kettle whistles")
    with statements(keyword_mem) as seen:
        alice.search_all("green kettle")
    knowledge_bm25 = [s for s in seen if "bm25(knowledge_fts)" in s]
    with statements(keyword_mem) as alone:
        alice.search("green kettle", touch=False)
    assert len(knowledge_bm25) == len([s for s in alone if "bm25(knowledge_fts)" in s])
    assert writes(seen) == []


def test_remember_costs_the_same_however_many_candidates(
        tmp_path: Path, clock: FakeClock) -> None:
    counts = []
    for similar in (1, 40):
        with Memory.open(tmp_path / f"r{similar}.db", embedder=None, clock=clock) as memory:
            _fill(memory, similar)
            with statements(memory) as seen:
                memory.for_user("alice").remember("Kettle number 999 boils water for green tea")
            counts.append(len(seen))
            # One transaction; the append is a savepoint, one event and its row (the
            # row's insert is traced once more per FTS trigger).
            assert [sql.split()[0] for sql in writes(seen)] == [
                "BEGIN", "SAVEPOINT", "INSERT", "INSERT", "INSERT", "INSERT", "RELEASE",
                "COMMIT"]
    # The dedup lookup: the row count, a common-term count per chosen term, the
    # keyword candidates, the exact text, one batched read of the candidates.
    assert counts == [15, 15]


def test_add_turns_costs_one_transaction(keyword_mem: Memory) -> None:
    alice = keyword_mem.for_user("alice")
    alice.add_turn("user", "hello there", session_id="s")
    with statements(keyword_mem) as seen:
        alice.add_turns([{"role": "user", "content": "I like zeppelins"},
                         {"role": "assistant", "content": "Nice"}], session_id="s")
    assert [s for s in seen if s.startswith(("BEGIN", "COMMIT"))] == ["BEGIN IMMEDIATE",
                                                                       "COMMIT"]
    assert len(seen) == 35
