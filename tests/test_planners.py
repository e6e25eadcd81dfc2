"""The pure planners of ``domain.planners``: hand-built items in, ledger events out."""

from __future__ import annotations

import dataclasses

import pytest

from ledgermem import Event, InvalidInput, Item, Scope
from ledgermem.domain.events import ItemAdded, Kind, new_event
from ledgermem.domain.planners import (
    Revision,
    plan_invalidate,
    plan_merge,
    plan_restore,
    plan_revise,
)
from ledgermem.domain.projection import replay

NOW, LATER = "2026-06-01T12:00:00.000000+00:00", "2026-06-02T12:00:00.000000+00:00"
SCOPE = Scope("alice")


def item(item_id: str = "i1", **fields: object) -> Item:
    base = Item(id=item_id, user_id="alice", category="fact", content="Lives in Lisbon",
                source="user", confidence=0.8, created_at=NOW, updated_at=NOW,
                valid_from=NOW)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_a_revision_supersedes_the_old_version_and_replays_to_one_active() -> None:
    old = item(metadata={"turn_ids": ["t0"], "kept": 1})
    events, new = plan_revise(SCOPE, old, Revision(text="Lives in Porto", metadata={},
                                                   source="llm_extract", reason="moved",
                                                   turn_ids=["t9"]),
                              new_id="i2", now=LATER)
    assert [e.kind for e in events] == ["memory.added", "memory.superseded"]
    assert new.metadata == {"kept": 1, "supersedes": "i1", "turn_ids": ["t9"]}
    assert new.confidence == 0.8 and new.valid_from == LATER
    added = [dataclasses.replace(e, ts=NOW) for e in events]
    items = replay([_added(old), *added], LATER)
    assert [i.id for i in items.values() if i.active] == ["i2"]
    assert items["i1"].superseded_by == "i2" and items["i1"].valid_to == LATER


def test_only_an_active_item_can_be_revised_or_invalidated() -> None:
    gone = item(valid_to=NOW)
    with pytest.raises(InvalidInput):
        plan_revise(SCOPE, gone, Revision(text="x", metadata={}, source="user",
                                          reason="r"), new_id="i2", now=LATER)
    with pytest.raises(InvalidInput):
        plan_invalidate(SCOPE, gone, reason="r", source=None, turn_ids=None, at=None,
                        now=LATER)


def test_a_restore_invalidates_every_other_active_version() -> None:
    old, newer, newest = item("a", valid_to=NOW), item("b"), item("c")
    events = plan_restore(SCOPE, old, [newer, newest], reason="undo", now=LATER)
    assert [(e.kind, e.subject_id) for e in events] == [
        ("memory.restored", "a"), ("memory.invalidated", "b"), ("memory.invalidated", "c")]
    assert plan_restore(SCOPE, newer, [], reason="undo", now=LATER) == []


def test_a_merge_keeps_the_higher_confidence_and_never_clears_a_flag() -> None:
    twin = item(confidence=0.9, sensitive=True, metadata={"a": 1})
    [event] = plan_merge(SCOPE, twin, text="Lives in Lisbon", confidence=0.4,
                         sensitive=False, due=None, metadata={"b": 2}, source="tool",
                         reason=None, now=LATER)
    assert event.payload["changes"] == {"updated_at": LATER, "confidence": 0.9,
                                        "metadata": {"a": 1, "b": 2}}
    assert event.payload["reason"] == "dedup" and "previous" not in event.payload


def _added(one: Item) -> Event:
    return new_event(SCOPE, NOW, Kind.MEMORY_ADDED, ItemAdded(one), subject_id=one.id)
