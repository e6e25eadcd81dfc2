"""SQLite's full-text indexes hold each row's user as one token, and a keyword search
matches only the searching user's rows through it (migration 8).

FTS5 keeps one index for the whole file: without the token, a search BM25-scored every
row of every user that held a query word, and the user filter dropped the others' after.
The token only narrows the match; the user's id is still compared, so nothing here is
what keeps users apart (tests/test_isolation.py is).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from ledgermem import Memory
from ledgermem.store.base import TurnQuery
from ledgermem.store.sqlite import (
    SCOPE_SHARE,
    SHARE_RECOUNT_ROWS,
    SQLiteStore,
    keyword_scope,
    scoped_match,
)
from ledgermem.types import ItemQuery
from tests.support import rows, traced

pytestmark = pytest.mark.sqlite_only

USERS = ("alice", "Alice", "ä-ü 名前", "🙂", "x" * 200, "a.b@c.d", "tested", "u61", "6")
"""Ids that differ by case only, non-ASCII and emoji, longer than the porter stemmer's
64 bytes, punctuation, an English word, one that spells another's token."""


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    with Memory.open(tmp_path / "scope.db", embedder=None) as memory:
        yield memory


def _store(memory: Memory) -> SQLiteStore:
    assert isinstance(memory.store, SQLiteStore)
    return memory.store


def _rankings(store: SQLiteStore) -> AbstractContextManager[list[str]]:
    """The BM25 statements the calling thread runs inside the block."""
    return traced(store, lambda sql: "bm25(" in sql)


def _matches(path: Path, table: str, user_id: str, word: str) -> int:
    match = scoped_match(table, user_id, [word], "or")  # type: ignore[arg-type]
    return int(rows(path, f"SELECT count(*) FROM {table}_fts WHERE {table}_fts MATCH ?",
                    [match])[0][0])


def test_each_row_is_indexed_under_its_users_token(memory: Memory, tmp_path: Path) -> None:
    for user in USERS:
        handle = memory.for_user(user)
        handle.remember(f"Drinks green tea every morning ({user})")
        handle.add_turn("user", "Tea again today", session_id=f"{user}:chat")
    path = tmp_path / "scope.db"
    for user in USERS:
        assert _matches(path, "knowledge", user, "tea") == 1, user
        assert _matches(path, "conversations", user, "tea") == 1, user
    # The generated column is what keyword_scope writes (FTS5 folds the case).
    stored = {r[0]: r[1] for r in rows(path, "SELECT user_id, scope FROM knowledge")}
    assert {user: token.lower() for user, token in stored.items()} == {
        user: keyword_scope(user) for user in USERS}


def test_query_words_never_match_the_token(memory: Memory, tmp_path: Path) -> None:
    alice = memory.for_user("alice")
    alice.remember("Walks to work")
    assert alice.search(keyword_scope("alice"), touch=False) == []
    assert alice.search("walks", touch=False)


def test_every_ranking_statement_is_scoped(memory: Memory) -> None:
    store = _store(memory)
    alice, bob = memory.for_user("alice"), memory.for_user("bob")
    bob.remember_many([f"Bob brews tea number {n}" for n in range(40)])
    bob.add_turns([{"role": "user", "content": f"Tea tin {n}"} for n in range(40)],
                  session_id="bob:chat")
    alice.remember("Alice keeps her tea in a tin")
    alice.add_turn("user", "The tea tin is blue", session_id="alice:chat")
    with _rankings(store) as seen:
        assert [h.content for h in alice.search("tea", touch=False)] == [
            "Alice keeps her tea in a tin"]
        assert [h.content for h in alice.search_conversations("tea tin")] == [
            "The tea tin is blue"]
    assert seen and all(f'scope : "{keyword_scope("alice")}"' in sql for sql in seen)


