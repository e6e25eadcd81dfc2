"""Durable sessions: the window, restart, idle consolidation, the sweep, /reset, and one
person across channels (on SQLite and PostgreSQL, with an injected clock and timers)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledgermem import ExtractionOptions, Memory
from ledgermem.agent.sessions import (
    SessionOptions,
    SessionResult,
    Sessions,
    UserDirectory,
    session_key,
)
from ledgermem.errors import ConfigError, InvalidInput
from ledgermem.testing import ScriptedLLMServer
from tests.pipeline.conftest import make_llm
from tests.support import FakeClock

VEGETARIAN = {"items": [{"content": "Is vegetarian", "category": "preference"}]}


@dataclass
class FakeTimer:
    seconds: float
    function: Callable[[], None]
    started: bool = False
    cancelled: bool = False
    fired: bool = False

    def start(self) -> None:
        self.started = True

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        self.fired = True
        self.function()


class FakeTimers:
    """A timer factory that only records: the test fires a timer by hand."""

    def __init__(self) -> None:
        self.made: list[FakeTimer] = []

    def __call__(self, seconds: float, function: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(seconds, function)
        self.made.append(timer)
        return timer

    @property
    def live(self) -> list[FakeTimer]:
        return [t for t in self.made if t.started and not (t.cancelled or t.fired)]


@pytest.fixture
def timers() -> FakeTimers:
    return FakeTimers()


@pytest.fixture
def llm_mem(db_url: str, clock: FakeClock, server: ScriptedLLMServer) -> Iterator[Memory]:
    llm = make_llm(server)
    memory = Memory.open(db_url, clock=clock, embedder=None, llm=llm)
    yield memory
    memory.close()
    llm.close()


def chat(sessions: Sessions, clock: FakeClock, user: str, channel: str, *said: str) -> None:
    """Record user messages, each followed by a reply, a second apart."""
    for text in said:
        sessions.record(user, channel, "user", text)
        clock.advance(seconds=1)
        sessions.record(user, channel, "assistant", f"reply to {text}")
        clock.advance(seconds=1)


# the window ----------------------------------------------------------------------------
def test_window_replays_the_last_30_user_turns_and_their_replies(
        mem: Memory, clock: FakeClock, timers: FakeTimers) -> None:
    sessions = Sessions(mem, timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", *(f"message {n}" for n in range(31)))
    window = sessions.window("alice", "telegram")
    assert len(window) == 60
    assert [t.content for t in window[:2]] == ["message 1", "reply to message 1"]
    assert [t.content for t in window[-2:]] == ["message 30", "reply to message 30"]
    assert sum(t.role == "user" for t in window) == 30
    assert all(t.session_id == "alice:telegram" for t in window)
    # the whole conversation stays on disk
    history = sessions.history("alice", "telegram")
    assert len(history) == 62 and history[0].content == "message 0"
    # another channel is another session
    assert sessions.window("alice", "slack") == []


def test_a_small_window_and_a_reply_without_a_question(
        mem: Memory, clock: FakeClock, timers: FakeTimers) -> None:
    sessions = Sessions(mem, SessionOptions(window_turns=2), timer_factory=timers)
    sessions.record("alice", "web", "assistant", "Hello, how can I help?")
    chat(sessions, clock, "alice", "web", "one")
    assert [t.content for t in sessions.window("alice", "web")] == [
        "Hello, how can I help?", "one", "reply to one"]
    chat(sessions, clock, "alice", "web", "two", "three")
    assert [t.content for t in sessions.window("alice", "web")] == [
        "two", "reply to two", "three", "reply to three"]


def test_a_restart_resumes_the_exact_window(db_url: str, clock: FakeClock,
                                            timers: FakeTimers) -> None:
    with Memory.open(db_url, clock=clock, embedder=None) as first:
        sessions = Sessions(first, SessionOptions(window_turns=3), timer_factory=timers)
        chat(sessions, clock, "alice", "telegram", "a", "b", "c", "d")
        before = sessions.window("alice", "telegram")
        sessions.close()
    with Memory.open(db_url, clock=clock, embedder=None) as second:
        again = Sessions(second, SessionOptions(window_turns=3), timer_factory=FakeTimers())
        assert again.window("alice", "telegram") == before
        assert before[0].content == "b"


# idle consolidation --------------------------------------------------------------------
def test_the_idle_timer_consolidates_the_whole_session_and_clears_it(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers,
        server: ScriptedLLMServer) -> None:
    sessions = Sessions(llm_mem, timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian", "What's for dinner?")
    [timer] = timers.live
    assert timer.seconds == 30 * 60
    server.reply(VEGETARIAN)
    clock.advance(minutes=30)
    timer.fire()
    [request] = server.chat_requests
    assert "I'm vegetarian" in request.text and "reply to What's for dinner?" in request.text
    alice = llm_mem.for_user("alice")
    [item] = alice.all_knowledge(source="consolidation")["items"]
    assert (item.content, item.category) == ("Is vegetarian", "preference")
    assert sessions.window("alice", "telegram") == []
    assert len(sessions.history("alice", "telegram")) == 4  # kept on disk, marked
    # the next turn starts a fresh window and arms a new timer
    sessions.record("alice", "telegram", "user", "Hi again")
    assert [t.content for t in sessions.window("alice", "telegram")] == ["Hi again"]
    assert len(timers.live) == 1 and timers.live[0] is not timer


def test_the_timer_is_rearmed_after_each_turn(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers,
        server: ScriptedLLMServer) -> None:
    sessions = Sessions(llm_mem, SessionOptions(idle_consolidate_minutes=5),
                        timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "first")
    chat(sessions, clock, "alice", "slack", "elsewhere")
    assert len(timers.made) == 4 and len(timers.live) == 2
    assert [t.cancelled for t in timers.made] == [True, False, True, False]
    assert {t.seconds for t in timers.made} == {300}
    # a timer cancelled too late (its turn is no longer the last) does nothing
    timers.made[0].fire()
    assert server.chat_requests == []
    assert len(sessions.window("alice", "telegram")) == 2
    sessions.close()
    assert timers.live == []
    # closed: no new timers, nothing flushed
    sessions.record("alice", "telegram", "user", "after close")
    assert timers.live == [] and server.chat_requests == []


@pytest.mark.sqlite_only  # the timer thread is the same whatever the store
def test_a_real_timer_fires_on_its_own(llm_mem: Memory, server: ScriptedLLMServer) -> None:
    server.reply(VEGETARIAN)
    with Sessions(llm_mem, SessionOptions(idle_consolidate_minutes=0.1 / 60)) as sessions:
        sessions.record("alice", "telegram", "user", "I'm vegetarian")
        deadline = time.monotonic() + 5
        while sessions.window("alice", "telegram") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sessions.window("alice", "telegram") == []
    assert len(llm_mem.for_user("alice").all_knowledge(source="consolidation")["items"]) == 1


def test_a_failed_call_keeps_the_session(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers,
        server: ScriptedLLMServer) -> None:
    sessions = Sessions(llm_mem, timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
    server.reply("not json")
    clock.advance(minutes=31)
    [result] = sessions.consolidate_idle()
    assert (result.status, result.why) == ("failed", "the consolidation call failed")
    assert len(sessions.window("alice", "telegram")) == 2
    server.reply(VEGETARIAN)
    assert [r.status for r in sessions.consolidate_idle()] == ["consolidated"]
    assert sessions.consolidate_idle() == []


def test_the_start_up_sweep_consolidates_sessions_that_went_idle_while_down(
        db_url: str, clock: FakeClock, server: ScriptedLLMServer, timers: FakeTimers) -> None:
    llm = make_llm(server)
    with Memory.open(db_url, clock=clock, embedder=None, llm=llm) as first:
        before = Sessions(first, timer_factory=timers)
        chat(before, clock, "alice", "telegram", "I'm vegetarian")
        clock.advance(minutes=25)
        chat(before, clock, "alice", "slack", "Still here")
        chat(before, clock, "bob", "telegram", "I play chess")
        # a session this layer did not write is not its business
        first.for_user("alice").add_turn("user", "an old note", at="2020-01-01")
        # the process goes down; its timers never fire
    clock.advance(minutes=10)
    with Memory.open(db_url, clock=clock, embedder=None, llm=llm) as second:
        later = FakeTimers()
        sessions = Sessions(second, timer_factory=later)
        assert sessions.due() == [("alice", "telegram")]
        server.reply(VEGETARIAN)
        [result] = sessions.start()
        assert result == SessionResult("alice:telegram", "consolidated", turns=2, items=1)
        assert sessions.window("alice", "telegram") == []
        # the others get timers for their remaining idle time
        assert sorted(round(t.seconds) for t in later.live) == [20 * 60 - 3, 20 * 60 - 1]
        assert len(second.for_user("alice").session_history()) == 1
        assert second.for_user("alice").sessions()[-1]["unconsolidated"] == 1
        server.reply({"items": [{"content": "Plays chess"}]}, {"items": []})
        clock.advance(minutes=20)
        for timer in later.live:
            timer.fire()
        assert sessions.window("bob", "telegram") == []
        assert sessions.window("alice", "slack") == []
    llm.close()


# no LLM, and memory off ----------------------------------------------------------------
def test_without_an_llm_idle_consolidation_is_skipped_said_and_the_session_kept(
        mem: Memory, clock: FakeClock, timers: FakeTimers,
        caplog: pytest.LogCaptureFixture) -> None:
    sessions = Sessions(mem, timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
    clock.advance(minutes=31)
    with caplog.at_level(logging.INFO, logger="ledgermem"):
        timers.live[0].fire()
        [result] = sessions.consolidate_idle()
    assert (result.status, result.why) == ("skipped", "no LLM configured")
    assert "consolidation skipped: no LLM configured" in caplog.text
    assert len(sessions.window("alice", "telegram")) == 2
    assert mem.for_user("alice").all_knowledge()["items"] == []


def test_reset_consolidates_then_clears(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers,
        server: ScriptedLLMServer) -> None:
    sessions = Sessions(llm_mem, timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
    server.reply(VEGETARIAN)
    result = sessions.reset("alice", "telegram")
    assert result == SessionResult("alice:telegram", "consolidated", turns=2, items=1)
    assert timers.live == []  # nothing left to consolidate when idle
    assert sessions.window("alice", "telegram") == []
    assert [i.content for i in llm_mem.for_user("alice").all_knowledge()["items"]] == [
        "Is vegetarian"]
    assert sessions.reset("alice", "telegram") == SessionResult("alice:telegram", "empty")
    assert len(server.chat_requests) == 1


def test_reset_clears_even_when_nothing_can_be_distilled(
        mem: Memory, clock: FakeClock, timers: FakeTimers) -> None:
    sessions = Sessions(mem, timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
    result = sessions.reset("alice", "telegram")
    assert result == SessionResult("alice:telegram", "cleared", turns=2,
                                   why="no LLM configured")
    assert sessions.window("alice", "telegram") == []
    alice = mem.for_user("alice")
    assert alice.all_knowledge()["items"] == []
    # kept on disk, and still found by a conversation search
    assert len(sessions.history("alice", "telegram")) == 2
    found = {h.turn.content for h in alice.search_conversations("vegetarian") if h.turn}
    assert found == {"I'm vegetarian", "reply to I'm vegetarian"}


def test_reset_after_a_failed_call_clears_and_says_why(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers,
        server: ScriptedLLMServer) -> None:
    sessions = Sessions(llm_mem, timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
    server.reply("not json")
    result = sessions.reset("alice", "telegram")
    assert (result.status, result.turns, result.why) == (
        "cleared", 2, "the consolidation call failed")
    assert sessions.window("alice", "telegram") == []


def test_memory_off_means_no_timer_no_sweep_and_a_reset_that_only_clears(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers,
        server: ScriptedLLMServer) -> None:
    sessions = Sessions(llm_mem, SessionOptions(enabled=False), timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
    assert timers.made == []
    clock.advance(hours=2)
    assert sessions.sweep() == [] and sessions.consolidate_idle() == []
    assert len(sessions.window("alice", "telegram")) == 2
    assert sessions.consolidate("alice", "telegram").status == "skipped"
    result = sessions.reset("alice", "telegram")
    assert (result.status, result.why) == ("cleared", "long-term memory is off")
    assert server.chat_requests == []


def test_auto_ingest_off_means_no_timer_but_reset_still_consolidates(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers,
        server: ScriptedLLMServer) -> None:
    sessions = Sessions(llm_mem, SessionOptions(auto_ingest=False), timer_factory=timers)
    chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
    clock.advance(hours=2)
    assert timers.made == [] and sessions.start() == []
    assert len(sessions.window("alice", "telegram")) == 2
    server.reply(VEGETARIAN)
    assert sessions.reset("alice", "telegram").status == "consolidated"


# beside maintain() and extraction ------------------------------------------------------
def test_the_sweep_and_maintain_at_once_apply_one_answer(
        db_url: str, clock: FakeClock, server: ScriptedLLMServer, timers: FakeTimers) -> None:
    """Each run asks the model (both replies are held until both have asked), worded
    differently; the store applies one answer and drops the other."""
    both = threading.Barrier(2, timeout=5)
    wordings = iter(["Dog Rex is a beagle", "Rex loves the beach at Matosinhos"])
    taken = threading.Lock()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        both.wait()
        with taken:
            return {"items": [{"content": next(wordings)}]}

    llm = make_llm(server, timeout=10)
    with Memory.open(db_url, clock=clock, embedder=None, llm=llm) as memory:
        sessions = Sessions(memory, timer_factory=timers)
        chat(sessions, clock, "alice", "telegram", "My dog Rex is a beagle",
             "He loves the beach at Matosinhos", "ok bye")
        clock.advance(days=15)  # idle for the sweep, and old enough for maintain()
        server.default = answer
        results: dict[str, Any] = {}
        runs = [threading.Thread(target=lambda: results.update(sweep=sessions.start())),
                threading.Thread(target=lambda: results.update(
                    maintain=memory.for_user("alice").maintain()["consolidate"]))]
        for run in runs:
            run.start()
        for run in runs:
            run.join(timeout=30)
        assert len(server.chat_requests) == 2
        marks = memory.store.events("alice", kinds=["turn.consolidated"])
        turns = [t.id for t in sessions.history("alice", "telegram")]
        assert sorted(i for mark in marks for i in mark.payload["ids"]) == sorted(turns)
        items = memory.for_user("alice").all_knowledge()["items"]
        assert len(items) == 1 and items[0].source == "consolidation"
        [swept] = results["sweep"]
        assert {swept.status, results["maintain"]["consolidated"]} in (
            {"consolidated", 0}, {"empty", 1})
        assert memory.verify()["problems"] == []
    llm.close()


def test_reset_distils_what_extraction_does_not_own_and_clears_the_rest(
        db_url: str, clock: FakeClock, server: ScriptedLLMServer, timers: FakeTimers) -> None:
    llm = make_llm(server)
    with Memory.open(db_url, clock=clock, embedder=None, llm=llm,
                     extraction=ExtractionOptions(background=False)) as memory:
        sessions = Sessions(memory, timer_factory=timers)
        chat(sessions, clock, "alice", "telegram", "I'm vegetarian")
        queued = memory.for_user("alice").add_turns(
            [{"role": "user", "content": "My sister Ana is a nurse in Braga " * 3}],
            session_id="alice:telegram", infer=True)  # pending: extraction's
        server.reply(VEGETARIAN)
        result = sessions.reset("alice", "telegram")
        assert result == SessionResult("alice:telegram", "consolidated", turns=3, items=1)
        [request] = server.chat_requests
        assert "vegetarian" in request.text and "Ana" not in request.text
        assert sessions.window("alice", "telegram") == []
        # extraction still learns the turn the reset cleared
        server.reply({"operations": [{"op": "ADD", "content": "Sister Ana is a nurse",
                                      "reason": "said"}]})
        memory.flush()
        alice = memory.for_user("alice")
        assert alice.status()["extraction"]["done"] == len(queued)
        assert sorted(i.content for i in alice.all_knowledge()["items"]) == [
            "Is vegetarian", "Sister Ana is a nurse"]
    llm.close()


# one person across channels ------------------------------------------------------------
USERS = """
users:
  alice:
    - {channel: telegram, sender: "12345"}
    - {channel: slack, sender: U01}
  bob:
    - channel: telegram
      sender: 67890
