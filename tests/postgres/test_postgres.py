"""The PostgreSQL store on a real server: the Memory API, isolation with row-level
security behind it, many processes at once, job claims, and parity with SQLite."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from ledgermem import (
    InvalidInput,
    Memory,
    NotFound,
    SchemaMismatch,
    SQLiteStore,
    StorageError,
    UserMemory,
)
from ledgermem.retrieval.embedding import reembed
from ledgermem.retrieval.hybrid import SearchOptions
from ledgermem.retrieval.keyword import query_terms
from ledgermem.store import sql_keyword
from ledgermem.store.base import TurnQuery
from ledgermem.store.pg_migrations import (
    ITEM_TSVECTOR,
    PG_MIGRATIONS,
    SECURED_TABLES,
    TERM_FREQ,
    TURN_TSVECTOR,
)
from ledgermem.store.postgres import (
    _BM25_SQL,
    _IDF,
    _LEXEMES,
    _TWO,
    PostgresStore,
    _placeholders,
)
from ledgermem.testing import HashEmbedder
from ledgermem.types import ItemQuery
from tests.postgres.workers import claim_then_die, write_and_search
from tests.support import FakeClock, with_login

LATEST = max(m.version for m in PG_MIGRATIONS)


def table_rows(url: str, sql: str, params: list[Any] | None = None, *,
               user: str | None = None) -> list[tuple[Any, ...]]:
    """Rows read over a plain connection as the store's role, as ``user`` (or as
    nobody: row-level security then shows nothing)."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        if user is not None:
            conn.execute("SELECT set_config('ledgermem.user_id', %s, true)", [user])
        cursor = conn.execute(sql, params or [])
        return cursor.fetchall() if cursor.description else []


