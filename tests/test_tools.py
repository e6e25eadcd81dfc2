"""log_tool_call, tool_errors, tool_stats / tool_summary."""

from __future__ import annotations

import pytest

from ledgermem import InvalidInput, Memory, UserMemory
from tests.support import FakeClock, event_count


def test_successful_call_is_logged_without_knowledge(alice: UserMemory,
                                                     clock: FakeClock) -> None:
    call = alice.log_tool_call("web_search", {"q": "lisbon hotels"}, duration_ms=120.5,
                               session_id="alice:telegram")
    assert (call.name, call.arguments, call.success, call.duration_ms, call.error) == (
        "web_search", {"q": "lisbon hotels"}, True, 120.5, None)
    assert (call.user_id, call.session_id, call.ts) == ("alice", "alice:telegram", clock.iso())
    assert alice.all_knowledge()["total"] == 0


def test_failed_call_becomes_error_knowledge(alice: UserMemory) -> None:
    call = alice.log_tool_call("web search", {"q": "x"}, success=False, error="timeout after 30s")
    assert (call.success, call.error) == (False, "timeout after 30s")
    [item] = alice.by_category("error")
    assert item.content == "Tool web search failed: timeout after 30s"
    assert (item.source, item.confidence, item.entity) == ("error_auto", 0.5, "tool:web_search")
    assert alice.recent_errors()["items"] == [item]


def test_failure_without_message_says_unknown_error(alice: UserMemory) -> None:
    alice.log_tool_call("fetch", success=False)
    assert alice.by_category("error")[0].content == "Tool fetch failed: unknown error"


def test_learn_error_false_logs_only_the_call(alice: UserMemory) -> None:
    alice.log_tool_call("fetch", success=False, error="404", learn_error=False)
    assert alice.by_category("error") == []
    assert len(alice.tool_errors()) == 1


def test_the_same_failure_twice_is_one_error_item(alice: UserMemory) -> None:
    for _ in range(3):
        alice.log_tool_call("fetch", success=False, error="connection refused")
    assert len(alice.by_category("error")) == 1
    assert len(alice.tool_errors()) == 3


def test_tool_errors_are_failures_newest_first(alice: UserMemory, clock: FakeClock) -> None:
    alice.log_tool_call("a", success=False, error="first", learn_error=False)
    clock.advance(minutes=1)
    alice.log_tool_call("b", success=True)
    clock.advance(minutes=1)
    alice.log_tool_call("b", success=False, error="second", learn_error=False)
    clock.advance(minutes=1)
    alice.log_tool_call("a", success=False, error="third", learn_error=False)
    assert [c.error for c in alice.tool_errors()] == ["third", "second", "first"]
    assert [c.error for c in alice.tool_errors(name="a")] == ["third", "first"]
    assert [c.error for c in alice.tool_errors(limit=1)] == ["third"]
    assert alice.recent_errors(limit=2)["tool_calls"] == alice.tool_errors(limit=2)


def test_tool_stats_per_tool(alice: UserMemory, clock: FakeClock) -> None:
    alice.log_tool_call("search", duration_ms=100)
    alice.log_tool_call("search", duration_ms=300)
    alice.log_tool_call("search", success=False, error="x", duration_ms=200, learn_error=False)
    clock.advance(hours=1)
    alice.log_tool_call("search", duration_ms=400)
    alice.log_tool_call("calc")
    stats = alice.tool_stats()
    assert stats == [
        {"name": "search", "calls": 4, "failures": 1, "success_rate": 0.75,
         "avg_duration_ms": 250.0, "last_ts": clock.iso()},
        {"name": "calc", "calls": 1, "failures": 0, "success_rate": 1.0,
         "avg_duration_ms": None, "last_ts": clock.iso()},
    ]
    assert alice.tool_summary() == stats


def test_bad_tool_names_are_rejected_and_nothing_is_stored(mem: Memory,
                                                           alice: UserMemory) -> None:
    before = event_count(mem)
    for bad in ("", "   ", None):
        with pytest.raises(InvalidInput):
            alice.log_tool_call(bad, success=False, error="x")  # type: ignore[arg-type]
    assert event_count(mem) == before


def test_log_tool_call_returns_the_call_it_just_logged(alice: UserMemory,
                                                       clock: FakeClock) -> None:
    # Regression (fixed): UserMemory.log_tool_call ends with `query_tool_calls(name=name,
    # limit=1)[0]`, i.e. "the newest call of that name", not the call just written. When another
    # call of the same tool carries a later ts (clock adjusted backwards, another process or machine
    # with a skewed clock, two threads racing) the caller gets someone else's call back. Suggested
    # fix: build the ToolCall from the event just appended (or look it up by the event id).
    clock.advance(hours=1)
    alice.log_tool_call("search", {"q": "first"})
    clock.advance(hours=-1)  # e.g. NTP moved the clock back
    call = alice.log_tool_call("search", {"q": "second"})
    assert call.arguments == {"q": "second"}
