"""search / recall: filters, AND-then-OR, superseded items, recall boost, hostile text."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest

from ledgermem import Hit, InvalidInput, Item, Memory, UserMemory
from tests.support import START, FakeClock, supersede


@pytest.fixture
def teas(alice: UserMemory, clock: FakeClock) -> dict[str, Item]:
    """Three items matching "green tea", made on days 0, 2 and 5."""
    made = {"sarah": alice.remember("Sarah prefers green tea", "preference", context="work",
                                    entity="person:sarah")}
    clock.advance(days=2)
    made["bob"] = alice.remember("Bob drinks green tea daily", "fact", context="personal",
                                 entity="Person: Bob", sensitive=True)
    clock.advance(days=3)
    made["reminder"] = alice.remember("Buy green tea for the office", "reminder",
                                      context="work")
    return made


def ids(hits: list[Hit]) -> set[str]:
    return {h.id for h in hits}


def test_search_finds_every_matching_item(alice: UserMemory, teas: dict[str, Item]) -> None:
    hits = alice.search("green tea")
    assert ids(hits) == {i.id for i in teas.values()}
    assert all(h.item is not None and h.turn is None for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_recall_is_search(alice: UserMemory, teas: dict[str, Item]) -> None:
    assert ids(alice.recall("green tea", touch=False)) == ids(alice.search("green tea",
                                                                           touch=False))


@pytest.mark.parametrize(("filters", "expected"), [
    ({"category": "preference"}, {"sarah"}),
    ({"category": "note"}, set()),
    ({"context": "work"}, {"sarah", "reminder"}),
    ({"context": "personal"}, {"bob"}),
    ({"entity": "Person: Bob"}, {"bob"}),
    ({"entity": "person:sarah"}, {"sarah"}),
    ({"sensitive": True}, {"bob"}),
    ({"sensitive": False}, {"sarah", "reminder"}),
    ({"time_from": START + timedelta(days=1)}, {"bob", "reminder"}),
    ({"time_to": "2026-06-04"}, {"sarah", "bob"}),
    ({"time_from": "2026-06-02", "time_to": START + timedelta(days=4)}, {"bob"}),
    ({"category": "fact", "context": "work"}, set()),
])
def test_search_filters_apply_before_ranking(alice: UserMemory, teas: dict[str, Item],
                                             filters: dict[str, object],
                                             expected: set[str]) -> None:
    hits = alice.search("green tea", **filters)  # type: ignore[arg-type]
    assert ids(hits) == {teas[name].id for name in expected}


def test_top_k_limits_hits_and_default_is_five(alice: UserMemory) -> None:
    for n in range(8):
        alice.remember(f"kettle fact {n}: " + " ".join(f"w{n}x{i}" for i in range(4)))
    assert len(alice.search("kettle", top_k=3)) == 3
    assert len(alice.search("kettle", top_k=100)) == 8
    assert len(alice.search("kettle")) == 5


def test_hits_explain_their_rank(alice: UserMemory, teas: dict[str, Item]) -> None:
    hit = alice.search("sarah", touch=False)[0]
    assert hit.id == teas["sarah"].id and hit.content == "Sarah prefers green tea"
    assert hit.why["keyword_rank"] == 1
    assert {"keyword_score", "rrf", "score"} <= set(hit.why)
    assert hit.why["score"] == pytest.approx(hit.score, abs=1e-6)


def test_no_match_returns_empty(alice: UserMemory, teas: dict[str, Item]) -> None:
    assert alice.search("espresso") == []


# AND, then OR ---------------------------------------------------------------------------

@pytest.fixture
def tea_party(alice: UserMemory) -> dict[str, Item]:
    return {
        "both": alice.remember("Hosts a tea ceremony every spring", "note", source="heuristic"),
        "tea": alice.remember("Tea party with grandma", "preference", confidence=1.0),
        "other": alice.remember("Graduation ceremony in June", "preference", confidence=1.0),
    }


def test_item_matching_all_words_is_found(alice: UserMemory,
                                          tea_party: dict[str, Item]) -> None:
    assert tea_party["both"].id in ids(alice.search("tea ceremony"))


def test_or_is_used_when_no_item_has_all_words(alice: UserMemory,
                                               tea_party: dict[str, Item]) -> None:
    hits = alice.search("party graduation")
    assert ids(hits) == {tea_party["tea"].id, tea_party["other"].id}


def test_partial_matches_follow_the_items_matching_every_word(
        alice: UserMemory, tea_party: dict[str, Item]) -> None:
    # AND hits first, then OR hits fill the candidate pool (measured on LoCoMo: 0.76
    # recall@10 against 0.69 for OR only when AND finds nothing; see docs/retrieval.md).
    hits = alice.search("tea ceremony", touch=False)
    assert hits[0].id == tea_party["both"].id
    assert ids(hits) == {tea_party["both"].id, tea_party["tea"].id, tea_party["other"].id}
    assert "all_terms_rank" in hits[0].why
    assert all("all_terms_rank" not in hit.why for hit in hits[1:])


# superseded -----------------------------------------------------------------------------

def test_superseded_items_are_excluded_unless_asked_for(
        mem: Memory, alice: UserMemory, clock: FakeClock) -> None:
    old = alice.remember("Lives in Lisbon")
    new = alice.remember("Moved from Lisbon to Porto in May", "fact")
    supersede(mem, "alice", old.id, new.id, clock.iso())
    assert ids(alice.search("Lisbon")) == {new.id}
    assert ids(alice.search("Lisbon", include_superseded=True)) == {old.id, new.id}
    assert alice.get(old.id).superseded_by == new.id
    assert not alice.get(old.id).active


# recall boost ---------------------------------------------------------------------------

def test_each_recalled_item_gains_confidence_and_a_use(
        alice: UserMemory, teas: dict[str, Item], clock: FakeClock) -> None:
    unrelated = alice.remember("Owns a grey cat")
    clock.advance(days=1)
    hits = alice.search("sarah")
    assert ids(hits) == {teas["sarah"].id}
    alice.flush()  # recall bookkeeping is applied in the background; flush applies it now
    recalled = alice.get(teas["sarah"].id)
    assert recalled.confidence == pytest.approx(0.82)
    assert (recalled.use_count, recalled.last_used_at) == (1, clock.iso())
    alice.search("sarah")
    alice.flush()
    assert alice.get(teas["sarah"].id).confidence == pytest.approx(0.84)
    assert alice.get(teas["sarah"].id).use_count == 2
    assert alice.get(unrelated.id) == unrelated
    assert alice.get(teas["bob"].id) == teas["bob"]


def test_recall_boost_is_capped_at_one(alice: UserMemory) -> None:
    item = alice.remember("Certain fact about kites", confidence=0.99)
    alice.search("kites")
    alice.flush()
    assert alice.get(item.id).confidence == 1.0
    alice.search("kites")
    alice.flush()
    assert alice.get(item.id).confidence == 1.0


def test_touch_false_only_looks(mem: Memory, alice: UserMemory, teas: dict[str, Item]) -> None:
    before = {i.id: alice.get(i.id) for i in teas.values()}
    events = alice.stats()["events"]
    assert len(alice.search("green tea", touch=False)) == 3
    assert {i: alice.get(i) for i in before} == before
    assert alice.stats()["events"] == events


def test_search_records_one_recall_event_naming_the_hits(
        mem: Memory, alice: UserMemory, teas: dict[str, Item]) -> None:
    events = alice.stats()["events"]
    hits = alice.search("green tea")
    again = alice.search("green tea")
    alice.flush()
    # Coalesced: two searches in one interval are one event, one use per item.
    assert alice.stats()["events"] == events + 1
    recalls = mem.store.events("alice", kinds=["memory.recalled"])
    assert len(recalls) == 1
    assert set(recalls[0].payload["ids"]) == ids(hits) == ids(again) == {
        i.id for i in teas.values()}
    assert {alice.get(i.id).use_count for i in teas.values()} == {1}


def test_a_query_that_matches_nothing_reinforces_nothing(
        mem: Memory, alice: UserMemory, teas: dict[str, Item]) -> None:
    before = {i.id: alice.get(i.id) for i in teas.values()}
    alice.search("zxqv qqqq blorf")
    alice.flush()
    assert {i: alice.get(i) for i in before} == before
    assert mem.store.events("alice", kinds=["memory.recalled"]) == []


def test_recalls_of_a_forgotten_user_leave_no_trace(mem: Memory, alice: UserMemory,
                                                    teas: dict[str, Item]) -> None:
    alice.search("green tea")
    alice.forget_user()
    alice.flush()
    assert mem.store.events("alice") == []


def test_search_rejects_bad_filters(alice: UserMemory, teas: dict[str, Item]) -> None:
    for bad in ({"category": "opinion"}, {"top_k": 0}, {"top_k": -1}, {"top_k": 10_001},
                {"entity": "no-colon"}, {"time_from": "not a time"}, {"time_to": "31/31/31"}):
        with pytest.raises(InvalidInput):
            alice.search("green tea", **bad)


# hostile query text ---------------------------------------------------------------------

HOSTILE = [
    "", " ", "\n\t\r", '"', '""', '"unbalanced', "'", "''", "*", "tea*", "*tea", "NEAR",
    "NEAR(tea coffee)", "NEAR(tea coffee, 2)", "tea NEAR/2 coffee", "AND", "OR", "NOT",
    "tea AND", "OR coffee", "NOT tea", "tea NOT", "AND OR NOT", "-", "-tea", "tea -coffee",
    "--", "^", "^tea", "tea^", "(", ")", "((tea)", "tea)", "(((", ")))", "{tea}", "[tea]",
    "col:tea", "content:tea", "entity:person", ":", "::", "\x00", "tea\x00coffee",
    "\x01\x02\x1b\x7f", "🎉", "tea 🍵", "👩‍👩‍👧", "\u200b", "\ufeff", "a" * 3000,
    "tea " * 200, "%_%", "'; DROP TABLE knowledge; --", "\\", "tea\\", "+", "tea + coffee",
    "~", "tea~", "@#$&|!?<>", "_", "__", "a_b", "ǅemal", "café", "日本語のテキスト", "ﷺ",
    "\U0010ffff",
]


@pytest.mark.parametrize("query", HOSTILE, ids=[repr(q)[:40] for q in HOSTILE])
def test_search_never_raises_on_query_syntax(mem: Memory, alice: UserMemory,
                                             query: str) -> None:
    alice.remember("Tea with coffee near the station, NOT before noon (and OR stuff)")
    alice.add_turn("user", "tea AND coffee NEAR the station")
    assert isinstance(alice.search(query), list)
    assert isinstance(alice.search_conversations(query), list)
    assert alice.stats()["items"] == 1  # the injection attempt is only ever a word


@pytest.mark.parametrize("query", [
    "NEAR", "station*", '"station"', "-station", "(station", "station)", "^station",
    "NOT station", "station:", "STATION",
])
def test_fts_operators_in_queries_are_matched_as_plain_words(alice: UserMemory,
                                                             query: str) -> None:
    item = alice.remember("Meet near the station at noon")
    assert ids(alice.search(query)) == {item.id}


def test_operator_words_are_searchable_content(alice: UserMemory) -> None:
    item = alice.remember("rock and roll tonight")
    alice.remember("completely unrelated")
    assert ids(alice.search("AND")) == {item.id}


def test_scores_are_the_same_in_every_process() -> None:
    """A hit's score is its fused score over that of an ideal row, whose retrievers'
    weights were summed in a set's order: which changes with each process's string
    hashing, and so did the last bit of scores (a server's workers, or two runs,
    disagreed). Eight hash seeds, one ideal."""
    code = ("from ledgermem.retrieval.hybrid import Searcher, SearchOptions\n"
            "searcher = Searcher(None, options=SearchOptions())\n"
            "print(repr(searcher._ideal(dict.fromkeys(['keyword', 'vector', 'all_terms', "
            "'items']), window=object(), speaker=True)))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}
                           ).stdout for seed in range(8)}
    assert len(seen) == 1
