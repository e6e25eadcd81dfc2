"""Keyword ``or`` search with common terms: BM25 over the rare terms, then the newest
rows holding only a common one (both backends rank alike)."""

from __future__ import annotations

import pytest

import ledgermem.store.sql_keyword as sql_keyword
from ledgermem import Memory, UserMemory
from ledgermem.store.base import TurnQuery
from ledgermem.types import ItemQuery
from tests.support import FakeClock


@pytest.fixture
def small_cutoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyword in more than 3 rows is common (the defaults need thousands of rows)."""
    monkeypatch.setattr(sql_keyword, "COMMON_TERM_MIN_ROWS", 3)
    monkeypatch.setattr(sql_keyword, "COMMON_TERM_SHARE", 0.0)


@pytest.fixture
def teas(alice: UserMemory, clock: FakeClock) -> dict[str, str]:
    """"tea" is in four items (common at a cut-off of 3), "oolong" in one; oldest first."""
    made = {}
    for name, text in [("heavy", "tea tea tea and tea"), ("oolong", "Oolong is a kind of drink"),
                       ("time", "tea time at four"), ("again", "tea again"),
                       ("more", "more tea please")]:
        made[name] = alice.remember(text, "note").id
        clock.advance(minutes=1)
    return made


def keyword(mem: Memory, terms: list[str], mode: str = "or") -> list[str]:
    found = mem.store.keyword_search_items("alice", terms, mode, ItemQuery(), 10)  # type: ignore[arg-type]
    return [doc_id for doc_id, _ in found]


def test_rare_terms_rank_first_then_common_only_rows_newest_first(
        small_cutoff: None, mem: Memory, teas: dict[str, str]) -> None:
    assert keyword(mem, ["tea", "oolong"]) == [
        teas["oolong"], teas["more"], teas["again"], teas["time"], teas["heavy"]]


def test_a_lone_common_term_lists_newest_first(small_cutoff: None, mem: Memory,
                                               teas: dict[str, str]) -> None:
    assert keyword(mem, ["tea"]) == [teas["more"], teas["again"], teas["time"], teas["heavy"]]
    assert keyword(mem, ["tea"], "and") == keyword(mem, ["tea"])


def test_and_still_ranks_by_bm25(small_cutoff: None, mem: Memory,
                                 teas: dict[str, str]) -> None:
    assert keyword(mem, ["tea", "time"], "and") == [teas["time"]]


def test_and_of_common_terms_lists_newest_first(small_cutoff: None, mem: Memory,
                                                alice: UserMemory, clock: FakeClock,
                                                teas: dict[str, str]) -> None:
    """Every term common: the rows holding them all, newest first, unscored (ranking
    them all could mean scoring as many rows as a common term is in)."""
    newer = []
    for n in range(3):
        newer.append(alice.remember(f"more tea, cup {n}", "note").id)
        clock.advance(minutes=1)
    alice.remember("more cake", "note")              # holds only one of the two
    found = mem.store.keyword_search_items("alice", ["tea", "more"], "and", ItemQuery(), 10)
    assert found == [(doc_id, 0.0) for doc_id in [*reversed(newer), teas["more"]]]
    # Dedup's ``two`` still ranks by BM25: a short restatement comes first, not the
    # newest row.
    two = mem.store.keyword_search_items("alice", ["tea", "more"], "two", ItemQuery(), 10)
    assert {doc_id for doc_id, _ in two} == {*newer, teas["more"]}
    assert all(score > 0 for _, score in two)
    assert two[0][0] == teas["more"]                  # "more tea please": the shortest


def test_below_the_cutoff_or_is_plain_bm25(mem: Memory, teas: dict[str, str]) -> None:
    found = mem.store.keyword_search_items("alice", ["tea", "oolong"], "or", ItemQuery(), 10)
    assert found[0][0] == teas["oolong"]  # the rarer word weighs most
    assert [score for _, score in found] == sorted((score for _, score in found), reverse=True)
    assert all(score > 0 for _, score in found)
    assert found[1][0] == teas["heavy"]  # "tea" four times outranks the single ones


def test_common_only_rows_respect_filters_and_users(
        small_cutoff: None, mem: Memory, alice: UserMemory, teas: dict[str, str]) -> None:
    bob = mem.for_user("bob")
    for _ in range(3):
        bob.remember("tea for bob", "note")
    assert set(keyword(mem, ["tea"])) == {teas["heavy"], teas["time"], teas["again"],
                                          teas["more"]}
    kept = mem.store.keyword_search_items("alice", ["tea", "oolong"], "or",
                                          ItemQuery(ids=(teas["time"], teas["heavy"])), 10)
    assert [doc_id for doc_id, _ in kept] == [teas["time"], teas["heavy"]]


def test_search_finds_rows_through_common_terms(small_cutoff: None, alice: UserMemory,
                                                teas: dict[str, str]) -> None:
    hits = alice.search("oolong tea", top_k=5, touch=False)
    assert hits[0].id == teas["oolong"]
    assert {h.id for h in hits} == set(teas.values())


def test_turns_use_the_same_policy(small_cutoff: None, mem: Memory, alice: UserMemory,
                                   clock: FakeClock) -> None:
    made = []
    # One session each: a turn's neighbours' text is indexed with it.
    for n, text in enumerate(["tea first", "tea second", "oolong talk", "tea third",
                              "tea fourth"]):
        made.append(alice.add_turn("user", text, session_id=f"s{n}").id)
        clock.advance(minutes=1)
    found = mem.store.keyword_search_turns("alice", ["tea", "oolong"], "or", TurnQuery(), 10)
    assert [doc_id for doc_id, _ in found] == [made[2], made[4], made[3], made[1], made[0]]
