"""add_turn(s), session_history, search_conversations, recent_conversations, sessions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledgermem import InvalidInput, Memory, UserMemory
from tests.support import START, FakeClock, event_count


def test_add_turn_returns_the_stored_turn(alice: UserMemory, clock: FakeClock) -> None:
    turn = alice.add_turn("user", "I'm flying to Lisbon on Friday",
                          session_id="alice:telegram", name="Alice", metadata={"msg": 7})
    assert (turn.role, turn.content, turn.session_id, turn.user_id) == (
        "user", "I'm flying to Lisbon on Friday", "alice:telegram", "alice")
    assert turn.ts == clock.iso()
    assert turn.metadata == {"msg": 7, "name": "Alice"}
    assert turn.consolidated_at is None
    assert alice.session_history("alice:telegram") == [turn]


def test_turn_content_is_kept_verbatim(alice: UserMemory) -> None:
    text = "  leading and trailing blanks stay\n"
    assert alice.add_turn("assistant", text).content == text


def test_default_session_comes_from_the_handle_or_the_user(mem: Memory) -> None:
    assert mem.for_user("alice").add_turn("user", "hi").session_id == "alice:default"
    handle = mem.for_user("alice", session_id="alice:slack")
    assert handle.add_turn("user", "hi there").session_id == "alice:slack"
    assert [t.content for t in handle.session_history()] == ["hi there"]


@pytest.mark.parametrize(("at", "ts"), [
    ("2026-05-01 09:15", "2026-05-01T09:15:00.000000+00:00"),
    (datetime(2026, 5, 1, 11, 15, tzinfo=UTC) + timedelta(hours=-2),
     "2026-05-01T09:15:00.000000+00:00"),
])
def test_turn_time_can_be_given(alice: UserMemory, at: object, ts: str) -> None:
    assert alice.add_turn("user", "backfilled", at=at).ts == ts  # type: ignore[arg-type]


def test_add_turns_keeps_several_in_order(alice: UserMemory) -> None:
    turns = alice.add_turns([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what's the weather?"},
        {"role": "assistant", "content": "sunny"},
        {"role": "tool", "content": "{\"temp\": 21}", "name": "weather"},
    ], session_id="s1")
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool"]
    assert alice.session_history("s1") == turns


def test_add_turns_is_all_or_nothing(mem: Memory, alice: UserMemory) -> None:
    before = event_count(mem)
    with pytest.raises(InvalidInput):
        alice.add_turns([{"role": "user", "content": "fine"},
                         {"role": "user", "content": "   "},
                         {"role": "assistant", "content": "fine too"}])
    with pytest.raises(InvalidInput):
        alice.add_turns([{"role": "user", "content": "fine"}, {"role": "robot",
                                                               "content": "beep"}])
    assert event_count(mem) == before
    assert alice.recent_conversations() == []


def test_session_history_is_oldest_first_and_limit_keeps_the_latest(
        alice: UserMemory, clock: FakeClock) -> None:
    for n in range(6):
        alice.add_turn("user" if n % 2 == 0 else "assistant", f"message {n}", session_id="s")
        clock.advance(minutes=1)
    alice.add_turn("user", "elsewhere", session_id="other")
    assert [t.content for t in alice.session_history("s")] == [f"message {n}" for n in range(6)]
    assert [t.content for t in alice.session_history("s", limit=2)] == ["message 4",
                                                                       "message 5"]
    assert alice.session_history("nobody") == []


@pytest.fixture
def chats(alice: UserMemory, clock: FakeClock) -> None:
    """Day 0: Lisbon trip in telegram; day 3: dentist in slack; day 6: Lisbon hotel in slack."""
    alice.add_turn("user", "I'm flying to Lisbon on Friday", session_id="alice:telegram")
    alice.add_turn("assistant", "Have a great trip", session_id="alice:telegram")
    clock.advance(days=3)
    alice.add_turn("user", "Remind me about the dentist", session_id="alice:slack")
    clock.advance(days=3)
    alice.add_turn("user", "Booked a hotel in Lisbon", session_id="alice:slack")


LISBON = {"I'm flying to Lisbon on Friday", "Booked a hotel in Lisbon"}


@pytest.mark.usefixtures("chats")
def test_search_conversations_by_keywords(alice: UserMemory) -> None:
    hits = alice.search_conversations("Lisbon")
    # the turns saying "Lisbon" come first (neighbouring turns may follow as context)
    assert {h.content for h in hits[:2]} == LISBON
    assert all(h.turn is not None and h.item is None for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert alice.search_conversations("lisbon hotel")[0].content == "Booked a hotel in Lisbon"
    assert alice.search_conversations("dentist")[0].content == "Remind me about the dentist"


@pytest.mark.usefixtures("chats")
def test_search_conversations_by_time_range_only(alice: UserMemory) -> None:
    hits = alice.search_conversations(time_from=START + timedelta(days=2),
                                      time_to=START + timedelta(days=4))
    assert [h.content for h in hits] == ["Remind me about the dentist"]
    everything = alice.search_conversations()
    assert [h.content for h in everything] == [
        "Booked a hotel in Lisbon", "Remind me about the dentist", "Have a great trip",
        "I'm flying to Lisbon on Friday"]  # newest first


@pytest.mark.usefixtures("chats")
def test_search_conversations_by_keywords_and_time(alice: UserMemory) -> None:
    hits = alice.search_conversations("Lisbon", time_from="2026-06-05")
    assert [h.content for h in hits] == ["Booked a hotel in Lisbon"]
    early = alice.search_conversations("Lisbon", time_to="2026-06-02")
    assert early[0].content == "I'm flying to Lisbon on Friday"
    assert all(h.turn is not None and h.turn.ts <= "2026-06-02" for h in early)


@pytest.mark.usefixtures("chats")
def test_search_conversations_in_one_session(alice: UserMemory) -> None:
    hits = alice.search_conversations("Lisbon", session_id="alice:telegram")
    assert hits[0].content == "I'm flying to Lisbon on Friday"
    assert {h.turn.session_id for h in hits if h.turn} == {"alice:telegram"}
    assert [h.content for h in alice.search_conversations(session_id="alice:slack")] == [
        "Booked a hotel in Lisbon", "Remind me about the dentist"]


@pytest.mark.usefixtures("chats")
def test_search_conversations_limit_and_bad_input(alice: UserMemory) -> None:
    assert len(alice.search_conversations(limit=2)) == 2
    assert alice.search_conversations("submarine") == []
    with pytest.raises(InvalidInput):
        alice.search_conversations("Lisbon", limit=0)
    with pytest.raises(InvalidInput):
        alice.search_conversations("Lisbon", time_from="the day after never")


@pytest.mark.usefixtures("chats")
def test_recent_conversations_are_newest_first_across_sessions(alice: UserMemory) -> None:
    assert [t.content for t in alice.recent_conversations(2)] == [
        "Booked a hotel in Lisbon", "Remind me about the dentist"]
    assert len(alice.recent_conversations()) == 4


@pytest.mark.usefixtures("chats")
def test_sessions_have_counts_and_times_latest_first(alice: UserMemory) -> None:
    sessions = alice.sessions()
    assert [s["session_id"] for s in sessions] == ["alice:slack", "alice:telegram"]
    slack, telegram = sessions
    assert (slack["turns"], telegram["turns"]) == (2, 2)
    assert telegram["first_ts"] == telegram["last_ts"] == "2026-06-01T12:00:00.000000+00:00"
    assert slack["first_ts"] == "2026-06-04T12:00:00.000000+00:00"
    assert slack["last_ts"] == "2026-06-07T12:00:00.000000+00:00"
    assert slack["unconsolidated"] == 2
