"""How deep the JSON a caller writes may nest (item and turn metadata, tool-call
arguments, event payloads): at most ``MAX_JSON_DEPTH`` levels, checked by the library
for every writer, on both stores. A deeper value is refused with ``InvalidInput`` and
nothing is stored, so no row is ever kept that a read could not serialise again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledgermem import InvalidInput, Item, Memory, UserMemory
from ledgermem.validation import MAX_JSON_DEPTH, json_object
from tests.support import snapshot


def nested(levels: int) -> dict[str, Any]:
    """A JSON object ``levels`` deep, objects and lists taking turns inside it:
    ``{"a": [{"a": [... 1]}]}``; the outer object is level 1."""
    value: Any = 1
    for level in range(levels, 0, -1):
        value = {"a": value} if level % 2 else [value]
    assert isinstance(value, dict)
    return value


Write = Callable[[UserMemory, Item, dict[str, Any]], object]

WRITES: dict[str, Write] = {
    "remember metadata": lambda u, i, v: u.remember("deep", metadata=v),
    "remember_many metadata": lambda u, i, v: u.remember_many(
        [{"content": "deep", "metadata": v}]),
    "update metadata": lambda u, i, v: u.update(i.id, metadata=v),
    "add_turn metadata": lambda u, i, v: u.add_turn("user", "deep", metadata=v),
    "add_turns metadata": lambda u, i, v: u.add_turns(
        [{"role": "user", "content": "deep", "metadata": v}]),
    "log_tool_call arguments": lambda u, i, v: u.log_tool_call("probe", v),
    "record payload": lambda u, i, v: u.record("probe.noted", v),
}


@pytest.fixture
def item(alice: UserMemory) -> Item:
    return alice.remember("An item to update")


def test_the_nesting_helper_counts_levels_as_the_cap_does() -> None:
    assert nested(1) == {"a": 1}
    assert nested(3) == {"a": [{"a": 1}]}
    json_object(nested(MAX_JSON_DEPTH), "metadata")
    with pytest.raises(InvalidInput, match=f"more than {MAX_JSON_DEPTH} levels"):
        json_object(nested(MAX_JSON_DEPTH + 1), "metadata")


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_json_nested_past_the_cap_is_refused_and_nothing_stored(
        mem: Memory, alice: UserMemory, item: Item, write: Write) -> None:
    before = snapshot(mem)
    with pytest.raises(InvalidInput, match=f"nested more than {MAX_JSON_DEPTH} levels"):
        write(alice, item, nested(MAX_JSON_DEPTH + 1))
    assert snapshot(mem) == before


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_json_nested_at_the_cap_is_stored(mem: Memory, alice: UserMemory, item: Item,
                                          write: Write) -> None:
    before = snapshot(mem)
    write(alice, item, nested(MAX_JSON_DEPTH))
    assert snapshot(mem)["events"] != before["events"]


def test_json_at_the_cap_reads_back_unchanged(alice: UserMemory) -> None:
    deep = nested(MAX_JSON_DEPTH)
    kept = alice.remember("A deeply annotated fact", metadata=deep)
    assert alice.get(kept.id).metadata == deep
    assert alice.add_turn("user", "hi", metadata=deep).metadata == deep
    assert [t.metadata for t in alice.session_history()] == [deep]
    assert alice.log_tool_call("probe", deep).arguments == deep
    assert alice.record("probe.noted", deep).payload == deep
    assert [e.payload for e in alice.ledger_events(kinds=["probe.noted"])] == [deep]


def test_far_too_deep_and_self_holding_values_are_refused_alike(alice: UserMemory) -> None:
    holds_itself: dict[str, Any] = {}
    holds_itself["self"] = holds_itself
    for value in (nested(100_000), holds_itself):
        with pytest.raises(InvalidInput, match="nested more than"):
            alice.remember("x", metadata=value)