def everyone(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows read as the store's role with row-level security open to every user."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT set_config('ledgermem.all_users', 'on', true)")
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []


# opening ----------------------------------------------------------------------------
def test_open_by_url_migrates_once_and_hides_the_password(pg_url: str) -> None:
    with Memory.open(pg_url, embedder=None) as memory:
        store = memory.store
        assert isinstance(store, PostgresStore)
        assert store.schema_version() == LATEST
        assert ":***@" in store.url and "lm_app_" in store.url
        memory.for_user("alice").remember("Kept across reopening")
    with Memory.open(pg_url, embedder=None) as memory:  # migrations are not rerun
        assert memory.store.schema_version() == LATEST  # type: ignore[attr-defined]
        assert [i.content for i in memory.for_user("alice").all_knowledge()["items"]] == [
            "Kept across reopening"]
    versions = table_rows(pg_url, "SELECT version FROM schema_version ORDER BY 1")
    assert versions == [(v,) for v in range(1, LATEST + 1)]


def test_concurrent_openers_create_a_new_schema_once(pg_database: str) -> None:
    schema = f"t_race_{uuid.uuid4().hex[:8]}"  # created by the stores themselves
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_store() -> None:
        try:
            start.wait(timeout=30)
            stores.append(PostgresStore(pg_database, schema=schema, max_size=1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert not errors, errors
        assert [s.schema_version() for s in stores] == [LATEST] * 4
        stores[0].set_meta("k", "v")
        assert stores[3].get_meta("k") == "v"
    finally:
        for store in stores:
            store.close()
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_driver_errors_become_storage_errors(pg_database: str, pg_store: PostgresStore
                                             ) -> None:
    with pytest.raises(StorageError) as caught:
        PostgresStore(with_login(pg_database, dbname="no_such_database"))
    assert isinstance(caught.value.__cause__, psycopg.Error)
    with pytest.raises(StorageError) as caught, pg_store.transaction():
        pg_store._read("SELECT no_such_column FROM knowledge")
    assert isinstance(caught.value.__cause__, psycopg.errors.UndefinedColumn)
    with pytest.raises(InvalidInput, match="NUL"):  # PostgreSQL text cannot hold U+0000
        Memory(pg_store).for_user("alice").remember("nul \x00 byte")
    assert pg_store.counts("alice")["events"] == 0
    pg_store.close()
    with pytest.raises(StorageError, match="closed"):
        pg_store.get_item("alice", "x")


# the Memory API ---------------------------------------------------------------------
def test_remember_update_forget_and_history(pg_memory: Memory, clock: FakeClock) -> None:
    alice = pg_memory.for_user("alice")
    tea = alice.remember("Sarah Chen prefers green tea", "preference",
                         entity="person:sarah_chen", sensitive=True, metadata={"n": 1})
    assert alice.get(tea.id) == tea
    clock.advance(minutes=1)
    changed = alice.update(tea.id, content="Sarah Chen prefers oolong tea", context="work")
    assert (changed.content, changed.context, changed.sensitive) == (
        "Sarah Chen prefers oolong tea", "work", True)
    twin = alice.remember("Sarah Chen prefers oolong tea", "preference", context="work",
                          entity="person:sarah_chen")
    assert twin.id == tea.id  # dedup found it through full-text search
    note = alice.remember("Parking is on level 3", "note", due_at="tomorrow")
    assert [i.id for i in alice.upcoming(days=2)] == [note.id]
    alice.forget(note.id)
    with pytest.raises(NotFound):
        alice.get(note.id)
    assert [e.kind for e in alice.history(note.id)] == ["memory.added", "memory.deleted"]
    assert "Parking" not in str(alice.history(note.id))
    page = alice.all_knowledge(sensitive=True, sort="created_at", order="asc")
    assert [i.id for i in page["items"]] == [tea.id] and page["total"] == 1
    assert alice.entities() == [("person:sarah_chen", 1)]
    assert alice.contexts() == [("work", 1)]
    stats = alice.stats()
    assert (stats["items"], stats["items_total"], stats["by_category"]) == (
        1, 1, {"preference": 1})


def test_hybrid_search_finds_by_keywords_and_vectors(pg_memory: Memory) -> None:
    alice = pg_memory.for_user("alice")
    alice.remember("Sarah Chen prefers green tea in the morning", "preference")
    alice.remember("The deploy script lives in the ops folder", "fact")
    alice.remember("Green paint is drying in the garage", "note")
    alice.add_turns([
        {"role": "user", "content": "We went hiking at Yosemite in May"},
        {"role": "assistant", "content": "Lovely! How was the weather there?"},
    ], session_id="trip")
    assert pg_memory.flush() >= 0
    assert pg_memory.store.counts("alice")["items_unembedded"] == 0

    hits = alice.search("which tea does Sarah drink", touch=False)
    assert hits[0].content.startswith("Sarah Chen prefers green tea")
    assert {"keyword_rank", "vector_rank"} <= hits[0].why.keys()
    only_notes = alice.search("green", category="note", touch=False)
    assert [h.content for h in only_notes] == ["Green paint is drying in the garage"]
    turns = alice.search_conversations("hiking Yosemite")
    assert turns[0].turn is not None and turns[0].turn.content.startswith("We went hiking")
    assert {"keyword_rank", "vector_rank"} <= turns[0].why.keys()
    reply = alice.search_conversations("weather hiking", session_id="trip")
    assert {h.turn.content for h in reply if h.turn} >= {"Lovely! How was the weather there?"}
    recalled = alice.search("green tea")
    alice.flush()
    assert alice.get(recalled[0].id).use_count == 1


@pytest.mark.parametrize("query", [
    '"unbalanced', "tea*", "NEAR(tea coffee)", "-tea", "tea AND OR NOT", "a & b | !c",
    "'); DROP TABLE knowledge; --", "(((", "tea:*", "<->", "100%", "?", "the of and",
])
def test_keyword_search_never_raises_on_query_syntax(pg_memory: Memory, query: str) -> None:
    alice = pg_memory.for_user("alice")
    alice.remember("Tea and coffee are both fine", "preference")
    alice.search(query, touch=False)
    alice.search_conversations(query)
    assert alice.stats()["items"] == 1


def test_tools_decay_and_prune(pg_memory: Memory, clock: FakeClock) -> None:
    alice = pg_memory.for_user("alice")
    alice.log_tool_call("grep", {"pattern": "x"}, duration_ms=4)
    failed = alice.log_tool_call("deploy", {"env": "prod"}, success=False, error="timeout",
                                 duration_ms=10)
    assert failed.success is False and failed.arguments == {"env": "prod"}
    assert [t.name for t in alice.tool_errors()] == ["deploy"]
    assert {s["name"]: (s["calls"], s["failures"]) for s in alice.tool_stats()} == {
        "grep": (1, 0), "deploy": (1, 1)}
    assert [i.content for i in alice.by_category("error")] == ["Tool deploy failed: timeout"]
    weak = alice.remember("A weak hunch", "note", confidence=0.05)
    alice.add_turn("user", "hello there")
    clock.advance(days=100)
    assert alice.apply_confidence_decay() == 2
    assert alice.apply_confidence_decay() == 0
    assert alice.get(weak.id).confidence == pytest.approx(0.045)
    assert alice.prune(days=90) == {"turns": 1, "tool_calls": 2, "items": 1}
    assert alice.tool_stats() == [] and alice.recent_conversations() == []
    assert alice.history(weak.id)[0].kind == "memory.added"


def test_forget_user_erases_only_that_user(pg_memory: Memory, pg_url: str) -> None:
    alice, bob = pg_memory.for_user("alice"), pg_memory.for_user("bob")
    alice.remember("Alice fact")
    alice.add_turn("user", "hi")
    bob.remember("Bob fact")
    assert alice.forget_user() == 2
    assert alice.stats()["events"] == 0
    assert [i.content for i in bob.all_knowledge()["items"]] == ["Bob fact"]
    assert everyone(pg_url, "SELECT DISTINCT user_id FROM events") == [("bob",)]
    assert pg_memory.store.user_ids() == ["bob"]


def test_rebuild_rederives_views_and_keeps_vectors(pg_memory: Memory, pg_url: str) -> None:
    alice, bob = pg_memory.for_user("alice"), pg_memory.for_user("bob")
    item = alice.remember("Rebuild keeps the kettle warm", "fact")
    alice.update(item.id, confidence=0.3)
    alice.add_turn("user", "talking about kettles", session_id="s")
    alice.log_tool_call("kettle", {"on": True})
    bob.remember("Bob's own fact")
    pg_memory.flush()
    columns = {
        "knowledge": "id, user_id, content, confidence, embedding::text, embedding_model, fts",
        "conversations": "id, content, context, day, embedding::text, fts",
        "tool_history": "id, name, arguments, success",
    }
    before = {t: everyone(pg_url, f"SELECT {c} FROM {t} ORDER BY id")
              for t, c in columns.items()}
    everyone(pg_url, "UPDATE knowledge SET confidence = 0.99")  # damaged views
    everyone(pg_url, "DELETE FROM tool_history")
    pg_memory.rebuild()
    after = {t: everyone(pg_url, f"SELECT {c} FROM {t} ORDER BY id") for t, c in columns.items()}
    assert after == before
    assert len(before["knowledge"]) == 2 and before["knowledge"][0][4] is not None
    assert alice.search("kettle", touch=False)[0].id == item.id



def test_term_index_follows_every_change_of_the_text(pg_memory: Memory, pg_url: str) -> None:
    """``<table>_terms`` (BM25's postings) always equals what the rows' tsvectors say:
    after adds, edits, a turn's neighbour text changing, forgets, prunes and a rebuild."""
    alice, bob = pg_memory.for_user("alice"), pg_memory.for_user("bob")
    kept = alice.remember("The kettle is descaled monthly", "fact")
    edited = alice.remember("Green tea at noon", "preference")
    gone = alice.remember("A locker code to forget", "fact")
    bob.remember("Bob drinks coffee", "preference")
    for text in ("I descaled the kettle", "Yes, in May!", "Tea at noon then"):
        alice.add_turn("user", text, session_id="s")  # each rewrites its neighbours' text
    alice.update(edited.id, content="Jasmine tea at four")
    alice.search("kettle")  # a recall updates confidence, not the text
    alice.forget(gone.id)
    derived = {table: (f"SELECT user_id, v.lexeme, pk, {TERM_FREQ}, doc_len FROM {table} "
                       "CROSS JOIN unnest(fts) AS v ORDER BY 2, 3")
               for table in ("knowledge", "conversations")}

    def check() -> None:
        for table, sql in derived.items():
            postings = everyone(pg_url, f"SELECT user_id, lexeme, pk, freq, doc_len FROM "
                                        f"{table}_terms ORDER BY 2, 3")
            assert postings == [(*r[:3], float(r[3]), r[4]) for r in everyone(pg_url, sql)]
            assert postings
        assert stale_text(pg_url) == []

    check()
    assert not everyone(pg_url, "SELECT 1 FROM knowledge_terms WHERE lexeme = 'locker'")
    everyone(pg_url, "DELETE FROM knowledge_terms WHERE lexeme = 'kettl'")  # damaged
    pg_memory.rebuild()
    check()
    found = pg_memory.store.keyword_search_items("alice", ["kettle"], "or", ItemQuery(), 10)
    assert [item_id for item_id, _ in found] == [kept.id]
    assert bob.forget_user() == 1
    check()


def stale_text(url: str) -> list[tuple[Any, ...]]:
    """Rows whose ``fts`` or ``doc_len`` is not what their text gives (m0013's trigger
    sets them; m0002 generated them from these expressions)."""
    return [row for table, tsvector in (("knowledge", ITEM_TSVECTOR),
                                        ("conversations", TURN_TSVECTOR))
            for row in everyone(url, f"SELECT '{table}', id FROM {table} WHERE fts IS "
                                     f"DISTINCT FROM {tsvector} OR doc_len IS DISTINCT FROM "
                                     f"ledgermem_tokens({tsvector})")]


def test_a_write_computes_its_lexemes_once(pg_url: str) -> None:
    """m0013: ``fts`` and ``doc_len`` were two generated columns of one expression, so
    every write ran ``to_tsvector`` twice; a row trigger now sets both from one call,
    and new or deleted rows' postings are written per statement. A store written
    before m0013 keeps its values, and takes writes, edits and forgets after it."""
    old = PostgresStore(pg_url, migrations=PG_MIGRATIONS[:12])
    with Memory(old, embedder=None) as memory:
        alice = memory.for_user("alice")
        kept = alice.remember("The kettle is descaled monthly", "fact", entity="object:kettle")
        for text in ("I descaled the kettle", "Yes, in May!"):
            alice.add_turn("user", text, session_id="s")
    tables = ("knowledge", "conversations", "knowledge_terms", "conversations_terms")
    before = {t: everyone(pg_url, f"SELECT * FROM {t} ORDER BY 1, 2, 3") for t in tables}
    with Memory(PostgresStore(pg_url), embedder=None) as memory:
        assert {t: everyone(pg_url, f"SELECT * FROM {t} ORDER BY 1, 2, 3")
                for t in tables} == before
        alice = memory.for_user("alice")
        alice.add_turns([{"role": "user", "content": f"turn {n} about the kettle"}
                         for n in range(12)], session_id="s")
        alice.update(kept.id, content="The kettle is descaled weekly")
        gone = alice.remember("A locker code to forget", "fact")
        alice.forget(gone.id)
        assert stale_text(pg_url) == []
        assert [h.id for h in alice.search("descaled weekly", top_k=1)] == [kept.id]
        assert everyone(pg_url, "SELECT count(*) FROM knowledge_terms "
                                "WHERE lexeme = 'locker'") == [(0,)]
    columns = everyone(pg_url, "SELECT attrelid::regclass::text, attname, attgenerated "
                               "FROM pg_attribute WHERE attname IN ('fts', 'doc_len') AND "
                               "attrelid IN ('knowledge'::regclass, "
                               "'conversations'::regclass) ORDER BY 1, 2")
    assert [c[2] for c in columns] == ["", "", "", ""], columns
    triggers = dict(everyone(pg_url, "SELECT tgname, tgtype & 1 = 1 FROM pg_trigger "
                                     "WHERE NOT tgisinternal AND tgrelid IN "
                                     "('knowledge'::regclass, 'conversations'::regclass)"))
    assert triggers == {  # True: once per row
        "knowledge_fts": True, "conversations_fts": True,
        "knowledge_terms_added": False, "conversations_terms_added": False,
        "knowledge_terms_removed": False, "conversations_terms_removed": False,
        "knowledge_terms_text": True, "conversations_terms_text": True}


def test_keyword_search_reads_postings_not_every_row(pg_memory: Memory, pg_url: str) -> None:
    """The GIN index on ``fts`` is unusable under row-level security (``@@`` is not
    leakproof: even with sequential scans off, PostgreSQL scanned every row of the
    user), so BM25 matches terms in a B-tree of postings, never with ``@@`` on rows.
    OR and two-of read the postings into one aggregate by row: no window over them
    (which sorted and stored every posting, twice for two-of)."""
    alice = pg_memory.for_user("alice")
    target = alice.remember("The kettle is descaled monthly", "fact")
    alice.remember("Green tea at noon", "preference")
    for having in ("", _TWO):
        sql = _BM25_SQL.format(table="knowledge", lexemes=_LEXEMES, having=having,
                               idf=_IDF.format(table="knowledge", lexemes=_LEXEMES),
                               where="t.user_id = ?")
        with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
            conn.execute("SELECT set_config('ledgermem.user_id', 'alice', true), "
                         "set_config('enable_seqscan', 'off', true)")
            plan = "\n".join(str(r[0]) for r in conn.execute(
                "EXPLAIN " + _placeholders(sql),
                [2, "kettle descaled", "alice", 7.0, "alice", "kettle descaled", "alice",
                 10]).fetchall())
        assert "knowledge_terms_lookup" in plan and "@@" not in plan, plan
        assert "WindowAgg" not in plan, plan
    found = pg_memory.store.keyword_search_items("alice", ["kettle"], "and", ItemQuery(), 10)
    assert [item_id for item_id, _ in found] == [target.id]

def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def test_keyword_and_reads_only_the_postings_of_rows_holding_every_word(
        pg_memory: Memory, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``and`` finds the rows holding every lexeme with index-only scans of ``pk`` and
    reads the postings of those rows alone: a word in most of the user's rows no longer
    has each of its postings scored. Ranks and scores are BM25 as FTS5 computes it
    (the same as SQLite's: ``test_same_ranking_as_sqlite``), checked here against the
    formula over the postings the store holds."""
    alice = pg_memory.for_user("alice")
    texts = [f"The kettle number {n} sits on shelf {n % 7}" for n in range(240)]
    texts[17] = "The kettle needs descaling, and descaling the kettle takes an hour"
    texts[101] = "Descaling the old kettle every month"
    texts[202] = "A kettle, once descaling was done, boiled faster than the kettle before"
    items = alice.remember_many(texts, dedup=False)
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    statements: list[tuple[str, list[Any]]] = []
    execute = PostgresStore._execute

    def noted(self: PostgresStore, conn: Any, sql: str, params: Any) -> Any:
        statements.append((sql, list(params)))
        return execute(self, conn, sql, params)

    monkeypatch.setattr(PostgresStore, "_execute", noted)
    found = store.keyword_search_items("alice", ["kettle", "descaling"], "and", ItemQuery(), 10)
    monkeypatch.undo()

    # The formula, over the stored postings (FTS5's bm25: k1 1.2, b 0.75, idf floor).
    rows = everyone(pg_url, "SELECT p.lexeme, p.pk, p.freq, p.doc_len, k.id FROM "
                            "knowledge_terms AS p JOIN knowledge AS k ON k.pk = p.pk "
                            "WHERE p.lexeme IN ('kettl', 'descal') ORDER BY p.lexeme")
    n_rows, length, _ = store._corpora[("knowledge", "alice")]
    avgdl = length / n_rows
    df = Counter(lexeme for lexeme, *_ in rows)
    scores: dict[str, float] = {}
    held: Counter[str] = Counter()
    for lexeme, _, freq, doc_len, item_id in rows:
        idf = max(np.log((max(n_rows, df[lexeme]) - df[lexeme] + 0.5) / (df[lexeme] + 0.5)),
                  1e-6)
        scores[item_id] = scores.get(item_id, 0.0) + idf * freq * 2.2 / (
            freq + 1.2 * (0.25 + 0.75 * (doc_len + 1) / (avgdl + 1)))
        held[item_id] += 1
    every = sorted((item_id for item_id in scores if held[item_id] == 2),
                   key=lambda item_id: -scores[item_id])
    assert {items[17].id, items[101].id, items[202].id} == set(every)
    assert [item_id for item_id, _ in found] == every
    assert [score for _, score in found] == pytest.approx([scores[i] for i in every],
                                                          rel=1e-12)

    # No step of the statement holds more rows than those holding every word.
    (sql, params), = [(s, p) for s, p in statements if "INTERSECT" in s]
    with psycopg.connect(pg_url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT set_config('ledgermem.user_id', 'alice', true)")
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _placeholders(sql),
                            params).fetchone()[0][0]["Plan"]  # type: ignore[index]
    ctes = {node["Subplan Name"]: node["Actual Rows"] for node in _plan_nodes(plan)
            if str(node.get("Subplan Name", "")).startswith("CTE")}
    assert ctes == {"CTE idf": 2, "CTE every": 3, "CTE scored": 3}, ctes


def test_keyword_and_of_common_words_lists_the_newest_rows_holding_them_all(
        pg_memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """When every word is common, ``and`` lists the rows holding all of them newest
    first, unranked (the same ``INTERSECT`` finds them)."""
    monkeypatch.setattr(sql_keyword, "COMMON_TERM_MIN_ROWS", 5)
    alice = pg_memory.for_user("alice")
    texts = [f"The kettle number {n}" if n % 3 else f"The kettle on shelf {n}"
             for n in range(30)]
    items = alice.remember_many(texts, dedup=False)
    found = pg_memory.store.keyword_search_items("alice", ["kettle", "shelf"], "and",
                                                 ItemQuery(), 4)
    assert found == [(items[n].id, 0.0) for n in (27, 24, 21, 18)]


def test_vectors_are_kept_in_the_row(pg_url: str) -> None:
    """An exact search reads every vector of the user: out of line (pgvector's default
    storage, for any row over 2 kB), each costs a TOAST lookup. m0008 moves them in."""
    text = "The spare key hangs on the hook behind the garden shed door"
    toasted = ("SELECT count(*) FROM knowledge "
               "WHERE pg_column_toast_chunk_id(embedding) IS NOT NULL")
    embedder = HashEmbedder(dimensions=512)  # 2,056 bytes
    store = PostgresStore(pg_url, migrations=PG_MIGRATIONS[:7])
    with Memory(store, embedder=embedder) as memory:
        kept = memory.for_user("alice").remember(text, "fact")
        memory.embed_pending()
    before = everyone(pg_url, "SELECT embedding::text FROM knowledge")
    assert everyone(pg_url, toasted) == [(1,)]
    with Memory(PostgresStore(pg_url), embedder=embedder) as memory:
        assert everyone(pg_url, toasted) == [(0,)]
        assert everyone(pg_url, "SELECT embedding::text FROM knowledge") == before
        memory.for_user("alice").remember(text + " again", "fact")
        memory.embed_pending()
        assert everyone(pg_url, toasted) == [(0,)]
        hits = memory.for_user("alice").search(text, top_k=1)
        assert [h.id for h in hits] == [kept.id]
    assert everyone(pg_url, "SELECT DISTINCT attstorage FROM pg_attribute WHERE attname = "
                    "'embedding' AND attrelid IN ('knowledge'::regclass, "
                    "'conversations'::regclass)") == [("m",)]


def test_a_restatement_refreshes_its_item_on_its_page(pg_url: str) -> None:
    """m0014: pages of ``knowledge`` keep room for a new version of a row, so the
    refresh of an item a ``remember`` restates (its time and confidence, no indexed
    column) stays on the row's page: a HOT update, with no new entry in any index, the
    HNSW index's included. Without the room a full page sends the new version to
    another page, and every index gets an entry for it. Pages written before m0014
    get the room when they are rewritten (``vacuum``)."""
    texts = [f"{name} keeps the {thing} by the {place}" for name, thing, place in (
        ("Alice", "spare key", "shed"), ("Bob", "red kettle", "stove"),
        ("Carol", "old atlas", "window"), ("Dave", "blue bicycle", "gate"),
        ("Erin", "garden hose", "fence"), ("Frank", "fishing rod", "boathouse"),
        ("Grace", "tin whistle", "piano"), ("Heidi", "brass lamp", "desk"),
        ("Ivan", "wool scarf", "door"), ("Judy", "card table", "attic"),
        ("Ken", "paint brush", "easel"), ("Liz", "rain boots", "porch"))]

    def refreshed_in_place(memory: Memory) -> bool:
        memory.store.vacuum()           # rows packed into pages, as a store filled long ago
        (item_id, page), = everyone(
            pg_url, "SELECT id, (ctid::text::point)[0] FROM knowledge ORDER BY ctid LIMIT 1")
        content = memory.store.get_item("alice", item_id).content  # type: ignore[union-attr]
        restated = memory.for_user("alice").remember(content)
        assert (restated.id, restated.written) == (item_id, "merged")
        return everyone(pg_url, "SELECT (ctid::text::point)[0] FROM knowledge "
                                f"WHERE id = '{item_id}'") == [(page,)]

    embedder = HashEmbedder(dimensions=384)
    with Memory(PostgresStore(pg_url, migrations=PG_MIGRATIONS[:13]),
                embedder=embedder) as memory:
        memory.for_user("alice").remember_many(texts, dedup=False)
        memory.embed_pending()
        assert not refreshed_in_place(memory)
    with Memory(PostgresStore(pg_url), embedder=embedder) as memory:
        assert refreshed_in_place(memory)


# isolation --------------------------------------------------------------------------
def test_another_user_gets_not_found(pg_memory: Memory) -> None:
    alice, bob = pg_memory.for_user("alice"), pg_memory.for_user("bob")
    secret = alice.remember("Alice's locker code is quartz-7431", "fact")
    alice.add_turn("user", "my locker code is quartz-7431")
    pg_memory.flush()
    for attempt in (bob.get, bob.forget, bob.history,
                    lambda i: bob.update(i, content="hijacked")):
        with pytest.raises(NotFound):
            attempt(secret.id)
    assert bob.search("locker code quartz") == []
    assert bob.search_conversations("locker code quartz") == []
    assert bob.stats()["events"] == 0
    assert alice.get(secret.id).content == "Alice's locker code is quartz-7431"


def test_a_user_first_written_by_another_process_is_found_at_once(pg_url: str) -> None:
    # Regression (fixed): BM25's corpus statistics were cached for a minute even when the
    # user had no rows yet, and a cached zero skips the search: a store that had searched
    # an empty user found nothing another process (or a rebuild) wrote for a minute.
    reader = Memory(PostgresStore(pg_url, max_size=1), embedder=None)
    writer = Memory(PostgresStore(pg_url, max_size=1), embedder=None)
    try:
        assert reader.for_user("alice").search("kettle", touch=False) == []
        assert reader.for_user("alice").search_conversations("kettle") == []
        item = writer.for_user("alice").remember("The kettle is descaled monthly")
        turn = writer.for_user("alice").add_turn("user", "Descale the kettle today")
        assert [h.id for h in reader.for_user("alice").search("kettle", touch=False)] == [
            item.id]
        assert [h.id for h in reader.for_user("alice").search_conversations("kettle")] == [
            turn.id]
    finally:
        reader.close()
        writer.close()


def test_row_level_security_is_a_second_wall(pg_memory: Memory, pg_url: str) -> None:
    pg_memory.for_user("alice").remember("Alice's fact")
    pg_memory.for_user("alice").add_turn("user", "Alice speaking")
    pg_memory.for_user("bob").remember("Bob's fact")
    # The store's own role, without the WHERE clauses the store adds:
    assert table_rows(pg_url, "SELECT content FROM knowledge") == []
    assert table_rows(pg_url, "SELECT content FROM knowledge", user="alice") == [
        ("Alice's fact",)]
    assert table_rows(pg_url, "SELECT user_id, count(*) FROM events GROUP BY 1",
                      user="alice") == [("alice", 2)]
    assert table_rows(pg_url, "SELECT count(*) FROM conversations", user="bob") == [(0,)]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        table_rows(pg_url, "INSERT INTO tool_history (id, user_id, name, success, ts) "
                           "VALUES ('x', 'bob', 'n', true, 't')", user="alice")
    assert table_rows(pg_url, "UPDATE knowledge SET content = 'x' RETURNING 1",
                      user="mallory") == []
    assert len(everyone(pg_url, "SELECT 1 FROM knowledge")) == 2


# many processes, many workers -------------------------------------------------------
def test_processes_write_and_search_concurrently(pg_url: str) -> None:
    processes, per_process = 3, 100
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(processes)
    PostgresStore(pg_url).close()  # children race on data, not on the schema
    children = [ctx.Process(target=write_and_search, args=(pg_url, w, per_process, start))
                for w in range(processes)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=120)
    assert [c.exitcode for c in children] == [0] * processes

    with Memory(PostgresStore(pg_url), embedder=None) as memory:
        user = memory.for_user("shared")
        items = user.all_knowledge(limit=None)["items"]
        assert Counter(i.metadata["worker"] for i in items) == dict.fromkeys(
            range(processes), per_process)
        assert sorted((s["session_id"], s["turns"]) for s in user.sessions()) == [
            (f"worker-{w}", per_process) for w in range(processes)]
        stats = user.stats()
        assert (stats["items"], stats["turns"]) == (processes * per_process,) * 2
        # Each child's five touched searches are coalesced into at most five recall
        # events (one per interval, applied at the latest when it closes).
        recalls = len(memory.store.events("shared", kinds=["memory.recalled"]))
        assert processes <= recalls <= processes * 5
        assert stats["events"] == 2 * processes * per_process + recalls
        assert [h.content for h in user.search("p2w42t0", touch=False)] == [
            "p2w42t0 p2w42t1 p2w42t2 p2w42t3"]


def test_workers_claim_disjoint_embedding_jobs(pg_url: str) -> None:
    with Memory(PostgresStore(pg_url), embedder=None) as memory:
        alice, bob = memory.for_user("alice"), memory.for_user("bob")
        for n in range(25):
            alice.remember(f"alice job{n}")
            bob.remember(f"bob job{n}")
    embedder = HashEmbedder()
    stores = [PostgresStore(pg_url, max_size=1) for _ in range(2)]
    claimed: list[list[str]] = [[], []]
    both_hold = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            with stores[n].claim_pending_embeddings("knowledge", 30) as rows:
                claimed[n] = [row_id for row_id, _ in rows]
                both_hold.wait(timeout=30)  # both claims are held at once here
                vectors = embedder.embed_batch([text for _, text in rows])
                stores[n].set_embeddings("knowledge", [
                    (row_id, text, vectors[i]) for i, (row_id, text) in enumerate(rows)],
                    embedder.model_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert not errors, errors
        assert sorted(map(len, claimed)) == [20, 30]
        assert not set(claimed[0]) & set(claimed[1])
        assert stores[0].pending_embeddings("knowledge", 100) == []
        with pytest.raises(RuntimeError), stores[0].claim_pending_embeddings("knowledge", 5):
            raise RuntimeError("a failing worker")
    finally:
        for store in stores:
            store.close()


def test_writes_to_rows_a_worker_is_embedding_do_not_wait_for_it(pg_url: str) -> None:
    """A claim locks no row: a restatement, a revision and a forget of items being
    embedded finish while the claim is held (under ``FOR UPDATE`` they waited for the
    model, up to 460 ms a batch), and the vectors land only where the text is still the
    one embedded."""
    with Memory(PostgresStore(pg_url), embedder=None) as memory:
        alice = memory.for_user("alice")
        kept = alice.remember("Alice keeps bees on the roof")
        revised = alice.remember("Alice drives a blue van")
        gone = alice.remember("Alice collects stamps")
        embedder = HashEmbedder()
        worker = PostgresStore(pg_url, max_size=1)
        finished = threading.Event()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                alice.remember("Alice keeps bees on the roof")   # merged into ``kept``
                alice.revise(revised.id, "Alice drives a red van")
                alice.forget(gone.id)
                finished.set()
            except BaseException as exc:
                errors.append(exc)

        try:
            with worker.claim_pending_embeddings("knowledge", 10) as rows:
                assert {row_id for row_id, _ in rows} == {kept.id, revised.id, gone.id}
                writer = threading.Thread(target=write)
                writer.start()
                assert finished.wait(30), errors   # while the claim is held
                vectors = embedder.embed_batch([text for _, text in rows])
                written = worker.set_embeddings("knowledge", [
                    (row_id, text, vectors[i]) for i, (row_id, text) in enumerate(rows)],
                    embedder.model_id)
            writer.join(30)
        finally:
            worker.close()
        assert errors == []
        # ``kept`` and the revised item's old version (its text is unchanged: a revision
        # is a new version); not the forgotten one, whose row and text are gone.
        assert written == 2
        pending = {row_id for row_id, _ in memory.store.pending_embeddings("knowledge", 10)}
        assert kept.id not in pending and len(pending) == 1   # the revision's new version


def test_a_dead_worker_releases_its_claim(pg_store: PostgresStore, pg_url: str) -> None:
    with Memory(pg_store, embedder=None) as memory:
        ids = {memory.for_user("alice").remember(f"job number {n}").id for n in range(5)}
        ctx = multiprocessing.get_context("spawn")
        claimed, release = ctx.Queue(), ctx.Event()
        child = ctx.Process(target=claim_then_die, args=(pg_url, claimed, release))
        child.start()
        assert set(claimed.get(timeout=60)) == ids
        assert pg_store.pending_embeddings("knowledge", 10) == []  # claimed elsewhere
        release.set()
        child.join(timeout=60)
        assert child.exitcode == 3
        deadline = time.monotonic() + 30  # the server notices the dropped connection
        while not (pending := pg_store.pending_embeddings("knowledge", 10)):
            assert time.monotonic() < deadline, "the dead worker's claim was never released"
            time.sleep(0.05)
        assert {i for i, _ in pending} == ids


# vectors ----------------------------------------------------------------------------
def _exact_and_approximate(store: PostgresStore,
                           search: Callable[[], list[tuple[str, float]]]
                           ) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """``search`` ranked exactly, then by HNSW (``exact_search_limit`` 0): the same
    scores, and the same rows above the last score (rows tied on a score may come in
    another order)."""
    exact = search()
    store.exact_search_limit = 0
    try:
        approximate = search()
    finally:
        store.exact_search_limit = PostgresStore.exact_search_limit
    assert len(exact) > 0 and len(approximate) == len(exact)
    assert np.allclose([s for _, s in approximate], [s for _, s in exact], atol=1e-6)
    last = exact[-1][1]
    assert {i for i, s in approximate if s > last + 1e-6} == {
        i for i, s in exact if s > last + 1e-6}
    return exact, approximate


def test_hnsw_search_with_filters_matches_exact_search(pg_memory: Memory, pg_url: str
                                                      ) -> None:
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    alice, bob = pg_memory.for_user("alice"), pg_memory.for_user("bob")
    for n in range(60):
        alice.remember(f"alice topic{n % 7} detail{n}", "fact" if n % 2 else "note")
        bob.remember(f"bob topic{n % 7} detail{n}")
    pg_memory.flush()
    indexes = {r[0] for r in table_rows(pg_url, "SELECT indexname FROM pg_indexes WHERE "
                                                "schemaname = current_schema()")}
    assert {"knowledge_hnsw_64", "conversations_hnsw_64"} <= indexes
    query = HashEmbedder().embed_query("topic3 detail10")
    filters = ItemQuery(category="note")
    exact, _ = _exact_and_approximate(
        store, lambda: store.vector_search_items("alice", query, filters, 10))
    assert len(exact) == 10
    notes = {i.id for i in pg_memory.for_user("alice").by_category("note")}
    assert {i for i, _ in exact} <= notes


def test_hnsw_search_of_turns_scores_the_nearest_with_their_neighbours(
        pg_memory: Memory) -> None:
    """Past ``exact_search_limit`` turns, the nearest turns (HNSW) are scored with their
    neighbours read by the session index, not every turn of their sessions: the same
    rows and scores as the exact ranking when the nearest turns are all of them, and
    the same best turns in a long session of which only some are the nearest."""
    store = pg_memory.store
    assert isinstance(store, PostgresStore)
    alice = pg_memory.for_user("alice")
    for session in ("a", "b", "c"):
        alice.add_turns([{"role": "user", "content": f"{session} kettle topic{n % 5} step{n}"}
                         for n in range(15)], session_id=session)
    pg_memory.flush()
    query = HashEmbedder().embed_query("kettle topic3 step7")
    for filters in (TurnQuery(), TurnQuery(session_id="b"), TurnQuery(role="user")):
        exact, _ = _exact_and_approximate(
            store, partial(store.vector_search_turns, "alice", query, filters, 10))
        assert len(exact) == 10
    # One long session, 64 nearest turns (limit 5): the best turns and their scores
    # are the exact ranking's.
    alice.add_turns([{"role": "user", "content": f"long filler words number {n}"}
                     for n in range(300)], session_id="long")
    alice.add_turns([{"role": "user", "content": "kettle topic3 step7 again"}],
                    session_id="long")
    pg_memory.flush()
    exact, approximate = _exact_and_approximate(
        store, lambda: store.vector_search_turns("alice", query, TurnQuery(), 5))
    assert [i for i, _ in approximate] == [i for i, _ in exact]


def test_vectors_of_another_model_are_refused_then_reembedded(pg_memory: Memory,
                                                               pg_url: str) -> None:
    store = pg_memory.store
    alice = pg_memory.for_user("alice")
    item = alice.remember("Mixing models corrupts rankings")
    alice.add_turn("user", "and so do mixed dimensions")
    pg_memory.flush()
    with pytest.raises(SchemaMismatch):
        store.set_embeddings("knowledge", [(item.id, item.content, np.ones(8, np.float32))],
                             "other-model")
    small = HashEmbedder(dimensions=32)
    assert reembed(store, small) == 2
    assert (store.get_meta("embedding_model"), store.get_meta("embedding_dimensions")) == (
        "hash:32", "32")
    indexes = {r[0] for r in table_rows(pg_url, "SELECT indexname FROM pg_indexes WHERE "
                                                "indexname LIKE '%%hnsw%%' AND "
                                                "schemaname = current_schema()")}
    assert indexes == {"knowledge_hnsw_32", "conversations_hnsw_32"}
    found = store.vector_search_items("alice", small.embed_query("mixing models"),
                                      ItemQuery(), 5)
    assert [i for i, _ in found] == [item.id]
    store.clear_embeddings()
    assert store.counts("alice")["items_unembedded"] == 1


# parity with SQLite -----------------------------------------------------------------
FACTS = [
    ("Sarah Chen prefers green tea in the morning", "preference"),
    ("Sarah's favourite tea shop is on Elm Street", "fact"),
    ("The team drinks coffee at the Monday standup", "fact"),
    ("Green tea gives Sarah a headache after 6pm", "fact"),
    ("The deploy script needs the staging credentials", "skill"),
    ("Remember to water the green plants on Friday", "reminder"),
    ("Coffee beans are ordered from the Elm Street roastery", "note"),
]
TURNS = [
    ("user", "Sarah and I went hiking at Yosemite in May"),
    ("assistant", "That sounds wonderful. Did Sarah enjoy the hike?"),
    ("user", "Yes! She brought green tea in a thermos"),
    ("assistant", "Tea on a mountain trail, lovely."),
    ("user", "Next time we plan a coffee tasting on Elm Street"),
]
QUERIES = ["green tea", "Sarah tea morning", "coffee Elm Street", "deploy credentials",
           "hiking Yosemite", "what does Sarah drink", "plants"]


def fill(memory: Memory, clock: FakeClock) -> UserMemory:
    alice = memory.for_user("alice")
    for content, category in FACTS:
        clock.advance(hours=1)
        alice.remember(content, category)
    for role, content in TURNS:
        clock.advance(minutes=5)
        alice.add_turn(role, content, session_id="chat")
    memory.flush()
    return alice


def test_same_ranking_as_sqlite(pg_store: PostgresStore, tmp_path: Path) -> None:
    """Fusion runs above the store and both stores score alike (BM25 with the same
    parameters, exact cosine with the same neighbour smoothing of turns), so the same
    data and queries rank the same on both, retriever by retriever and fused."""
    found: list[dict[str, Any]] = []
    for store in (pg_store, SQLiteStore(tmp_path / "parity.db")):
        clock = FakeClock()
        with Memory(store, embedder=HashEmbedder(), clock=clock) as memory:
            alice = fill(memory, clock)
            runs: dict[str, Any] = {}
            for mode in ("keyword", "vector", "hybrid"):
                memory.searcher.options = SearchOptions(mode=mode, limit=10)
                runs[mode] = [
                    [(h.content, {k: round(v, 4) for k, v in h.why.items()}) for h in
                     alice.search(q, touch=False) + alice.search_conversations(q)]
                    for q in QUERIES]
            # Dedup's mode: the same rows (those holding two of the words). Not the same
            # scores: SQLite matches an OR of the pairs, and FTS5's BM25 counts a word
            # once for each pair it is in.
            runs["two"] = [
                sorted(store.get_item(alice.user_id, item_id).content  # type: ignore[union-attr]
                       for item_id, _ in store.keyword_search_items(
                           alice.user_id, query_terms(q), "two", ItemQuery(), 10))
                for q in QUERIES]
            found.append(runs)
    postgres, sqlite = found
    assert all(all(hits) for mode, hits in postgres.items() if mode != "two")
    assert any(postgres["two"])
    assert postgres == sqlite


def test_policies_read_their_settings_once_per_statement(pg_memory: Memory,
                                                         pg_url: str) -> None:
    """m0012: each policy reads ``ledgermem.user_id`` / ``ledgermem.all_users`` in a
    scalar subquery (an InitPlan, run once per statement) instead of calling
    ``current_setting`` for every row; the wall lets the same rows through."""
    pg_memory.for_user("alice").remember("Alice keeps bees", dedup=False)
    pg_memory.for_user("bob").remember("Bob keeps bees too", dedup=False)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        policies = conn.execute(
            "SELECT tablename, qual, with_check FROM pg_policies WHERE tablename = ANY(%s) "
            "AND schemaname = current_schema()", [list(SECURED_TABLES)]).fetchall()
        assert len(policies) == 2 * len(SECURED_TABLES)
        assert all("SELECT" in qual and "SELECT" in check for _, qual, check in policies)

        def bees(user: str, every: str) -> tuple[int, str]:
            with conn.transaction():
                conn.execute("SELECT set_config('ledgermem.user_id', %s, true), "
                             "set_config('ledgermem.all_users', %s, true)", [user, every])
                sql = "SELECT count(*) FROM knowledge_terms WHERE lexeme = 'bee'"
                plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + sql))
                return int(conn.execute(sql).fetchone()[0]), plan  # type: ignore[index]

        seen, plan = bees("alice", "off")
        assert seen == 1 and "InitPlan" in plan, plan
        assert bees("", "off")[0] == 0
        assert bees("", "on")[0] == 2
