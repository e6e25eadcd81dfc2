"""search_all: knowledge and conversations in one ranked list (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ledgermem import Hit, InvalidInput, Item, Turn, UserMemory
from ledgermem.retrieval.hybrid import merge_hits
from tests.support import START, FakeClock


@pytest.fixture
def kayak(alice: UserMemory, bob: UserMemory, clock: FakeClock) -> dict[str, str]:
    """Knowledge and turns about kayaking (and one of each about something else)."""
    made = {
        "fact": alice.remember("Owns a red sea kayak", "fact", context="personal").id,
        "plan": alice.remember("Plans a kayak trip to the lakes", "note", context="work").id,
        "tea": alice.remember("Prefers green tea", "preference").id,
    }
    clock.advance(hours=1)
    made["said"] = alice.add_turn("user", "I took the kayak out on the lake today",
                                  session_id="alice:phone").id
    made["asked"] = alice.add_turn("assistant", "How was the water for kayaking?",
                                   session_id="alice:web").id
    made["other"] = alice.add_turn("user", "Tea time!", session_id="alice:tv").id
    bob.remember("Bob sells kayaks")
    bob.add_turn("user", "Bob's kayak shop opens at nine")
    return made


def test_one_list_of_items_and_turns_best_first(alice: UserMemory,
                                               kayak: dict[str, str]) -> None:
    hits = alice.search_all("kayak", top_k=10, touch=False)
    assert {h.id for h in hits} == {kayak[k] for k in ("fact", "plan", "said", "asked")}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for hit in hits:
        assert (hit.item is None) != (hit.turn is None)
        assert hit.item is None or hit.item.user_id == "alice"
        assert hit.turn is None or hit.turn.user_id == "alice"
        source = "knowledge_rank" if hit.item is not None else "conversation_rank"
        other = "conversation_rank" if hit.item is not None else "knowledge_rank"
        assert source in hit.why and other not in hit.why
        assert hit.why["score"] == pytest.approx(hit.score, abs=1e-6)


def test_each_list_keeps_its_own_order_and_scores(alice: UserMemory,
                                                  kayak: dict[str, str]) -> None:
    items = alice.search("kayak", top_k=10, touch=False)
    turns = alice.search_conversations("kayak", limit=10)
    merged = alice.search_all("kayak", top_k=10, touch=False)
    assert [h.id for h in merged if h.item] == [h.id for h in items]
    assert [h.id for h in merged if h.turn] == [h.id for h in turns]
    scores = {h.id: h.score for h in [*items, *turns]}
    assert all(h.score == scores[h.id] for h in merged)
    assert [h.why["knowledge_rank"] for h in merged if h.item] == [1, 2]


def test_top_k_cuts_the_merged_list(alice: UserMemory, kayak: dict[str, str]) -> None:
    assert len(alice.search_all("kayak", top_k=3, touch=False)) == 3
    assert len(alice.search_all("kayak", touch=False)) == 4   # the default limit is 5
    assert alice.search_all("snowboard", touch=False) == []
    with pytest.raises(InvalidInput):
        alice.search_all("kayak", top_k=0)


def test_filters_apply_to_their_own_kind(alice: UserMemory, kayak: dict[str, str]) -> None:
    by_context = alice.search_all("kayak", top_k=10, context="work", touch=False)
    assert {h.id for h in by_context} == {kayak["plan"], kayak["said"], kayak["asked"]}
    by_session = alice.search_all("kayak", top_k=10, session_id="alice:phone", touch=False)
    assert {h.id for h in by_session} == {kayak["fact"], kayak["plan"], kayak["said"]}
    by_category = alice.search_all("kayak", top_k=10, category="note", touch=False)
    assert {h.id for h in by_category} == {kayak["plan"], kayak["said"], kayak["asked"]}
    later = alice.search_all("kayak", top_k=10, time_from=START.replace(minute=30),
                             touch=False)
    assert {h.id for h in later} == {kayak["said"], kayak["asked"]}


def test_only_the_items_returned_are_recalled(alice: UserMemory,
                                             kayak: dict[str, str]) -> None:
    hits = alice.search_all("kayak", top_k=10)
    alice.flush()
    assert all(alice.get(h.id).use_count == 1 for h in hits if h.item)
    assert alice.get(kayak["tea"]).use_count == 0
    alice.search_all("kayak", top_k=10, touch=False)
    alice.flush()
    assert alice.get(kayak["fact"]).use_count == 1


def test_time_expressions_work_across_both(alice: UserMemory, clock: FakeClock) -> None:
    clock.now = datetime(2026, 5, 27, tzinfo=UTC)          # last week, seen from START
    item = alice.remember("Replaced the bike chain")
    turn = alice.add_turn("user", "The bike shop fixed my brakes")
    clock.now = datetime(2026, 4, 1, tzinfo=UTC)
    alice.remember("Bought a bike helmet")
    alice.add_turn("user", "Cleaned the bike after the rain")
    clock.now = START
    hits = alice.search_all("bike last week", top_k=10, time_mode="filter", touch=False)
    assert {h.id for h in hits} == {item.id, turn.id}
    boosted = alice.search_all("bike last week", top_k=10, touch=False)
    assert len(boosted) == 4
    assert {h.id for h in boosted[:2]} == {item.id, turn.id}


def test_merge_prefers_knowledge_on_ties_and_keeps_list_order() -> None:
    def item(n: int) -> Item:
        return Item(id=f"i{n}", user_id="u", category="fact", content=f"item {n}",
                    source="user", confidence=0.8, created_at="t", updated_at="t")

    def turn(n: int) -> Turn:
        return Turn(id=f"t{n}", user_id="u", session_id="s", role="user",
                    content=f"turn {n}", ts="t")

    knowledge = [Hit(score=0.9, item=item(1)), Hit(score=0.5, item=item(2))]
    conversations = [Hit(score=0.9, turn=turn(1)), Hit(score=0.8, turn=turn(2)),
                     Hit(score=0.1, turn=turn(3))]
    merged = merge_hits(knowledge, conversations)
    assert [h.id for h in merged] == ["i1", "t1", "t2", "i2", "t3"]
    assert [h.why.get("knowledge_rank") for h in merged] == [1, None, None, 2, None]
    assert merge_hits([], []) == []
