"""stats, all_knowledge, history, activity_timeline, recent_errors, entities, contexts."""

from __future__ import annotations

import pytest

from ledgermem import InvalidInput, Item, Memory, NotFound, UserMemory
from tests.support import FakeClock, set_embedding, supersede


@pytest.fixture
def library(mem: Memory, alice: UserMemory, clock: FakeClock) -> dict[str, Item]:
    """Six items over six days; "tea" is later superseded by "tea2"."""
    made: dict[str, Item] = {}
    specs = [
        ("tea", "Prefers green tea", "preference", "personal", None, False, "user"),
        ("boss", "Sarah Chen is her manager", "fact", "work", "person:sarah_chen", False,
         "tool"),
        ("standup", "Standup at nine with Sarah", "note", "work", "person:sarah_chen", False,
         "heuristic"),
        ("pin", "Bank PIN hint is her birth year", "fact", "personal", None, True, "user"),
        ("tea2", "Now prefers oolong", "preference", "personal", None, False, "llm_extract"),
        ("err", "Calendar API rejects ISO weeks", "error", "work", "tool:calendar", False,
         "error_auto"),
    ]
    for key, content, category, context, entity, sensitive, source in specs:
        made[key] = alice.remember(content, category, context=context, entity=entity,
                                   sensitive=sensitive, source=source)
        clock.advance(days=1)
    supersede(mem, "alice", made["tea"].id, made["tea2"].id, clock.iso())
    return made


def page_ids(page: dict[str, object]) -> list[str]:
    return [i.id for i in page["items"]]  # type: ignore[attr-defined]


def test_stats_counts_everything(mem: Memory, alice: UserMemory, bob: UserMemory,
                                 library: dict[str, Item]) -> None:
    alice.add_turn("user", "hello", session_id="s1")
    alice.add_turn("user", "hello again", session_id="s2")
    alice.log_tool_call("calendar", {"week": "2026-W23"})
    bob.remember("Bob's own fact")
    set_embedding(mem, library["boss"].id, library["boss"].content)
    stats = alice.stats()
    assert stats == {
        "items": 5, "items_total": 6, "items_unembedded": 5, "turns": 2, "sessions": 2,
        "tool_calls": 1, "events": 6 + 1 + 2 + 1,
        "by_category": {"fact": 2, "note": 1, "preference": 1, "error": 1},
        "embedder": None, "llm": None,
    }


def test_all_knowledge_lists_active_items_newest_first_with_total(
        alice: UserMemory, library: dict[str, Item]) -> None:
    page = alice.all_knowledge()
    assert page_ids(page) == [library[k].id for k in ("err", "tea2", "pin", "standup", "boss")]
    assert (page["total"], page["offset"], page["limit"]) == (5, 0, 50)


def test_all_knowledge_include_superseded(alice: UserMemory, library: dict[str, Item]) -> None:
    page = alice.all_knowledge(include_superseded=True, sort="created_at", order="asc")
    assert page_ids(page) == [i.id for i in library.values()]
    assert page["total"] == 6


@pytest.mark.parametrize(("filters", "expected"), [
    ({"category": "fact"}, ["pin", "boss"]),
    ({"context": "work"}, ["err", "standup", "boss"]),
    ({"entity": "Person: Sarah Chen"}, ["standup", "boss"]),
    ({"sensitive": True}, ["pin"]),
    ({"sensitive": False}, ["err", "tea2", "standup", "boss"]),
    ({"source": "user"}, ["pin"]),
    ({"category": "fact", "context": "work"}, ["boss"]),
    ({"category": "skill"}, []),
])
def test_all_knowledge_filters(alice: UserMemory, library: dict[str, Item],
                               filters: dict[str, object], expected: list[str]) -> None:
    page = alice.all_knowledge(**filters)  # type: ignore[arg-type]
    assert page_ids(page) == [library[k].id for k in expected]
    assert page["total"] == len(expected)


def test_all_knowledge_sort_and_order(alice: UserMemory, library: dict[str, Item]) -> None:
    by_conf = alice.all_knowledge(sort="confidence", order="asc")["items"]
    assert [i.confidence for i in by_conf] == sorted(i.confidence for i in by_conf)
    assert by_conf[0].id == library["standup"].id  # heuristic, 0.3
    by_cat = alice.all_knowledge(sort="category", order="desc")["items"]
    assert [i.category for i in by_cat] == sorted((i.category for i in by_cat), reverse=True)
    oldest = alice.all_knowledge(sort="created_at", order="asc")["items"][0]
    assert oldest.id == library["boss"].id