"""


def test_one_person_across_channels_shares_long_term_memory(
        llm_mem: Memory, clock: FakeClock, timers: FakeTimers, server: ScriptedLLMServer,
        tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    path.write_text(USERS, encoding="utf-8")
    users = UserDirectory.from_file(path)
    assert users.resolve("telegram", "12345") == users.resolve("slack", "U01") == "alice"
    assert users.resolve("telegram", "67890") == "bob"  # an unquoted number
    assert users.resolve("telegram", "555") == "telegram:555"
    assert users.resolve("slack", "555") == "slack:555"
    assert users.senders("alice") == [("slack", "U01"), ("telegram", "12345")]

    sessions = Sessions(llm_mem, timer_factory=timers)
    on_telegram = users.resolve("telegram", "12345")
    chat(sessions, clock, on_telegram, "telegram", "I'm vegetarian")
    chat(sessions, clock, users.resolve("slack", "U01"), "slack", "Hello from Slack")
    # each channel keeps its own session
    assert sessions.window("alice", "telegram")[0].content == "I'm vegetarian"
    assert sessions.window("alice", "slack")[0].content == "Hello from Slack"
    chat(sessions, clock, users.resolve("telegram", "555"), "telegram", "I eat meat")
    server.reply(VEGETARIAN)
    assert sessions.reset(on_telegram, "telegram").status == "consolidated"
    # long-term memory is the person's, whichever channel asks
    from_slack = llm_mem.for_user(users.resolve("slack", "U01"))
    assert [i.content for i in from_slack.all_knowledge()["items"]] == ["Is vegetarian"]
    assert len(sessions.window("alice", "slack")) == 2
    # two people on one channel stay apart
    stranger = llm_mem.for_user(users.resolve("telegram", "555"))
    assert stranger.all_knowledge()["items"] == []
    assert sessions.window("telegram:555", "telegram")[0].content == "I eat meat"
    assert session_key("telegram:555", "telegram") == "telegram:555:telegram"


@pytest.mark.parametrize("text, message", [
    ("users: [alice]", "'users' must map"),
    ("people: {}", "one key, 'users'"),
    ("- alice", "one key, 'users'"),
    ("users: {alice: {channel: slack, sender: U01}}", "users.alice must be a list"),
    ("users: {alice: [{channel: slack}]}", "exactly 'channel' and 'sender'"),
    ("users: {alice: [{channel: slack, sender: U01, extra: 1}]}", "exactly"),
    ("users: {alice: [{channel: '', sender: U01}]}", "users.alice[0].channel"),
    ("users: {alice: [{channel: slack, sender: [1]}]}", "users.alice[0].sender"),
    ("users: {alice: [{channel: slack, sender: true}]}", "users.alice[0].sender"),
    ("users: {'a:b': []}", "without ':'"),
    ("users: {alice: [{channel: 'a:b', sender: U01}]}", "cannot contain ':'"),
    ("users: {alice: [{channel: slack, sender: U01}], bob: [{channel: slack, sender: U01}]}",
     "already mapped to 'alice'"),
    ("users: {alice: [", "not valid YAML"),
])
def test_a_malformed_users_file_is_a_clear_error(tmp_path: Path, text: str,
                                                 message: str) -> None:
    path = tmp_path / "users.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        UserDirectory.from_file(path)


def test_an_empty_or_missing_users_file(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    assert UserDirectory.from_file(tmp_path / "empty.yaml").resolve("web", "x") == "web:x"
    (tmp_path / "bare.yaml").write_text("users:\n", encoding="utf-8")
    assert UserDirectory.from_file(tmp_path / "bare.yaml").senders("alice") == []
    with pytest.raises(ConfigError, match="cannot read the users file"):
        UserDirectory.from_file(tmp_path / "missing.yaml")


def test_bad_names_and_options_are_invalid_input() -> None:
    for user, channel in (("", "web"), ("alice", ""), ("alice", "a:b")):
        with pytest.raises(InvalidInput):
            session_key(user, channel)
    with pytest.raises(InvalidInput):
        UserDirectory().resolve("web", "")
    for options in ({"window_turns": 0}, {"window_turns": True},
                    {"idle_consolidate_minutes": 0}, {"idle_consolidate_minutes": "30"}):
        with pytest.raises(InvalidInput):
            SessionOptions(**options)


def test_bad_turns_store_nothing(mem: Memory, timers: FakeTimers) -> None:
    sessions = Sessions(mem, timer_factory=timers)
    with pytest.raises(InvalidInput):
        sessions.record("alice", "web", "narrator", "hello")
    with pytest.raises(InvalidInput):
        sessions.record("alice", "web", "user", "")
    assert sessions.history("alice", "web") == [] and timers.made == []


def test_turns_recorded_together_land_whole_or_not_at_all(mem: Memory,
                                                          timers: FakeTimers) -> None:
    sessions = Sessions(mem, timer_factory=timers)
    for reply in ("bad\x00reply", "", "x" * 100_001):
        with pytest.raises(InvalidInput):
            sessions.record_turns("alice", "web", [("user", "Hi"), ("assistant", reply)])
    assert sessions.history("alice", "web") == [] and timers.made == []
    said, answered = sessions.record_turns("alice", "web", [("user", "Hi"),
                                                            ("assistant", "Hello!")],
                                           metadata={"lang": "en"})
    assert [(t.role, t.content) for t in sessions.window("alice", "web")] == [
        ("user", "Hi"), ("assistant", "Hello!")]
    assert said.metadata == answered.metadata == {"lang": "en", "channel": "web"}
    assert len(timers.made) == 1 and timers.live == timers.made  # armed once, from the reply
