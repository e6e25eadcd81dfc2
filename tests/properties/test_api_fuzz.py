"""Hypothesis over the arguments of every public method of ``UserMemory`` and of
``Memory.for_user``: wrong types, None, huge and negative numbers, NaN, NUL, lone
surrogates, control characters, FTS5 syntax, 100 kB strings…

Whatever the arguments, only ``LedgermemError`` escapes; a call that raises leaves the
store as it was; and what a call accepts holds no text PostgreSQL would refuse (NUL,
lone surrogates), so a SQLite store can always be migrated.

The methods are found by introspection, so a new public method is fuzzed without
editing this file: give its new argument names a valid value in ``VALID`` (an
unknown argument is only ever omitted or given hostile values).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermem import LedgermemError, Memory, UserMemory
from ledgermem.store.base import Store

FUZZ = settings(max_examples=12, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

SKIP: dict[str, str] = {}
"""Public methods left out, and why (say why for each: a method that takes a callable,
or whose work cannot be undone, e.g.)."""

SURROGATE, NUL = "\ud800", "a\x00b"
HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**31, 2**63, 2**64, 10**20, -(10**20), 1e12, -1e12, 0.5,
    math.nan, math.inf, -math.inf, "", " ", "\t\n", "\x00", NUL, SURROGATE, "x\udfff",
    "\x01\x02\x1b\x7f", '"', '" AND NEAR(x y) OR *', "-kites NOT ^tea*", "tea)(", "x" * 100_001,
    "é" * 20_000, [], [1, 2], ["x"], ("a",), {}, {"a": NUL}, {SURROGATE: 1}, {1: 2},
    {"n": math.nan}, {"deep": [[[[{"x": "\x00"}]]]]}, b"bytes", object(),
    [{"role": "user"}], [{"role": "user", "content": NUL}], [{"role": "user", "content": 5}],
    [{"role": "robot", "content": "hi"}], datetime(2026, 1, 1), date(2026, 1, 1),
    datetime(9999, 12, 31, tzinfo=UTC), timedelta(days=1), "2026-13-45", "yesterday",
    "99999999999999999999", "person:", ":x", "type:" + "n" * 2_000,
]
HOSTILE = st.one_of(
    st.sampled_from(HOSTILE_VALUES),
    st.text(max_size=40),
    st.integers(),
    st.floats(),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.floats()),
                    max_size=3),
)

VALID: dict[str, Any] = {
    "content": "Kites fly best in a steady wind", "query": "kites wind",
    "category": "fact", "source": "user", "role": "user", "name": "web_search",
    "arguments": {"q": "kites"}, "metadata": {"k": "v"}, "context": "hobbies",
    "entity": "topic:kites", "domain": "outdoors", "session_id": "alice:chat",
    "limit": 5, "top_k": 5, "offset": 0, "days": 7, "unused_days": 30, "factor": 0.9,
    "min_confidence": 0.1, "confidence": 0.5, "sensitive": False, "due_at": "2026-07-01",
    "time_from": "2026-01-01", "time_to": "2026-12-31", "at": "2026-06-01T11:00:00Z",
    "as_of": "2026-06-01T13:00:00Z", "valid_from": "2026-05-01", "time_mode": "boost",
    "reason": "because", "turn_ids": None, "success": False, "duration_ms": 12.5,
    "error": "timeout", "learn_error": True, "infer": False, "include_superseded": False,
    "touch": False, "sort": "updated_at", "order": "desc", "dedup": None,
    "turns": [{"role": "user", "content": "Went kiting at the beach"}],
    "user_id": "carol", "agent_id": "planner",
}
OMIT: Any = object()


def _public_methods() -> list[str]:
    seen: dict[Any, str] = {}
    for name, function in inspect.getmembers(UserMemory, inspect.isfunction):
        if not name.startswith("_") and function not in seen:  # aliases once
            seen[function] = name
    return sorted(name for name in seen.values() if name not in SKIP)


METHODS = _public_methods()


def test_the_fuzz_lists_are_current() -> None:
    assert len(METHODS) > 30
    stale = set(SKIP) - {n for n, _ in inspect.getmembers(UserMemory)}
    assert not stale, f"no such methods: {stale}"


def _digest(store: Store) -> tuple[Any, ...]:
    """Counts per user and every user's ledger: what a refused call must not change."""
    return (store.user_counts(),
            [(e.id, e.kind, e.subject_id, e.payload) for user in store.user_ids()
             for e in store.events(user)])