def test_all_knowledge_pages_with_offset_and_limit(alice: UserMemory,
                                                  library: dict[str, Item]) -> None:
    everything = page_ids(alice.all_knowledge(limit=None))
    assert len(everything) == 5
    pages = [alice.all_knowledge(offset=o, limit=2) for o in (0, 2, 4, 6)]
    assert [page_ids(p) for p in pages] == [everything[0:2], everything[2:4], everything[4:],
                                           []]
    assert {p["total"] for p in pages} == {5}
    assert page_ids(alice.all_knowledge(offset=3, limit=None)) == everything[3:]


@pytest.mark.parametrize("bad", [
    {"sort": "content"}, {"sort": "id; DROP TABLE knowledge"}, {"order": "up"},
    {"order": "DESC"}, {"offset": -1}, {"limit": 0}, {"entity": "sarah"},
])
def test_all_knowledge_rejects_bad_arguments(alice: UserMemory, library: dict[str, Item],
                                             bad: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        alice.all_knowledge(**bad)  # type: ignore[arg-type]
    assert alice.all_knowledge()["total"] == 5


def test_history_lists_every_change_oldest_first(alice: UserMemory, clock: FakeClock) -> None:
    item = alice.remember("Drinks coffee")
    clock.advance(days=1)
    alice.update(item.id, content="Drinks decaf coffee")
    alice.update_confidence(item.id, 0.9)
    alice.mark_reminded(item.id)
    events = alice.history(item.id)
    assert [e.kind for e in events] == ["memory.added"] + ["memory.updated"] * 3
    assert [e.payload.get("reason") for e in events[1:]] == ["update", "confidence",
                                                             "reminded"]
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert {e.subject_id for e in events} == {item.id}


def test_history_of_unknown_id_raises_not_found(alice: UserMemory) -> None:
    with pytest.raises(NotFound):
        alice.history("no-such-id")


def test_activity_timeline_counts_events_per_day_and_kind(alice: UserMemory,
                                                          clock: FakeClock) -> None:
    alice.remember("Day one fact")
    alice.add_turn("user", "day one chat")
    alice.add_turn("assistant", "day one answer")
    clock.advance(days=1)
    alice.remember("Day two fact")
    alice.search("fact")
    alice.flush()
    assert alice.activity_timeline() == [
        {"day": "2026-06-01", "kind": "memory.added", "count": 1},
        {"day": "2026-06-01", "kind": "turn.assistant", "count": 1},
        {"day": "2026-06-01", "kind": "turn.user", "count": 1},
        {"day": "2026-06-02", "kind": "memory.added", "count": 1},
        {"day": "2026-06-02", "kind": "memory.recalled", "count": 1},
    ]
    clock.advance(days=40)
    alice.remember("Much later")
    assert alice.activity_timeline(days=30) == [
        {"day": "2026-07-12", "kind": "memory.added", "count": 1}]


def test_recent_errors_combines_error_items_and_failed_calls(alice: UserMemory) -> None:
    alice.remember("Never call the billing API on Sundays", "error")
    alice.log_tool_call("billing", success=False, error="closed on Sunday")
    alice.log_tool_call("billing", success=True)
    errors = alice.recent_errors()
    assert {i.content for i in errors["items"]} == {
        "Never call the billing API on Sundays", "Tool billing failed: closed on Sunday"}
    assert [c.error for c in errors["tool_calls"]] == ["closed on Sunday"]


def test_entities_and_contexts_count_active_items(alice: UserMemory,
                                                  library: dict[str, Item]) -> None:
    assert alice.entities() == [("person:sarah_chen", 2), ("tool:calendar", 1)]
    assert alice.contexts() == [("work", 3), ("personal", 2)]  # superseded "tea" not counted


def test_by_category_and_by_entity(alice: UserMemory, library: dict[str, Item]) -> None:
    assert [i.id for i in alice.by_category("fact")] == [library["pin"].id, library["boss"].id]
    assert [i.id for i in alice.by_category("preference")] == [library["tea2"].id]
    assert len(alice.by_category("fact", limit=1)) == 1
    assert [i.id for i in alice.by_entity("Person: Sarah Chen")] == [
        library["standup"].id, library["boss"].id]
    assert alice.by_entity("person:nobody") == []
    with pytest.raises(InvalidInput):
        alice.by_category("opinion")
    with pytest.raises(InvalidInput):
        alice.by_entity("sarah")