def test_a_user_holding_most_rows_is_searched_without_the_token(tmp_path: Path) -> None:
    """Intersecting a long token list costs more than dropping the few others' rows."""
    with Memory.open(tmp_path / "share.db", embedder=None) as memory:
        memory.for_user("alice").remember_many(
            [f"Alice grows tea in pot {n}" for n in range(30)])
        memory.for_user("bob").remember_many(
            [f"Tea, tea and more tea, says Bob {n}" for n in range(10)])
    # A new store counts each user's share at their first search (a store that saw the
    # file grow from empty counts it again: test_a_share_is_counted_again_as_the_file_grows).
    with Memory.open(tmp_path / "share.db", embedder=None) as memory:
        _a_user_holding_most_rows(memory)


def _a_user_holding_most_rows(memory: Memory) -> None:
    store = _store(memory)
    alice, bob = memory.for_user("alice"), memory.for_user("bob")
    with _rankings(store) as seen:
        hits = alice.search("tea", touch=False, top_k=5)
    # Bob's rows rank first in the index; they are dropped, and Alice's best remain.
    assert len(hits) == 5 and all(h.content.startswith("Alice") for h in hits)
    assert seen and not any("scope :" in sql for sql in seen)
    found = store.keyword_search_items("alice", ["tea"], "or", ItemQuery(), 30)
    joined = store.keyword_search_items("alice", ["tea"], "or", ItemQuery(category="fact"), 30)
    assert sorted(found) == sorted(joined) and len(found) == 30
    assert {h.content[:3] for h in bob.search("tea", touch=False)} == {"Tea"}


def test_superseded_rows_at_the_top_fall_back_to_the_joined_ranking(memory: Memory) -> None:
    """The index is ranked alone first; when the filter then drops so many of its best
    rows (superseded items stay in the index) that too few remain, the joined
    ranking runs, and the answer is the same as if it had run at once."""
    store = _store(memory)
    alice = memory.for_user("alice")
    kept = [alice.remember(f"Oolong tea from shop {n}") for n in range(3)]
    for n in range(12):
        old = alice.remember(f"Tea tea tea, tea {n}")     # ranks above the kept ones
        alice.revise(old.id, f"Coffee now, number {n}")
    found = store.keyword_search_items("alice", ["tea"], "or", ItemQuery(), 3)
    assert sorted(i for i, _ in found) == sorted(i.id for i in kept)
    everything = store.keyword_search_items("alice", ["tea"], "or",
                                            ItemQuery(include_superseded=True), 3)
    assert not {i for i, _ in everything} & {i.id for i in kept}


@pytest.mark.parametrize("limit", [1, 4, 10, 50])
def test_the_ranking_equals_the_joined_one(memory: Memory, limit: int) -> None:
    store = _store(memory)
    alice = memory.for_user("alice")
    for n in range(30):
        alice.add_turn("user", f"{'tea ' * (n % 5 + 1)}and a biscuit {n}",
                       session_id="alice:chat")
    memory.for_user("bob").add_turns([{"role": "user", "content": "tea " * n}
                                      for n in range(1, 30)], session_id="bob:chat")
    fast = store.keyword_search_turns("alice", ["tea", "biscuit"], "or", TurnQuery(), limit)
    # A filter that narrows nothing takes the joined statement.
    joined = store.keyword_search_turns("alice", ["tea", "biscuit"], "or",
                                        TurnQuery(time_from="2000-01-01"), limit)
    assert len(fast) == min(limit, 30)
    assert [round(score, 9) for _, score in fast] == [round(score, 9) for _, score in joined]
    assert {i for i, _ in fast} <= {t.id for t in alice.session_history("alice:chat")}


def test_a_share_is_counted_again_as_the_file_grows(memory: Memory) -> None:
    store = _store(memory)
    alice, bob = memory.for_user("alice"), memory.for_user("bob")
    alice.remember("Alice grows tea")       # her dedup lookup counted her share: none
    bob.remember("Bob drinks tea")
    assert store._share("knowledge", "alice") == 0.0    # kept: the file is still small
    alice.remember_many([f"Alice's tea number {n}" for n in range(SHARE_RECOUNT_ROWS + 5)],
                        dedup=False)
    assert store._share("knowledge", "alice") == SCOPE_SHARE  # counted again: most rows
