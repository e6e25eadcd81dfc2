"""Bad input raises InvalidInput and leaves every stored row exactly as it was."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from ledgermem import InvalidInput, Item, Memory, UserMemory
from tests.support import event_count, snapshot


@pytest.fixture
def item(alice: UserMemory) -> Item:
    alice.add_turn("user", "some context")
    return alice.remember("Existing fact about kites", entity="topic:kites")


REMEMBER: dict[str, Callable[[UserMemory], Any]] = {
    "empty content": lambda u: u.remember(""),
    "blank content": lambda u: u.remember("   \n\t "),
    "None content": lambda u: u.remember(None),  # type: ignore[arg-type]
    "non-text content": lambda u: u.remember(42),  # type: ignore[arg-type]
    "unknown category": lambda u: u.remember("x", "opinion"),
    "category case": lambda u: u.remember("x", "Fact"),
    "unknown source": lambda u: u.remember("x", source="gossip"),
    "confidence > 1": lambda u: u.remember("x", confidence=1.01),
    "confidence < 0": lambda u: u.remember("x", confidence=-0.1),
    "confidence nan": lambda u: u.remember("x", confidence=math.nan),
    "confidence text": lambda u: u.remember("x", confidence="0.5"),  # type: ignore[arg-type]
    "confidence bool": lambda u: u.remember("x", confidence=True),
    "entity without colon": lambda u: u.remember("x", entity="sarah"),
    "entity without name": lambda u: u.remember("x", entity="person:"),
    "entity without type": lambda u: u.remember("x", entity=":sarah"),
    "entity blank parts": lambda u: u.remember("x", entity="  :  "),
    "entity not text": lambda u: u.remember("x", entity=7),  # type: ignore[arg-type]
    "due_at nonsense": lambda u: u.remember("x", due_at="when pigs fly"),
    "due_at impossible": lambda u: u.remember("x", due_at="2026-13-45"),
    "due_at empty": lambda u: u.remember("x", due_at=""),
    "due_at overflow": lambda u: u.remember("x", due_at="99999999999999999999"),
    "blank context": lambda u: u.remember("x", context="   "),
}

UPDATE: dict[str, Callable[[UserMemory, str], Any]] = {
    "blank content": lambda u, i: u.update(i, content="  "),
    "unknown category": lambda u, i: u.update(i, category="opinion"),
    "confidence > 1": lambda u, i: u.update(i, confidence=2),
    "malformed entity": lambda u, i: u.update(i, entity="kites"),
    "unparseable due_at": lambda u, i: u.update(i, due_at="someday maybe"),
    "blank context": lambda u, i: u.update(i, context=""),
    "bad content with good fields": lambda u, i: u.update(i, confidence=0.1, content=""),
    "confidence text": lambda u, i: u.update_confidence(i, "high"),  # type: ignore[arg-type]
}

OTHER: dict[str, Callable[[UserMemory], Any]] = {
    "search unknown category": lambda u: u.search("kites", category="opinion"),
    "search top_k 0": lambda u: u.search("kites", top_k=0),
    "search bad entity": lambda u: u.search("kites", entity="kites"),
    "search bad time": lambda u: u.search("kites", time_from="later-ish"),
    "turn unknown role": lambda u: u.add_turn("robot", "beep"),
    "turn blank content": lambda u: u.add_turn("user", "  "),
    "turn bad time": lambda u: u.add_turn("user", "hi", at="not a time"),
    "tool without name": lambda u: u.log_tool_call(" "),
    "forget_by_source unknown": lambda u: u.forget_by_source("rumour"),
    "all_knowledge bad sort": lambda u: u.all_knowledge(sort="content"),
    "all_knowledge bad order": lambda u: u.all_knowledge(order="sideways"),
    "all_knowledge negative offset": lambda u: u.all_knowledge(offset=-5),
    "all_knowledge limit 0": lambda u: u.all_knowledge(limit=0),
    "recent_conversations limit 0": lambda u: u.recent_conversations(0),
    "tool_errors limit huge": lambda u: u.tool_errors(limit=10**9),
    "by_category unknown": lambda u: u.by_category("opinion"),
}


@pytest.mark.parametrize("call", REMEMBER.values(), ids=REMEMBER.keys())
def test_bad_remember_raises_and_stores_nothing(mem: Memory, alice: UserMemory, item: Item,
                                                call: Callable[[UserMemory], Any]) -> None:
    before, events = snapshot(mem), event_count(mem)
    with pytest.raises(InvalidInput):
        call(alice)
    assert event_count(mem) == events
    assert snapshot(mem) == before


@pytest.mark.parametrize("call", UPDATE.values(), ids=UPDATE.keys())
def test_bad_update_raises_and_changes_nothing(mem: Memory, alice: UserMemory, item: Item,
                                               call: Callable[[UserMemory, str], Any]) -> None:
    before, events = snapshot(mem), event_count(mem)
    with pytest.raises(InvalidInput):
        call(alice, item.id)
    assert event_count(mem) == events
    assert snapshot(mem) == before
    assert alice.get(item.id) == item


@pytest.mark.parametrize("call", OTHER.values(), ids=OTHER.keys())
def test_other_bad_input_raises_and_changes_nothing(mem: Memory, alice: UserMemory, item: Item,
                                                    call: Callable[[UserMemory], Any]) -> None:
    before, events = snapshot(mem), event_count(mem)
    with pytest.raises(InvalidInput):
        call(alice)
    assert event_count(mem) == events
    assert snapshot(mem) == before


@pytest.mark.parametrize("user_id", ["", "   ", None, 5])
def test_for_user_needs_a_user_id(mem: Memory, user_id: object) -> None:
    with pytest.raises(InvalidInput):
        mem.for_user(user_id)  # type: ignore[arg-type]


def test_for_user_needs_a_context(mem: Memory) -> None:
    with pytest.raises(InvalidInput):
        mem.for_user("alice", context=" ")


def test_metadata_that_cannot_be_stored_is_invalid_input(mem: Memory, alice: UserMemory,
                                                         item: Item) -> None:
    # Regression (fixed): remember/update (and log_tool_call arguments, add_turn metadata) did
    # not check that metadata is JSON-serialisable; json.dumps in store/sql.py append raised a
    # bare TypeError from inside the transaction instead of InvalidInput (the rollback did keep
    # the store unchanged). Fixed by validation.json_object.
    before = snapshot(mem)
    with pytest.raises(InvalidInput):
        alice.remember("Has metadata with a datetime", metadata={"at": datetime.now(UTC)})
    assert snapshot(mem) == before


def test_due_at_with_a_timezone_name_is_not_silently_read_as_utc(alice: UserMemory) -> None:
    # Regression (fixed): clock.py parse_when hands "1 Dec 2026 14:00 PST" to dateutil without
    # tzinfos; dateutil warns (UnknownTimezoneWarning), drops "PST" and returns a naive datetime,
    # which parse_when then labels UTC: the reminder is stored 8 hours early. (Under pytest's
    # filterwarnings=error it raises the warning instead of InvalidInput.) Suggested fix: pass
    # tzinfos for the common abbreviations, or turn UnknownTimezoneWarning into InvalidInput
    # (warnings.catch_warnings + "error").
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what a user's program sees by default
        try:
            stored = alice.remember("Call with the SF office", "reminder",
                                    due_at="1 Dec 2026 14:00 PST")
        except InvalidInput:
            return
    assert stored.due_at in (None, "2026-12-01T22:00:00.000000+00:00")


def test_nul_characters_are_refused_everywhere(alice: UserMemory) -> None:
    before = event_count(alice._memory)
    with pytest.raises(InvalidInput, match="NUL"):
        alice.remember("tea\x00time")
    with pytest.raises(InvalidInput, match="NUL"):
        alice.add_turn("user", "tea\x00time")
    assert event_count(alice._memory) == before
    assert alice.search("tea\x00time") == []        # searching for it is harmless


def test_lone_surrogates_are_refused(alice: UserMemory) -> None:
    with pytest.raises(InvalidInput, match="Unicode"):
        alice.remember("tea \ud800")
    assert alice.search("tea \ud800") == []