def _unstorable(value: Any) -> Iterator[str]:
    """Strings anywhere in ``value`` (an event) that PostgreSQL would refuse."""
    if isinstance(value, str):
        if "\x00" in value or any("\ud800" <= c <= "\udfff" for c in value):
            yield repr(value)[:60]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _unstorable(key)
            yield from _unstorable(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _unstorable(item)


def _stored_text_is_clean(store: Store) -> None:
    for user in store.user_ids():
        for event in store.events(user):
            found = list(_unstorable([event.user_id, event.agent_id, event.session_id,
                                      event.subject_id, event.payload]))
            assert not found, f"{event.kind} stored text PostgreSQL refuses: {found}"


def _arguments(data: st.DataObject, function: Callable[..., Any], valid: dict[str, Any]
               ) -> dict[str, Any]:
    """Keyword arguments for ``function``: valid ones, and up to two hostile ones (or
    none, so that valid calls run too)."""
    parameters = [p for p in inspect.signature(function).parameters.values()
                  if p.name != "self"]
    names = [p.name for p in parameters]
    hostile = data.draw(st.sets(st.sampled_from(names), max_size=2) if names else
                        st.just(set()), label="hostile")
    arguments: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name in hostile:
            value = data.draw(HOSTILE, label=parameter.name)
        elif parameter.name in valid:
            value = valid[parameter.name]
        elif parameter.default is not inspect.Parameter.empty:
            value = OMIT
        else:
            value = data.draw(HOSTILE, label=parameter.name)
        if value is not OMIT:
            arguments[parameter.name] = value
    return arguments


def _call(store: Store, action: Callable[[], Any]) -> None:
    before = _digest(store)
    try:
        action()
    except LedgermemError:
        assert _digest(store) == before, "a refused call changed the store"
    else:
        _stored_text_is_clean(store)


@pytest.fixture
def fuzzed(mem: Memory) -> Iterator[tuple[UserMemory, dict[str, Any]]]:
    alice = mem.for_user("alice")
    item = alice.remember("Kites need wind", entity="topic:kites")
    turn = alice.add_turn("user", "We flew kites on the beach", session_id="alice:chat")
    yield alice, {**VALID, "item_id": item.id, "turn_ids": [turn.id]}


@pytest.mark.sqlite_only  # reason: a store that accepts only clean text migrates anywhere;
# what PostgreSQL itself refuses is checked on both backends in test_bad_input.
@pytest.mark.parametrize("method", METHODS)
@FUZZ
@given(data=st.data())
def test_only_ledgermem_errors_escape_and_refusals_change_nothing(
        mem: Memory, fuzzed: tuple[UserMemory, dict[str, Any]], method: str,
        data: st.DataObject) -> None:
    user, valid = fuzzed
    function = getattr(user, method)
    arguments = _arguments(data, function, valid)
    _call(mem.store, lambda: function(**arguments))


@pytest.mark.sqlite_only  # reason: as above
@FUZZ
@given(data=st.data())
def test_for_user_takes_only_storable_scopes(mem: Memory, data: st.DataObject) -> None:
    arguments = _arguments(data, mem.for_user, VALID)

    def write() -> None:
        user = mem.for_user(**arguments)
        user.remember("Carol flies kites")
        user.add_turn("user", "Kites again")
        user.log_tool_call("weather", {"at": "beach"})

    _call(mem.store, write)
