"""What one write costs in statements on PostgreSQL, where each is a round trip: the
user's scope is told once, and the user's lock taken once, per transaction."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy.typing as npt
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from ledgermem import Memory, StorageError
from ledgermem.store import pg_connection, pg_keyword, sql_keyword
from ledgermem.store.base import TurnQuery
from ledgermem.store.postgres import PostgresStore
from ledgermem.testing import HashEmbedder
from ledgermem.types import ItemQuery

FILLERS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
           "india", "juliet", "kilo", "lima"]


def _trace(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, bool] | None]]:
    """Each statement the calling thread runs (not the background workers'), with the
    scope it first had to tell the connection (or None)."""
    seen: list[tuple[str, tuple[str, bool] | None]] = []
    execute = PostgresStore._execute
    me = threading.get_ident()

    def traced(self: PostgresStore, conn: Any, sql: str, params: Sequence[Any]) -> Any:
        local = self._local
        if threading.get_ident() == me:
            seen.append((" ".join(sql.split()),
                         local.scope if local.applied != local.scope else None))
        return execute(self, conn, sql, params)

    monkeypatch.setattr(PostgresStore, "_execute", traced)
    return seen


def test_remember_tells_the_scope_once_and_takes_the_lock_once(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    alice = pg_memory.for_user("alice")
    alice.remember("Alice keeps bees on the roof")
    seen = _trace(monkeypatch)
    alice.remember("Alice grows basil in the kitchen")
    assert [scope for _, scope in seen if scope is not None] == [("alice", False)]
    assert sum("pg_advisory_xact_lock" in sql for sql, _ in seen) == 1
    # The lock comes before the event is inserted (ledger order).
    assert "pg_advisory_xact_lock" in seen[0][0]
    assert seen[0][1] == ("alice", False)


def test_the_scope_is_told_with_the_lock(pg_memory: Memory,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A write's first statement, the user's lock, tells the connection the user's
    scope too: no round trip of its own for ``set_config``."""
    alice = pg_memory.for_user("alice")
    alice.remember("Alice keeps bees on the roof")
    sent: list[str] = []
    execute = psycopg.Connection.execute
    me = threading.get_ident()

    def noted(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me:
            sent.append(" ".join(str(query).split()))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", noted)
    alice.remember("Alice grows basil in the kitchen")
    alice.forget(alice.remember("Alice lost her keys").id)
    told = [sql for sql in sent if "set_config('ledgermem.user_id'" in sql]
    assert len(told) == 3 and all("pg_advisory_xact_lock" in sql for sql in told)
    assert not [sql for sql in sent if sql.startswith("SELECT pg_advisory_xact_lock")]


def test_a_batch_takes_the_lock_once(pg_memory: Memory,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    alice = pg_memory.for_user("alice")
    seen = _trace(monkeypatch)
    alice.remember_many([f"Hive {n} sits by the orchard wall" for n in range(5)])
    alice.add_turns([{"role": "user", "content": "How are the bees?"},
                     {"role": "assistant", "content": "Busy."}], session_id="alice:bees")
    # One transaction each: one lock statement each.
    assert sum("pg_advisory_xact_lock" in sql for sql, _ in seen) == 2



def test_a_time_naming_search_counts_its_words_once(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Turns are searched for all the query's words, then inside the window for all but
    its time words: each word's postings are counted once."""
    alice = pg_memory.for_user("alice")
    alice.add_turns([{"role": "user", "content": f"The green kettle {n} whistles",
                      "at": f"2026-05-{1 + n % 28:02d}T09:00:00+00:00"} for n in range(30)],
                    session_id="s")
    alice.search_conversations("kettle")
    seen = _trace(monkeypatch)
    assert alice.search_conversations("green kettle whistles in May 2026")
    assert sum(sql.startswith("SELECT term, l.lexemes, (SELECT count(*) FROM (SELECT 1 FROM "
                              "conversations_terms AS p") for sql, _ in seen) == 1
    # The words' lexemes came with their counts: none asked for apart.
    assert not [sql for sql, _ in seen if sql.startswith("SELECT w, tsvector_to_array")]
    alice.forget_user()
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    assert not [key for key in store._counted if key[1] == "alice"]


def test_new_rows_join_the_cached_corpus_statistics_without_a_read(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """BM25's cached row count and length (``_corpus``) take the rows a write adds from
    what their INSERT returned: no statement reads them back, and the figures are
    those a recount gives."""
    alice = pg_memory.for_user("alice")
    alice.remember("Alice keeps bees on the roof", dedup=False)
    alice.add_turns([{"role": "user", "content": "The bees swarmed today"}],
                    session_id="alice:bees")
    alice.search("bees")
    alice.search_conversations("bees")
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    assert set(store._corpora) >= {("knowledge", "alice"), ("conversations", "alice")}
    seen = _trace(monkeypatch)
    alice.remember("Alice grows basil in the kitchen window")
    alice.remember_many(["Alice walks to work on Mondays", "Alice reads crime novels"])
    alice.add_turns([{"role": "user", "content": "Where do the wasps nest?"},
                     {"role": "assistant", "content": "Under the eaves, by the gutter."}],
                    session_id="alice:wasps")
    # The stored bee turn gets these as its neighbours' text: its length changes too.
    alice.add_turns([{"role": "assistant", "content": "Swarms settle within a day or two"}],
                    session_id="alice:bees")
    assert not [sql for sql, _ in seen if "sum(doc_len)" in sql]
    for table in ("knowledge", "conversations"):
        with store._scope(("alice", False)), store._writing() as run:
            rows, length = run(f"SELECT count(*), sum(doc_len) FROM {table} "
                               "WHERE user_id = ?", ["alice"])[0]
        assert store._corpora[(table, "alice")][:2] == (rows, length)


def test_rewritten_and_removed_text_count_into_the_cached_corpus_statistics(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restatement, an edit of text or entity, and a forget change the user's row
    count and length by what their statements returned: the next search recounts
    nothing (at 100,000 items that count was half of a restating ``remember``), and
    the cached figures are those a recount gives."""
    alice = pg_memory.for_user("alice")
    bees = alice.remember("Alice keeps three hives of bees on the roof")
    basil = alice.remember("Alice grows basil in the kitchen window", dedup=False)
    moths = alice.remember("Alice found moths in the wardrobe", dedup=False)
    alice.search("bees")
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    seen = _trace(monkeypatch)
    restated = alice.remember("Alice keeps three hives of bees on the flat roof")
    assert (restated.id, restated.written) == (bees.id, "merged")
    alice.update(basil.id, content="Alice grows basil and thyme in the kitchen window")
    alice.update(basil.id, entity="place:kitchen garden")
    alice.forget(moths.id)
    hits = alice.search("bees roof")
    assert not [sql for sql, _ in seen if "sum(doc_len)" in sql]
    assert [hit.id for hit in hits][:1] == [bees.id]
    with store._scope(("alice", False)), store._writing() as run:
        rows, length = run("SELECT count(*), sum(doc_len) FROM knowledge "
                           "WHERE user_id = ?", ["alice"])[0]
    assert store._corpora[("knowledge", "alice")][:2] == (rows, length)
    assert rows == 2   # the forgotten row is gone; the others were rewritten in place


def test_a_write_runs_in_one_transaction_without_savepoints(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store calls inside ``writing_for`` (dedup's counts and lookup, the append)
    share its transaction as it is: a savepoint around each cost ``remember`` six of
    its round trips."""
    alice = pg_memory.for_user("alice")
    alice.remember("Alice keeps bees on the roof")
    opened = 0
    transaction = psycopg.Connection.transaction
    me = threading.get_ident()

    def counted(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        nonlocal opened
        if threading.get_ident() == me:   # not the background workers'
            opened += 1
        return transaction(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "transaction", counted)
    alice.remember("Alice grows basil in the kitchen")
    alice.remember("Alice keeps bees on the roof")   # a twin: found, refreshed
    alice.remember_many(["Alice walks to work", "Alice reads crime novels"])
    assert opened == 3


def test_a_bulk_write_passes_one_array_per_column(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``UNNEST_ROWS`` rows on, an INSERT sends one array per column (a VALUES list
    of 400 rows has thousands of placeholders for the driver to parse); the rows are
    stored as a VALUES list stores them, in the order given."""
    alice = pg_memory.for_user("alice")
    seen = _trace(monkeypatch)
    few = alice.remember_many([{"content": f"Hive {n} stands by the wall", "category": "note",
                                "sensitive": True} for n in range(3)], dedup=False)
    many = alice.remember_many([{"content": f"Jar {n} holds {n}00 grams of honey",
                                 "confidence": 1, "metadata": {"batch": 2}}
                                for n in range(20)], dedup=False)
    turns = alice.add_turns([{"role": "user" if n % 2 else "assistant", "name": None,
                              "content": f"Turn {n} about bees", "metadata": {"n": n}}
                             for n in range(12)], session_id="alice:bees")
    inserts = [sql for sql, _ in seen if sql.startswith(("INSERT INTO knowledge",
                                                        "INSERT INTO conversations",
                                                        "INSERT INTO events"))]
    assert sum("unnest(" in sql for sql in inserts) == 4   # events and rows of the two bulks
    assert sum("VALUES" in sql for sql in inserts) == 2    # the batch of three
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    items = {i.id: i for i in store.query_items("alice", ItemQuery())[0]}
    assert [items[i.id].content for i in many] == [
        f"Jar {n} holds {n}00 grams of honey" for n in range(20)]
    assert all(items[i.id].confidence == 1.0 and items[i.id].metadata == {"batch": 2}
               and not items[i.id].sensitive for i in many)
    assert all(items[i.id].sensitive and items[i.id].category == "note" for i in few)
    with store._scope(("alice", False)), store._writing() as run:
        order = [r[0] for r in run("SELECT id FROM knowledge ORDER BY pk", [])]
        turn_order = [r[0] for r in run("SELECT id FROM conversations ORDER BY pk", [])]
    assert order == [i.id for i in [*few, *many]]
    assert turn_order == [t.id for t in turns]
    stored = store.query_turns("alice", TurnQuery(session_id="alice:bees"))
    assert [(t.content, t.role, t.metadata) for t in stored] == [
        (f"Turn {n} about bees", "user" if n % 2 else "assistant", {"n": n}) for n in range(12)]


def test_an_array_insert_keeps_on_conflict_and_leaves_other_types_to_values(
        pg_store: PostgresStore) -> None:
    columns = ("user_id", "item_a", "item_b", "outcome", "similarity", "ts")
    rows = [("alice", f"a{n % 9}", "b", "same", 0.5 + n / 100, "2026-11-24T00:00:00+00:00")
            for n in range(12)]  # three pairs twice
    conflict = " ON CONFLICT (user_id, item_a, item_b) DO NOTHING"
    with pg_store._scope(("alice", False)), pg_store._writing() as run:
        sql, params = pg_store._insert_sql(run, "comparisons", columns, rows, conflict)
        assert "unnest(" in sql and sql.endswith(conflict)
        run(sql, params)
        stored = run("SELECT item_a, similarity FROM comparisons ORDER BY item_a", [])
        # A number for a text column: the VALUES list, where PostgreSQL converts it.
        odd = [("alice", n, "c", "same", 1.0, "2026-11-24T00:00:00+00:00") for n in range(8)]
        sql, _ = pg_store._insert_sql(run, "comparisons", columns, odd)
        assert "VALUES" in sql and "unnest(" not in sql
    # The first of each duplicate pair was kept, as a VALUES list keeps it.
    assert stored == [(f"a{n}", 0.5 + n / 100) for n in range(9)]


def _checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The backend pid of each connection the pool pings before handing it out."""
    pinged: list[int] = []
    check = ConnectionPool.check_connection

    def counted(conn: Any) -> None:
        pinged.append(conn.info.backend_pid)
        check(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    return pinged


def test_a_connection_used_moments_ago_is_handed_out_without_a_ping(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each store call takes a pooled connection; pinging it every time cost a round
    trip per call (six per conversation search). Only one idle past ``IDLE_CHECK_S``
    is pinged."""
    alice = pg_memory.for_user("alice")
    alice.remember("Alice keeps bees on the roof")
    pinged = _checks(monkeypatch)
    for _ in range(3):
        alice.search("bees", touch=False)
        alice.search_conversations("bees")
    assert pinged == []
    monkeypatch.setattr(pg_connection, "IDLE_CHECK_S", 0.0)
    alice.search("bees", touch=False)
    assert pinged


def test_a_connection_that_died_while_idle_is_replaced_unseen(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = PostgresStore(pg_url, min_size=1, max_size=1)    # one connection to kill
    with Memory(store, embedder=None) as memory:
        alice = memory.for_user("alice")
        kept = alice.remember("Alice keeps bees on the roof")

        def kill() -> int:
            pid = int(store._read("SELECT pg_backend_pid()")[0][0])
            with psycopg.connect(pg_url, autocommit=True) as conn:
                assert conn.execute("SELECT pg_terminate_backend(%s, 5000)",
                                    [pid]).fetchone() == (True,)
            return pid

        dead = kill()
        monkeypatch.setattr(pg_connection, "IDLE_CHECK_S", 0.0)   # as if idle for a while
        assert alice.get(kept.id).content == kept.content
        assert int(store._read("SELECT pg_backend_pid()")[0][0]) != dead
        # Used again at once, a connection is not pinged: a death in between reaches
        # the caller as a StorageError, and the next call gets a working connection.
        monkeypatch.setattr(pg_connection, "IDLE_CHECK_S", 3600.0)
        kill()
        with pytest.raises(StorageError):
            alice.get(kept.id)
        assert alice.get(kept.id).content == kept.content


def test_a_search_runs_in_two_transactions_and_none_while_its_vector_is_computed(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversation search makes several store calls (keyword, knowledge expansion,
    vector, rows). Those before the wait for the query's vector share one pooled
    connection and transaction (``Store.reading``), and the scope is told once; no
    connection is held while the vector is computed (a remote embedder may take a
    while). The vector search and its hits' rows run beside, in the embedding's thread
    and a block of its own (tests/postgres/test_pg_beside.py), so the caller opens no
    second block; when it reads them itself (nothing beside), a second block holds them.
    With the vector known already, one block does all. A reranker runs after the
    blocks have ended."""
    order: list[str] = []

    class Slow(HashEmbedder):
        def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
            if query:
                time.sleep(0.2)
                order.append("vector")
            return super()._embed(texts, query=query)

    store = PostgresStore(pg_url)
    with Memory(store, embedder=Slow()) as memory:
        alice = memory.for_user("alice")
        alice.remember("Alice keeps bees on the roof")
        alice.add_turns([{"role": "user", "content": "The bees swarmed on Monday"},
                         {"role": "assistant", "content": "Did they settle on the roof?"}],
                        session_id="alice:bees")
        memory.flush()
        handed: list[int] = []
        getconn, reading, me = store._pool.getconn, store.reading, threading.get_ident()

        def counted(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == me:     # not the background workers'
                handed.append(1)
            return getconn(*args, **kwargs)

        @contextmanager
        def logged() -> Iterator[None]:
            order.append("begin")
            with reading():
                yield
            order.append("end")

        monkeypatch.setattr(store._pool, "getconn", counted)
        monkeypatch.setattr(store, "reading", logged)
        seen = _trace(monkeypatch)
        hits = alice.search_conversations("when did the bees swarm on the roof")
        assert hits and hits[0].turn is not None
        assert order == ["begin", "end", "vector"]
        assert len(handed) == 1
        assert [scope for _, scope in seen if scope is not None] == [("alice", False)]
        assert len(seen) >= 4    # several statements shared them
        # Nothing read beside: the caller's second block reads the vector's hits.
        order.clear()
        handed.clear()
        seen.clear()
        store.reads_beside = False
        try:
            alice.search_conversations("when did the bees swarm on the roof today")
        finally:
            del store.reads_beside
        assert order == ["begin", "end", "vector", "begin", "end"]
        assert len(handed) == 2
        assert [scope for _, scope in seen if scope is not None] == [("alice", False)] * 2
        # Asked again, the query's vector is known (the query cache): one block.
        order.clear()
        handed.clear()
        alice.search_conversations("when did the bees swarm on the roof")
        assert order == ["begin", "end"] and len(handed) == 1

        def rerank(query: str, found: list[Any]) -> list[Any]:
            assert store._local.conn is None    # no transaction held while it runs
            return found[::-1]

        searcher = memory.searcher.with_options(reranker=rerank)
        assert searcher.search_turns("alice", "bees roof", TurnQuery(), 5,
                                     now=datetime.now(UTC))


@pytest.mark.parametrize("kind", ["turns", "items"])
def test_and_then_or_of_words_none_common_is_one_statement_in_a_block(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Inside a reading block (a search), a keyword AND of words none of which is common
    ranks the OR's rows in the same statement, and the OR that follows takes them: the
    same rows and scores, to the last bit, as the two statements give outside a block."""
    alice = pg_memory.for_user("alice")
    texts = ([f"I painted a sunrise by the lake {n}" for n in range(20)]
             + [f"A sunrise over the hills, morning {n}" for n in range(15)]
             + [f"We swam in the lake at noon {n}" for n in range(15)])
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    terms = ["painted", "sunrise", "lake"]
    search: Any
    if kind == "turns":
        alice.add_turns([{"role": "user", "content": text} for text in texts], session_id="s")

        def search(mode: Any) -> list[tuple[str, float]]:
            return store.keyword_search_turns("alice", terms, mode, TurnQuery(), 50)
    else:
        alice.remember_many(texts, dedup=False)

        def search(mode: Any) -> list[tuple[str, float]]:
            return store.keyword_search_items("alice", terms, mode, ItemQuery(), 50)

    apart = (search("and"), search("or"))
    seen = _trace(monkeypatch)
    with store.reading():
        together = (search("and"), search("or"))
    assert together == apart
    assert len(apart[1]) == 50 > len(apart[0]) >= 20   # (a turn's neighbours count too)
    assert sum(sql.startswith("WITH idf") for sql, _ in seen) == 1
    # Asked again in a new block, the OR ranks anew (nothing kept past a block).
    seen.clear()
    with store.reading():
        assert search("or") == apart[1]
    assert sum(sql.startswith("WITH idf") for sql, _ in seen) == 1


def test_a_common_word_is_not_counted_again_while_the_cut_off_grows_a_little(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The common-term cut-off grows with the rows (past 100,000 items, one step every
    100 rows). Dedup's counts go past it by ``COUNT_HEADROOM``, so a word kept as past
    it is not counted again at each step, while ``term_counts`` still gives what a count
    to the cut-off gives."""
    monkeypatch.setattr(pg_keyword, "COUNT_HEADROOM", 2)
    monkeypatch.setattr(sql_keyword, "COMMON_TERM_MIN_ROWS", 4)
    monkeypatch.setattr(sql_keyword, "COMMON_TERM_SHARE", 0.5)   # half the rows, at least 4
    alice = pg_memory.for_user("alice")
    alice.remember_many([f"walrus {word}" for word in FILLERS[:8]], dedup=False)
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    # Cut-off 4, counted to 6: walrus (8 rows) stops past 6, and reads as past 4.
    assert store.term_counts("alice", "knowledge", ["walrus", "alpha"]) == (
        4, {"walrus": 5, "alpha": 1})
    seen = _trace(monkeypatch)

    def counts() -> int:
        return sum(sql.startswith("SELECT term, l.lexemes") for sql, _ in seen)

    alice.remember_many(["bison caribou", "gannet puffin"], dedup=False)     # cut-off 5
    assert store.term_counts("alice", "knowledge", ["walrus", "alpha"]) == (
        5, {"walrus": 6, "alpha": 1})
    assert counts() == 0
    alice.remember_many([f"moose {word}" for word in FILLERS[8:12]], dedup=False)  # 7
    assert store.term_counts("alice", "knowledge", ["walrus", "alpha"]) == (
        7, {"walrus": 8, "alpha": 1})
    assert counts() == 1                 # past what walrus was counted to: again
