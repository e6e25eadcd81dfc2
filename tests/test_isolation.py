"""One user's memory is invisible and untouchable through another user's handle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledgermem import Item, Memory, NotFound, UserMemory
from tests.support import snapshot

SECRET = "Alice's locker code is quartz-7431"


@pytest.fixture
def alices(alice: UserMemory) -> Item:
    item = alice.remember(SECRET, "fact", entity="place:gym", due_at="tomorrow",
                          source="heuristic")
    alice.add_turn("user", "my locker code is quartz-7431", session_id="shared-session")
    alice.log_tool_call("locker", {"code": "quartz-7431"}, success=False, error="jammed")
    return item


ATTEMPTS: dict[str, Callable[[UserMemory, str], Any]] = {
    "get": lambda u, i: u.get(i),
    "update": lambda u, i: u.update(i, content="hijacked"),
    "update_confidence": lambda u, i: u.update_confidence(i, 0.0),
    "mark_reminded": lambda u, i: u.mark_reminded(i),
    "forget": lambda u, i: u.forget(i),
    "history": lambda u, i: u.history(i),
}


@pytest.mark.parametrize("attempt", ATTEMPTS.values(), ids=ATTEMPTS.keys())
def test_another_user_gets_not_found_and_changes_nothing(
        mem: Memory, alices: Item, bob: UserMemory, attempt: Callable[[UserMemory, str], Any]
) -> None:
    before = snapshot(mem)
    with pytest.raises(NotFound):
        attempt(bob, alices.id)
    assert snapshot(mem) == before


def test_another_users_reads_never_show_alices_data(mem: Memory, alices: Item,
                                                    bob: UserMemory) -> None:
    bob.remember("Bob's unrelated fact about darts")
    for query in (SECRET, "locker code quartz", "quartz-7431", "Alice", "locker", "jammed"):
        hits = bob.search(query, top_k=100, touch=False)
        assert alices.id not in {h.id for h in hits}
        assert {h.item.user_id for h in hits if h.item} <= {"bob"}
        assert bob.search_conversations(query) == []
    assert bob.search_conversations() == []
    assert bob.session_history("shared-session") == []
    assert bob.recent_conversations() == []
    assert bob.sessions() == []
    assert [i.content for i in bob.all_knowledge(include_superseded=True)["items"]] == [
        "Bob's unrelated fact about darts"]
    assert bob.by_category("error") == [] and bob.by_entity("place:gym") == []
    assert bob.upcoming(365) == []
    assert bob.entities() == [] and bob.contexts() == [("global", 1)]
    assert bob.tool_errors() == [] and bob.tool_stats() == []
    assert bob.recent_errors() == {"items": [], "tool_calls": []}
    assert bob.activity_timeline() == [
        {"day": "2026-06-01", "kind": "memory.added", "count": 1}]
    stats = bob.stats()
    assert (stats["items_total"], stats["turns"], stats["tool_calls"], stats["events"]) == (
        1, 0, 0, 1)


def test_another_users_bulk_operations_leave_alice_alone(
        mem: Memory, alice: UserMemory, alices: Item, bob: UserMemory, clock: Any) -> None:
    alice_before = alice.get(alices.id)
    assert bob.forget_by_source("heuristic") == 0
    clock.advance(days=400)
    assert bob.apply_confidence_decay() == 0
    assert bob.prune(days=1, min_confidence=1.0) == {"turns": 0, "tool_calls": 0, "items": 0}
    assert bob.forget_user() == 0
    assert alice.get(alices.id) == alice_before
    assert len(alice.recent_conversations()) == 1 and len(alice.tool_errors()) == 1


def test_the_same_text_for_two_users_is_two_items(alice: UserMemory, alices: Item,
                                                  bob: UserMemory) -> None:
    bobs = bob.remember(SECRET, "fact", entity="place:gym")
    assert bobs.id != alices.id
    assert alice.get(alices.id) == alices
    assert [h.id for h in bob.search("quartz", touch=False)] == [bobs.id]
    assert [h.id for h in alice.search("quartz", touch=False)] == [alices.id]


def test_handles_of_one_user_share_memory_across_channels(mem: Memory, alices: Item) -> None:
    telegram = mem.for_user("alice", session_id="alice:telegram")
    planner = mem.for_user("alice", agent_id="planner", context="work")
    assert telegram.get(alices.id) == alices
    assert [h.id for h in planner.search("quartz", touch=False)] == [alices.id]


def test_vector_search_never_crosses_users_or_returns_forgotten_items(
        vector_mem: Memory) -> None:
    alice, bob = vector_mem.for_user("alice"), vector_mem.for_user("bob")
    mine = [alice.remember(f"Alice plans a trip to Lisbon number {n}") for n in range(3)]
    gone = alice.remember("Alice's locker code quartz 7431")
    bobs = bob.remember("Bob plans a trip to Lisbon too")
    vector_mem.flush()
    alice.forget(gone.id)
    for query in ("trip to Lisbon", "locker code quartz", "Alice plans a trip"):
        found = {h.id for h in bob.search(query, top_k=50, touch=False)}
        assert found <= {bobs.id}
        found = {h.id for h in alice.search(query, top_k=50, touch=False)}
        assert gone.id not in found and found <= {i.id for i in mine}
    hit = alice.search("Lisbon trip", touch=False)[0]
    assert "vector_rank" in hit.why  # the vector path really ran
