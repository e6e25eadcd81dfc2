"""update, update_confidence, mark_reminded: only the given fields change."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ledgermem import InvalidInput, Item, Memory, UserMemory
from tests.support import FakeClock, event_count, set_embedding, stored_embedding


@pytest.fixture
def item(alice: UserMemory, clock: FakeClock) -> Item:
    made = alice.remember(
        "Sarah Chen is her manager", "fact", domain="work", source="user", context="work",
        entity="person:sarah_chen", due_at="2026-12-01", metadata={"origin": "chat"})
    clock.advance(days=1)
    return made


UPDATES = [
    ("content", "Sarah Chen manages the platform team", "Sarah Chen manages the platform team"),
    ("category", "note", "note"),
    ("domain", "hr", "hr"),
    ("domain", None, None),
    ("confidence", 0.25, 0.25),
    ("context", "personal", "personal"),
    ("entity", "Person: Sarah  Chen-Lee", "person:sarah_chen-lee"),
    ("entity", None, None),
    ("sensitive", True, True),
    ("due_at", "1 Jan 2027 09:30", "2027-01-01T09:30:00.000000+00:00"),
    ("due_at", None, None),
    ("metadata", {"k": "v"}, {"origin": "chat", "k": "v"}),
]


@pytest.mark.parametrize(("field", "value", "expected"), UPDATES,
                         ids=[f"{f}={v!r}" for f, v, _ in UPDATES])
def test_update_changes_only_the_given_field_and_sets_updated_at(
        alice: UserMemory, item: Item, clock: FakeClock, field: str, value: object,
        expected: object) -> None:
    updated = alice.update(item.id, **{field: value})  # type: ignore[arg-type]
    assert getattr(updated, field) == expected
    assert updated.updated_at == clock.iso() != item.updated_at
    untouched = {f.name for f in dataclasses.fields(Item)} - {field, "updated_at", "reminded_at",
                                                                 "written"}
    for name in untouched:
        assert getattr(updated, name) == getattr(item, name), name
    assert alice.get(item.id) == updated


def test_update_records_the_change_and_the_previous_content(alice: UserMemory,
                                                            item: Item) -> None:
    alice.update(item.id, content="Sarah Chen moved to Berlin")
    last = alice.history(item.id)[-1]
    assert last.kind == "memory.updated"
    assert last.payload["changes"]["content"] == "Sarah Chen moved to Berlin"
    assert last.payload["previous"] == "Sarah Chen is her manager"


def test_update_without_fields_changes_nothing(mem: Memory, alice: UserMemory,
                                               item: Item) -> None:
    before = event_count(mem)
    assert alice.update(item.id) == item
    assert event_count(mem) == before


def test_update_of_due_at_clears_reminded_at(alice: UserMemory, item: Item) -> None:
    assert alice.mark_reminded(item.id).reminded_at is not None
    assert alice.update(item.id, due_at="2027-02-01").reminded_at is None


def test_content_change_clears_the_embedding(mem: Memory, alice: UserMemory,
                                             item: Item) -> None:
    set_embedding(mem, item.id, item.content)
    assert stored_embedding(mem, item.id) is not None
    alice.update(item.id, content="Sarah Chen is her former manager")
    assert stored_embedding(mem, item.id) is None


def test_other_changes_keep_the_embedding(mem: Memory, alice: UserMemory, item: Item) -> None:
    set_embedding(mem, item.id, item.content)
    alice.update(item.id, confidence=0.5, category="note", sensitive=True)
    alice.update_confidence(item.id, 0.9)
    assert stored_embedding(mem, item.id) is not None


def test_update_with_long_content_truncates_and_flags(alice: UserMemory, item: Item) -> None:
    updated = alice.update(item.id, content="y" * 2100)
    assert updated.content == "y" * 2000
    assert updated.metadata == {"origin": "chat", "truncated": True, "original_length": 2100}


def test_truncation_flag_goes_away_when_content_is_replaced_by_a_short_one(
        alice: UserMemory) -> None:
    # Regression (fixed): UserMemory.update only adds metadata when the
    # new content is cut; it never removes the old flags, so an item whose content is now 12
    # characters still claims truncated=True, original_length=2500. The dedup path in remember() has
    # the same flaw. Suggested fix: when content changes, drop "truncated"/"original_length" from
    # the merged metadata unless the new text was cut.
    long = alice.remember("z" * 2500)
    short = alice.update(long.id, content="now it's short")
    assert "truncated" not in short.metadata
    assert "original_length" not in short.metadata


@pytest.mark.parametrize(("given", "stored"), [
    (0.42, 0.42), (1.7, 1.0), (-3, 0.0), (1, 1.0), (0, 0.0), (math.inf, 1.0), (-math.inf, 0.0),
])
def test_update_confidence_is_clamped_to_0_1(alice: UserMemory, item: Item, clock: FakeClock,
                                             given: float, stored: float) -> None:
    updated = alice.update_confidence(item.id, given)
    assert updated.confidence == stored
    assert updated.updated_at == clock.iso()
    assert alice.get(item.id).confidence == stored


@pytest.mark.parametrize("bad", ["high", None, math.nan, [0.5]])
def test_update_confidence_rejects_non_numbers(mem: Memory, alice: UserMemory, item: Item,
                                               bad: object) -> None:
    before = event_count(mem)
    with pytest.raises(InvalidInput):
        alice.update_confidence(item.id, bad)  # type: ignore[arg-type]
    assert event_count(mem) == before
    assert alice.get(item.id) == item


def test_mark_reminded_sets_reminded_at(alice: UserMemory, item: Item, clock: FakeClock) -> None:
    reminded = alice.mark_reminded(item.id)
    assert reminded.reminded_at == clock.iso()
    assert alice.history(item.id)[-1].payload["reason"] == "reminded"
