"""What a default call costs in SQL statements on SQLite, pinned (issue 9 §1).

Speed is measured by the benchmarks; these tests pin what causes it. A default search
(recall bookkeeping on) only reads — its bookkeeping is applied later, off the
caller's path — and ``remember``'s dedup is one batched lookup however many
candidates there are. Counted: statements this thread runs (not the background
workers'), without SQLite's own nested statements (FTS5 shadow tables, triggers).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ledgermem import Memory
from ledgermem.retrieval.embedding import embed_query
from ledgermem.store import sqlite_keyword
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock, traced

WRITES = ("BEGIN", "INSERT", "UPDATE", "DELETE", "SAVEPOINT", "RELEASE", "COMMIT",
          "REPLACE")


@contextmanager
def statements(memory: Memory) -> Iterator[list[str]]:
    """The top-level statements the calling thread runs inside the block. SQLite's own
    statements (FTS5 reading its shadow tables, a trigger's body) are traced too:
    "-- …" or naming the schema ('main'.…)."""
    store = memory.store
    assert isinstance(store, SQLiteStore)
    with traced(store, lambda sql: not sql.startswith("--") and "'main'." not in sql) as seen:
        yield seen


def issued(seen: list[str]) -> list[str]:
    """The statements as issued: SQLite traces a statement again each time a trigger
    fires for one of its rows (FTS5's), which says nothing of the statements run."""
    return [sql for n, sql in enumerate(seen) if n == 0 or sql != seen[n - 1]]


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
    # AND; OR (one statement counts the rows and each term's, then BM25); one load
    # of the hits.
    assert len(seen) == 4
    with statements(keyword_mem) as seen:
        keyword_mem.flush()  # the bookkeeping, applied now: one transaction
    assert [s.split()[0] for s in writes(seen)][:1] == ["BEGIN"]


def test_a_default_hybrid_search_only_reads(tmp_path: Path, clock: FakeClock) -> None:
    with Memory.open(tmp_path / "h.db", embedder=HashEmbedder(), clock=clock) as memory:
        _fill(memory, 30)
        memory.flush()
        # The query's vector is cached, so the candidates' rows are read in one load
        # whatever the threads' timing (tests/test_latency_overlap.py pins the other
        # case: a load while the embedding runs, and one after).
        embed_query(memory.embedder, "green tea kettle")
        with statements(memory) as seen:
            assert memory.for_user("alice").search("green tea kettle")
        assert writes(seen) == []
        assert len(seen) == 6  # keyword as above, vectors fresh?, active filter, one load


def test_search_all_reads_knowledge_keywords_once(keyword_mem: Memory) -> None:
    _fill(keyword_mem, 10)
    alice = keyword_mem.for_user("alice")
    alice.add_turn("user", "The green kettle whistles")
    with statements(keyword_mem) as seen:
        alice.search_all("green kettle")
    knowledge_bm25 = [s for s in seen if "bm25(knowledge_fts" in s]
    with statements(keyword_mem) as alone:
        alice.search("green kettle", touch=False)
    assert len(knowledge_bm25) == len([s for s in alone if "bm25(knowledge_fts" in s]) > 0
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
    # The dedup lookup: one count of the rows and of each chosen term, the postings of
    # its number ("999", which no row holds, so no read of the rows holding it), the
    # exact text, one batched read of the candidates.
    assert counts == [11, 11]


def test_add_turns_costs_one_transaction(keyword_mem: Memory) -> None:
    alice = keyword_mem.for_user("alice")
    alice.add_turn("user", "hello there", session_id="s")
    with statements(keyword_mem) as seen:
        alice.add_turns([{"role": "user", "content": "I like zeppelins"},
                         {"role": "assistant", "content": "Nice"}], session_id="s")
    assert [s for s in seen if s.startswith(("BEGIN", "COMMIT"))] == ["BEGIN IMMEDIATE",
                                                                       "COMMIT"]
    # Three reads of the turns around, one INSERT of the events, one of the turns with
    # their neighbour text, one UPDATE of the stored turn's, one read back (each traced
    # again per row and FTS trigger: a new turn's index entry is written once, not
    # inserted and then replaced, which traced 22).
    assert len(issued(seen)) == 9 and len(seen) == 16
    texts = dict(keyword_mem.store._conn().execute(  # type: ignore[attr-defined]
        "SELECT content, context FROM conversations"))
    assert texts == {"hello there": "I like zeppelins\nNice",
                     "I like zeppelins": "hello there\nNice",
                     "Nice": "hello there\nI like zeppelins"}


def test_a_default_conversation_search_only_reads(tmp_path: Path, clock: FakeClock) -> None:
    with Memory.open(tmp_path / "c.db", embedder=HashEmbedder(), clock=clock) as memory:
        alice = memory.for_user("alice")
        alice.add_turns([{"role": "user", "content": f"The green kettle {n} whistles"}
                         for n in range(30)], session_id="s")
        memory.flush()
        alice.search_conversations("kettle")    # the vector index and neighbours load
        embed_query(memory.embedder, "green kettle whistles")    # as above
        with statements(memory) as seen:
            assert alice.search_conversations("green kettle whistles")
        assert writes(seen) == []
        # Turns: AND, OR (one statement counts the rows and each term's, BM25); the
        # same three over knowledge (turns found through the items drawn from them);
        # vectors fresh?, the filter on the best vector rows; one load of the
        # candidates.
        assert len(seen) == 9
        assert sum("FROM conversations WHERE +user_id" in s and "content" in s
                   for s in seen) == 1


def _kettle_year(memory: Memory) -> None:
    """36 turns of alice's, three a month of 2026, written in time order."""
    memory.for_user("alice").add_turns(
        [{"role": "user", "content": f"The green kettle {n} whistles",
          "at": f"2026-{1 + n // 3:02d}-{1 + n % 3:02d}T09:00:00+00:00"} for n in range(36)],
        session_id="s")


def _window_statements(memory: Memory, query: str) -> tuple[list[str], list[str], list[str]]:
    """A time-filtered search's statements: its probes of the window's earliest and
    latest turn, its reads of the window's ``pk`` bounds, and its matches inside the
    window."""
    with statements(memory) as seen:
        assert memory.for_user("alice").search_conversations(query, time_mode="filter")
    return ([s for s in seen if s.startswith("SELECT (SELECT pk FROM conversations")],
            [s for s in seen if s.startswith("SELECT min(pk), max(pk)")],
            [s for s in seen if "conversations_fts MATCH" in s and "t.ts >=" in s])


def test_a_time_naming_conversation_search_counts_its_words_once(
        tmp_path: Path, clock: FakeClock) -> None:
    """The words of a query that names a time are counted once, though the turns are
    searched for them twice (all of them; then, inside the window, all but the time
    words); the search inside the window reads only the window's stretch of the index."""
    with Memory.open(tmp_path / "w.db", embedder=None, clock=clock) as memory:
        _kettle_year(memory)
        memory.for_user("alice").search_conversations("kettle")
        with statements(memory) as seen:
            assert memory.for_user("alice").search_conversations(
                "green kettle whistles in May 2026")
        counted = [s for s in seen if "SELECT 1 FROM conversations_fts" in s]
        assert len(counted) == 1
        probes, bounds, windowed = _window_statements(memory,
                                                      "green kettle whistles in May 2026")
        assert windowed and all("conversations_fts.rowid BETWEEN" in s for s in windowed)
        # The stretch is found once per lookup inside the window (its ``and``, then its
        # ``or``), not once per statement.
        assert len(probes) == len(bounds) == 2


def test_a_wide_window_is_searched_without_reading_all_its_turns(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact bounds of a window's stretch take a read of every turn in it, so a
    window whose earliest and latest turns lie more than ``SPAN_SHARE`` of the table
    apart is not bounded and not read (a year of 100,000 turns cost 35 ms to read
    twice), nor one holding more than ``SPAN_ROWS`` turns (the read stops there): the
    search inside it filters by time alone. A narrow one reads only its stretch."""
    monkeypatch.setattr(sqlite_keyword, "SPAN_ROWS", 5)
    with Memory.open(tmp_path / "w.db", embedder=None, clock=clock) as memory:
        _kettle_year(memory)
        for query, read, bounded in (
                ("green kettle whistles in 2026", False, False),  # the whole table
                ("green kettle whistles in May and June 2026", True, False),  # 6 turns
                ("green kettle whistles in May 2026", True, True),
                ("green kettle whistles on May 3, 2026", True, True)):
            probes, bounds, windowed = _window_statements(memory, query)
            assert probes, query
            assert bool(bounds) == read and all(s.endswith("LIMIT 6)") for s in bounds), query
            assert windowed and all(("conversations_fts.rowid BETWEEN" in s) == bounded
                                    for s in windowed), query


def _many(memory: Memory, count: int, *, dedup: bool, start: int = 0,
          numbered: bool = False) -> list[str]:
    """Entries alike but for one word, which keeps them from restating each other: ``n``
    (a number, which a restatement must hold), or a letter code of it in a text of five
    words (four shared are not more than 80%)."""
    alice = memory.for_user("alice")
    texts = [f"Crate {n} holds jars of quince jam" if numbered
             else f"crate {_letters(n)} holds quince jam" for n in range(start, start + count)]
    with statements(memory) as seen:
        alice.remember_many(texts, dedup=dedup)
    return issued(seen)


def _letters(n: int) -> str:
    return "".join(chr(ord("a") + int(digit)) for digit in str(n))


def test_remember_many_costs_statements_per_chunk_not_per_item(
        tmp_path: Path, clock: FakeClock) -> None:
    counts = {}
    for size in (5, 300, 1_000):  # 1,000: three chunks of the ledger (APPEND_CHUNK)
        with Memory.open(tmp_path / f"m{size}.db", embedder=None, clock=clock) as memory:
            seen = _many(memory, size, dedup=False)
            counts[size] = [s.split()[0] for s in writes(seen)]
    # One transaction, the append a savepoint: per chunk one INSERT of the events and
    # one of the items; then one read back per 500 items.
    assert counts[5] == counts[300] == ["BEGIN", "SAVEPOINT", "INSERT", "INSERT", "RELEASE",
                                        "COMMIT"]
    assert counts[1_000] == ["BEGIN", "SAVEPOINT", *["INSERT", "INSERT"] * 3, "RELEASE",
                             "COMMIT"]


def test_remember_many_with_dedup_writes_once_and_reads_a_bounded_amount_per_item(
        tmp_path: Path, clock: FakeClock) -> None:
    with Memory.open(tmp_path / "d.db", embedder=None, clock=clock) as memory:
        _many(memory, 50, dedup=False)
        _many(memory, 1, dedup=True, start=99)   # counts Alice's share of the table once
        small = _many(memory, 10, dedup=True, start=100)
        large = _many(memory, 30, dedup=True, start=200)
        assert [s.split()[0] for s in writes(small)] == [
            s.split()[0] for s in writes(large)] == [
            "BEGIN", "SAVEPOINT", "INSERT", "INSERT", "RELEASE", "COMMIT"]
        # Every row holds "crate" and "holds", two of each entry's rarest words: more
        # than ten rows hold two, which the store ranks from the postings itself (most
        # words, rarer words first). Every word's count, their postings, the items
        # holding an entry's exact text and the candidates' rows are read once for the
        # batch, not a ranked lookup per entry.
        assert len(large) == len(small)
        assert not any("bm25(knowledge_fts" in s for s in small + large)
        # With a number instead, the rows holding it are every candidate: read from its
        # postings, for the whole batch at once. (The larger batch also reads the
        # rows of the earlier numbered entries, which hold two of its rarest words.)
        small = _many(memory, 10, dedup=True, start=300, numbered=True)
        large = _many(memory, 30, dedup=True, start=400, numbered=True)
        assert len(large) <= len(small) + 2
        assert not any("bm25(knowledge_fts" in s for s in small + large)


def test_remember_many_of_distinct_texts_reads_as_much_for_ten_or_thirty(
        tmp_path: Path, clock: FakeClock) -> None:
    seen: dict[int, list[str]] = {}
    for size in (10, 30):
        with Memory.open(tmp_path / f"d{size}.db", embedder=None, clock=clock) as memory:
            _many(memory, 50, dedup=False)
            alice = memory.for_user("alice")
            alice.remember_many(["warm up"])   # counts Alice's share of the table once
            with statements(memory) as seen[size]:
                items = alice.remember_many([f"Barrel {n} keeps pickled walnut {n}"
                                             for n in range(size)])
            assert {item.written for item in items} == {"added"}
    # Each entry's rare words ("barrel", its number) are held by too few rows to need a
    # ranked lookup: the postings of the batch's words answer every entry at once.
    assert len(issued(seen[10])) == len(issued(seen[30]))
    assert not any("bm25(knowledge_fts" in s for s in seen[30])


def test_a_search_s_bookkeeping_keeps_the_word_counts_and_a_new_item_drops_them(
        keyword_mem: Memory) -> None:
    """Words are counted once for a run of searches: applying the searches' recall
    bookkeeping (``memory.recalled``, which changes no text) keeps the counts, as it
    used to drop them every interval under load; an item learnt does drop them."""
    _fill(keyword_mem, 30)
    alice = keyword_mem.for_user("alice")

    def counted() -> int:
        with statements(keyword_mem) as seen:
            assert alice.search("green tea kettle")
        return len([s for s in seen if "SELECT 1 FROM knowledge_fts" in s])

    assert counted() == 1
    keyword_mem.flush()   # the recalled items' event, applied now
    assert keyword_mem.store.events("alice", kinds=["memory.recalled"])
    assert counted() == 0
    alice.remember("A kettle for oolong")
    assert counted() == 1
