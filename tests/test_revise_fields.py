"""revise: fields left out are the old version's, ``None`` clears entity, domain and
due_at, and a given confidence is the new version's; over Python and REST."""

from __future__ import annotations

from typing import Any

import pytest

from ledgermem import InvalidInput, Item, UserMemory
from ledgermem.types import START_CONFIDENCE
from tests.support import FakeClock


@pytest.fixture
def item(alice: UserMemory, clock: FakeClock) -> Item:
    made = alice.remember(
        "Climbs with Dana on Thursdays", "fact", domain="sport", context="personal",
        entity="person:dana", due_at="2026-12-01", confidence=0.6)
    alice.mark_reminded(made.id)
    clock.advance(days=1)
    return alice.get(made.id)


def test_fields_left_out_are_the_old_versions(alice: UserMemory, item: Item) -> None:
    new = alice.revise(item.id, "Climbs with Dana on Fridays")
    assert (new.category, new.domain, new.context, new.entity, new.due_at, new.sensitive) \
        == (item.category, item.domain, item.context, item.entity, item.due_at,
            item.sensitive)
    assert new.reminded_at == item.reminded_at is not None
    assert new.confidence == max(item.confidence, START_CONFIDENCE["user"]) > item.confidence


CLEARED = ["entity", "domain", "due_at"]


@pytest.mark.parametrize("field", CLEARED)
def test_none_clears_an_optional_field_in_one_event(alice: UserMemory, item: Item,
                                                    field: str) -> None:
    new = alice.revise(item.id, "Climbs alone on Thursdays",
                       **{field: None})  # type: ignore[arg-type]
    assert getattr(new, field) is None
    assert all(getattr(new, other) == getattr(item, other) for other in CLEARED
               if other != field)
    assert alice.get(new.id) == new
    assert [e.kind for e in alice.history(new.id) if e.subject_id == new.id] \
        == ["memory.added"]
    assert alice.get(item.id).entity == "person:dana"      # the old version is kept whole
    if field == "due_at":
        assert new.reminded_at is None


def test_a_given_confidence_is_the_new_versions(alice: UserMemory, item: Item) -> None:
    assert alice.revise(item.id, "Climbs with Dana on Mondays", confidence=0.35).confidence \
        == 0.35


@pytest.mark.parametrize(("field", "value"), [
    ("category", None), ("context", None), ("sensitive", None), ("confidence", None),
    ("confidence", 1.5), ("confidence", "high"), ("domain", ""), ("category", "mood"),
])
def test_bad_fields_are_refused_and_nothing_changes(alice: UserMemory, item: Item,
                                                    field: str, value: Any) -> None:
    with pytest.raises(InvalidInput, match=field):
        alice.revise(item.id, "Climbs with Dana on Sundays", **{field: value})
    assert alice.get(item.id) == item
    assert [e.kind for e in alice.history(item.id)][-1] != "memory.superseded"


def test_the_pipelines_none_still_keeps_the_old_field(alice: UserMemory, item: Item) -> None:
    """The writer's own ``revise`` (what extraction calls) reads None as "keep"."""
    writer = alice._writer
    new = writer.revise(alice.scope, item.id, "Climbs with Dana twice a week", entity=None,
                        due_at=None, source="llm_extract")
    assert (new.entity, new.due_at) == (item.entity, item.due_at)
