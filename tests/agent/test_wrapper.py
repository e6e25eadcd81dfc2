"""The agent wrapper (``ledgermem.agent.wrapper``): the three hook points, the frozen
prefix, sessions across channels and restarts, tool-failure logging, slash commands,
context switching, the async twin and the mixin.

The end-to-end story runs on SQLite and PostgreSQL (``db_url``); the rest sits above the
store, which the sessions and tools tests cover on both, and runs on a SQLite file.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from ledgermem import Memory
from ledgermem.agent.prompt import MEMORY_OFF, NO_MEMORIES, PromptOptions, session_only_prefix
from ledgermem.agent.sessions import SessionOptions, Sessions, UserDirectory
from ledgermem.agent.tools import MEMORY_OFF_REPLY, MEMORY_OFF_TOOL, openai_tools
from ledgermem.agent.wrapper import AsyncMemoryAgent, MemoryAgent, MemoryMixin, PreparedTurn
from ledgermem.aio import AsyncMemory
from ledgermem.errors import InvalidInput
from ledgermem.store.base import TurnQuery
from ledgermem.testing import ScriptedLLMServer
from tests.agent.test_sessions import FakeTimers
from tests.pipeline.conftest import make_llm
from tests.support import FakeClock

USERS = {"users": {"alice": [{"channel": "telegram", "sender": "111"},
                             {"channel": "slack", "sender": "U01"}]}}
ALICE_FACTS = {"items": [{"content": "Is vegetarian", "category": "preference"},
                         {"content": "Has a sister called Nora", "category": "fact"}]}
SECRETS = ("vegetarian", "nora")


@pytest.fixture
def timers() -> FakeTimers:
    return FakeTimers()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # trio is not installed


def texts(turn: PreparedTurn) -> str:
    """Every message the wrapper built, joined and lower-cased."""
    return "\n".join(m["content"] for m in turn.messages).lower()


def assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text.lower()


def exchange(agent: MemoryAgent, clock: FakeClock, text: str, reply: str) -> PreparedTurn:
    turn = agent.prepare(text)
    assert not turn.handled
    clock.advance(seconds=30)
    agent.finish(text, reply)
    clock.advance(seconds=30)
    return turn


# the end-to-end story --------------------------------------------------------------------
def test_alice_across_channels_bob_apart_forget_and_a_restart(
        db_url: str, clock: FakeClock, server: ScriptedLLMServer,
        timers: FakeTimers) -> None:
    directory = UserDirectory.from_mapping(USERS)
    llm = make_llm(server)
    memory = Memory.open(db_url, clock=clock, embedder=None, llm=llm)
    sessions = Sessions(memory, timer_factory=timers)
    alice = directory.resolve("telegram", "111")
    assert alice == directory.resolve("slack", "U01") == "alice"
    on_telegram = MemoryAgent(memory, user=alice, channel="telegram", sessions=sessions)

    # Alice tells the agent facts on telegram: nothing stored yet, so no profile call
    first = exchange(on_telegram, clock, "I'm vegetarian", "Noted!")
    assert first.new_prefix and first.prefix is not None and NO_MEMORIES in first.prefix
    assert [m["role"] for m in first.messages] == ["system", "user"]
    second = exchange(on_telegram, clock, "My sister is called Nora", "Nice name!")
    assert second.prefix == first.prefix and not second.new_prefix
    assert second.messages[1:3] == [{"role": "user", "content": "I'm vegetarian"},
                                    {"role": "assistant", "content": "Noted!"}]
    assert second.messages[-1]["content"].startswith("<memory-now>")
    assert second.messages[-1]["content"].endswith("\n\nMy sister is called Nora")
    # the stored turns are the clean text; nothing was queued for per-turn extraction
    stored = sessions.history(alice, "telegram")
    assert [t.content for t in stored] == ["I'm vegetarian", "Noted!",
                                           "My sister is called Nora", "Nice name!"]
    assert memory.for_user(alice).status()["extraction"]["pending"] == 0
    assert server.chat_requests == []

    # the idle timer consolidates the session through the scripted LLM
    [timer] = timers.live
    server.reply(ALICE_FACTS)
    clock.advance(minutes=30)
    timer.fire()
    [request] = server.chat_requests
    assert "I'm vegetarian" in request.text and "Nora" in request.text
    assert sessions.window(alice, "telegram") == []

    # a new session on slack shows them in the profile and the prefix
    on_slack = MemoryAgent(memory, user=directory.resolve("slack", "U01"), channel="slack",
                           sessions=sessions)
    server.reply({"bullets": ["Vegetarian", "Has a sister, Nora"]})
    turn = exchange(on_slack, clock, "What should I cook tonight?", "A lentil curry.")
    assert on_slack.profile is not None and on_slack.profile.source == "llm"
    assert turn.prefix is not None and turn.messages[0]["content"] == turn.prefix
    for shown in ("- Vegetarian", "- Has a sister, Nora", "- Is vegetarian",
                  "- Has a sister called Nora"):
        assert shown in turn.prefix
    assert len(server.chat_requests) == 2

    # Bob on the same channel sees none of it, in any prompt or tool result
    bob = directory.resolve("slack", "U02")
    as_bob = MemoryAgent(memory, user=bob, channel="slack", sessions=sessions)
    for text in ("Hi, what do you know about me?", "Am I vegetarian?"):
        bob_turn = exchange(as_bob, clock, text, "Not much yet.")
        assert NO_MEMORIES.lower() in texts(bob_turn)
        assert "nora" not in texts(bob_turn) and "is vegetarian" not in texts(bob_turn)
        assert "lentil" not in texts(bob_turn) and "cook" not in texts(bob_turn)
    for name, arguments in (("recall", {"query": "vegetarian"}),
                            ("recall", {"query": "sister Nora"}),
                            ("search_past_conversations", {"query": "vegetarian"}),
                            ("search_past_conversations", {"time_from": "2000-01-01"})):
        result = json.loads(as_bob.call_tool(name, arguments))
        assert "error" not in result
        found = json.dumps(result).lower()
        assert "nora" not in found and "is vegetarian" not in found \
            and "i'm vegetarian" not in found and "lentil" not in found
    assert len(server.chat_requests) == 2  # Bob has nothing: no profile call

    # /forget empties Alice's long-term memory; nothing of it reaches a later prompt
    forgot = on_slack.prepare("/forget")
    assert forgot.messages == [] and forgot.slash is not None
    assert forgot.slash.data == {"forgotten": 2}
    assert memory.for_user(alice).all_knowledge()["total"] == 0
    after = exchange(on_slack, clock, "What do you remember about me?", "Nothing.")
    assert after.new_prefix and after.prefix is not None and NO_MEMORIES in after.prefix
    assert_clean(texts(after))
    back = exchange(on_telegram, clock, "Hello again", "Hi!")
    assert back.new_prefix  # the telegram session was consolidated: a new one began
    assert_clean(texts(back))
    assert len(server.chat_requests) == 2  # nothing stored: no profile call

    # a restart in the middle of the slack session resumes its window
    before = on_slack.prepare("And tomorrow?")
    sessions.close()
    memory.close()
    llm.close()
    llm = make_llm(server)
    memory = Memory.open(db_url, clock=clock, embedder=None, llm=llm)
    sessions = Sessions(memory, timer_factory=FakeTimers())
    resumed = MemoryAgent(memory, user=alice, channel="slack", sessions=sessions)
    again = resumed.prepare("And tomorrow?")
    assert again.messages[1:] == before.messages[1:]
    assert [m["content"] for m in again.messages[1:3]] == [
        "What should I cook tonight?", "A lentil curry."]
    assert again.prefix == before.prefix
    assert_clean(texts(again))
    resumed.finish("And tomorrow?", "Soup.")
    assert sessions.window(alice, "slack")[-1].content == "Soup."
    sessions.close()
    memory.close()
    llm.close()
    assert server.remaining == 0


# the frozen prefix -----------------------------------------------------------------------
@pytest.fixture
def memory(tmp_path: Any, clock: FakeClock) -> Iterator[Memory]:
    sync = Memory.open(str(tmp_path / "m.db"), clock=clock, embedder=None)
    yield sync
    sync.close()


def test_the_prefix_is_byte_identical_across_a_session_that_writes_and_recalls(
        memory: Memory, clock: FakeClock, timers: FakeTimers) -> None:
    alice = memory.for_user("alice")
    alice.remember("Prefers green tea", "preference")
    alice.remember("Works as a nurse", "fact")
    sessions = Sessions(memory, SessionOptions(window_turns=2), timer_factory=timers)
    agent = MemoryAgent(memory, user="alice", channel="web", sessions=sessions)
    turns = [exchange(agent, clock, "Hi", "Hello!")]
    prefix = turns[0].prefix
    assert prefix is not None and "Prefers green tea" in prefix
    written = json.loads(agent.call_tool("remember", {"content": "Owns a cat named Miso"}))
    assert written["written"] == "added"
    turns.append(exchange(agent, clock, "I have a cat, Miso", "Lovely!"))
    recalled = json.loads(agent.call_tool("recall", json.dumps({"query": "tea"})))
    assert recalled["results"][0]["content"] == "Prefers green tea"
    turns.append(exchange(agent, clock, "What do I drink?", "Green tea."))
    assert agent.prepare("/remember I live in Porto").handled
    # the window (2 user turns) has slid past the session's first turn
    turns.append(exchange(agent, clock, "Thanks", "Any time."))
    turns.append(exchange(agent, clock, "Bye", "Bye!"))
    assert [t.messages[0]["content"] for t in turns] == [prefix] * len(turns)
    assert [t.new_prefix for t in turns] == [True, False, False, False, False]
    assert "Miso" not in prefix and "Porto" not in prefix
    # the next session's prefix shows what was written in this one
    reset = agent.prepare("/reset")
    assert reset.handled and reset.reset is not None and reset.reset.status == "cleared"
    assert sessions.window("alice", "web") == []
    fresh = agent.prepare("Hello")
    assert fresh.new_prefix and fresh.prefix != prefix and fresh.prefix is not None
    assert "Owns a cat named Miso" in fresh.prefix and "I live in Porto" in fresh.prefix
    assert fresh.messages[1:-1] == []


@pytest.mark.parametrize("reply", ["bad\x00reply", "", "x" * 100_001, None])
def test_a_refused_reply_stores_neither_turn_and_keeps_the_prefix(
        memory: Memory, clock: FakeClock, timers: FakeTimers, reply: Any) -> None:
    # Regression: finish stored the user's turn before the reply was refused; every
    # retry added another orphan question, and the next prepare rebuilt the prefix.
    sessions = Sessions(memory, timer_factory=timers)
    agent = MemoryAgent(memory, user="alice", channel="web", sessions=sessions)
    first = agent.prepare("hello question")
    for _ in range(2):  # the host retries
        with pytest.raises(InvalidInput):
            agent.finish("hello question", reply)
    assert sessions.history("alice", "web") == []
    assert memory.store.query_turns("alice", TurnQuery()) == []  # in no session either
    again = agent.prepare("hello question")
    assert not again.new_prefix and again.prefix == first.prefix
    said, answered = agent.finish("hello question", "Hello!")
    assert [(t.role, t.content) for t in sessions.history("alice", "web")] == [
        ("user", "hello question"), ("assistant", "Hello!")]
    assert (said.session_id, answered.session_id) == ("alice:web", "alice:web")
    assert not agent.prepare("and then?").new_prefix


# tools -------------------------------------------------------------------------------------
def test_a_failing_host_tool_is_logged_with_its_duration_and_becomes_an_error_item(
        memory: Memory, timers: FakeTimers) -> None:
    agent = MemoryAgent(memory, user="alice", channel="cli",
                        sessions=Sessions(memory, timer_factory=timers))

    def read_file(path: str, *, encoding: str = "utf-8") -> str:
        time.sleep(0.02)
        raise FileNotFoundError(f"no such file: {path}")

    with pytest.raises(FileNotFoundError, match="no such file: /etc/x"):
        agent.run_tool("read_file", read_file, "/etc/x", encoding="latin-1")
    alice = memory.for_user("alice")
    [call] = alice.tool_errors()
    assert (call.name, call.success) == ("read_file", False)
    assert call.error == "FileNotFoundError: no such file: /etc/x"
    assert call.duration_ms is not None and call.duration_ms >= 20
    assert call.arguments == {"encoding": "latin-1", "*args": ["/etc/x"]}
    assert call.session_id == "alice:cli"
    [item] = alice.all_knowledge(category="error")["items"]
    assert item.content == "Tool read_file failed: FileNotFoundError: no such file: /etc/x"
    assert item.source == "error_auto"

    # a succeeding call is logged as a success; odd arguments are kept as text
    assert agent.run_tool("add", lambda a, b: a + b, 2, b=3) == 5
    agent.run_tool("show", repr, object())
    stats = {row["name"]: row for row in alice.tool_stats()}
    assert stats["add"]["calls"] == 1 and stats["add"]["failures"] == 0
    assert stats["read_file"]["failures"] == 1
    assert alice.tool_errors() == [call]
    # the next prefix lists the error so the model avoids it
    prefix = agent.prepare("hi").prefix
    assert prefix is not None and "Tool read_file failed" in prefix
    # memory tools go to the dispatcher, never to tool history
    assert agent.is_memory_tool("recall") and not agent.is_memory_tool("read_file")
    assert json.loads(agent.call_tool("forget", {"id": "nope"}))["code"] == "not_found"
    assert json.loads(agent.call_tool("read_file", {}))["code"] == "unknown_tool"
    assert set(stats) == {"add", "read_file", "show"}
    assert agent.tools() == openai_tools()
    assert [t["name"] for t in agent.anthropic_tools()] == [
        t["function"]["name"] for t in agent.tools()]
    with pytest.raises(InvalidInput):
        agent.run_tool("", lambda: None)


# slash commands ----------------------------------------------------------------------------
def test_slash_commands_never_reach_the_model(
        tmp_path: Any, clock: FakeClock, server: ScriptedLLMServer,
        timers: FakeTimers) -> None:
    llm = make_llm(server)
    with Memory.open(str(tmp_path / "m.db"), clock=clock, embedder=None, llm=llm) as memory:
        sessions = Sessions(memory, timer_factory=timers)
        agent = MemoryAgent(memory, user="alice", channel="telegram", sessions=sessions)
        for text, command in (("/remember I like green tea", "remember"),
                              ("/memory", "memory"), ("/memory@my_bot", "memory"),
                              ("/help", "help"), ("/forget", "forget"),
                              ("/reset", "reset"), ("/nonsense", "help")):
            turn = agent.prepare(text)
            assert turn.messages == [] and turn.handled and turn.prefix is None
            assert turn.slash is not None and turn.slash.command == command
            assert turn.slash.reply
        assert sessions.history("alice", "telegram") == []  # none is a turn
        assert server.chat_requests == []

        # /reset with a conversation: consolidated, then cleared
        exchange(agent, clock, "I'm vegetarian", "Noted!")
        server.reply({"items": [{"content": "Is vegetarian", "category": "preference"}]})
        reset = agent.prepare("/reset")
        assert reset.messages == [] and reset.reset is not None
        assert reset.reset.status == "consolidated" and reset.slash is not None
        assert reset.slash.data == {"status": "consolidated", "turns": 2, "items": 1}
        assert "1 memories were saved" in reset.slash.reply
        assert sessions.window("alice", "telegram") == []
        assert timers.live == []
        assert len(server.chat_requests) == 1
    llm.close()


def test_forget_keeps_the_session_but_idle_consolidation_never_learns_it_again(
        tmp_path: Any, clock: FakeClock, server: ScriptedLLMServer,
        timers: FakeTimers) -> None:
    llm = make_llm(server)
    with Memory.open(str(tmp_path / "m.db"), clock=clock, embedder=None, llm=llm) as memory:
        sessions = Sessions(memory, timer_factory=timers)
        agent = MemoryAgent(memory, user="alice", channel="telegram", sessions=sessions)
        other = MemoryAgent(memory, user="alice", channel="slack", sessions=sessions)
        exchange(agent, clock, "I'm vegetarian", "Noted!")
        exchange(other, clock, "My sister is called Nora", "Nice name!")
        memory.for_user("alice").remember("Lives in Porto", "fact")
        # said, not consolidated yet, and then Alice asks to forget everything
        forgot = agent.prepare("/forget")
        assert forgot.slash is not None and forgot.slash.data == {"forgotten": 1}
        # the sessions are kept: the window still replays what was said
        assert [t.content for t in sessions.window("alice", "telegram")] == [
            "I'm vegetarian", "Noted!"]
        exchange(agent, clock, "I moved to Lyon", "Welcome to Lyon!")
        # the telegram session goes idle: only what followed /forget is shown the model
        server.reply({"items": [{"content": "Lives in Lyon", "category": "fact"}]})
        clock.advance(minutes=30)
        for timer in timers.live:
            timer.fire()
        [request] = server.chat_requests
        assert "Lyon" in request.text
        assert "vegetarian" not in request.text and "Nora" not in request.text
        # the slack session held only forgotten turns: marked, no call, nothing learnt
        assert sessions.window("alice", "telegram") == []
        assert sessions.window("alice", "slack") == []
        knowledge = memory.for_user("alice").all_knowledge()["items"]
        assert [item.content for item in knowledge] == ["Lives in Lyon"]
        assert knowledge[0].metadata["turn_ids"] == [
            t.id for t in sessions.history("alice", "telegram")[2:]]
        assert len(sessions.history("alice", "telegram")) == 4  # all kept on disk
        assert memory.verify()["problems"] == []
    llm.close()


def test_with_long_term_memory_off_the_agent_is_session_only(
        memory: Memory, clock: FakeClock, timers: FakeTimers) -> None:
    alice = memory.for_user("alice")
    alice.remember("Prefers green tea", "preference")
    due = alice.remember("Call the dentist", "reminder",
                         due_at=(clock() + timedelta(hours=2)).isoformat())
    sessions = Sessions(memory, SessionOptions(enabled=False), timer_factory=timers)
    agent = MemoryAgent(memory, user="alice", channel="web", sessions=sessions)
    assert not agent.long_term
    assert agent.tools() == [] and agent.anthropic_tools() == []
    turn = exchange(agent, clock, "Hi", "Hello!")
    assert turn.prefix == session_only_prefix() and MEMORY_OFF in turn.prefix
    assert agent.profile is not None and agent.profile.source == "off"
    shown = texts(turn)
    assert "green tea" not in shown and "dentist" not in shown and "current time:" in shown
    assert alice.get(due.id).reminded_at is None  # nothing shown, nothing marked
    # the tools and the memory commands refuse, and change nothing
    before = alice.all_knowledge()["total"]
    refused = json.loads(agent.call_tool("remember", {"content": "Owns a cat"}))
    assert refused["code"] == "memory_off" and refused["error"] == MEMORY_OFF_TOOL
    assert json.loads(agent.call_tool("recall", {"query": "tea"}))["code"] == "memory_off"
    for text in ("/remember I own a cat", "/memory", "/forget"):
        answered = agent.prepare(text)
        assert answered.slash is not None and answered.slash.reply == MEMORY_OFF_REPLY
    assert alice.all_knowledge()["total"] == before == 2
    # a failing host tool is logged, but no error item is learnt
    with pytest.raises(ValueError):
        agent.run_tool("parse", int, "x")
    assert [c.name for c in alice.tool_errors()] == ["parse"]
    assert alice.all_knowledge(category="error")["total"] == 0
    # the conversation is kept and replayed; no idle timer; /reset clears it
    second = exchange(agent, clock, "Again", "Sure.")
    assert second.prefix == turn.prefix and not second.new_prefix
    assert [m["content"] for m in second.messages[1:3]] == ["Hi", "Hello!"]
    assert timers.live == []
    reset = agent.prepare("/reset")
    assert reset.reset is not None and reset.reset.status == "cleared"
    assert sessions.window("alice", "web") == []
    # custom instructions stay first
    custom = MemoryAgent(memory, user="alice", channel="cli", sessions=sessions,
                         options=PromptOptions(instructions="You are a terse assistant."))
    prefix = custom.prepare("Hi").prefix
    assert prefix == "You are a terse assistant.\n" + MEMORY_OFF


# context switching -------------------------------------------------------------------------
def test_switching_the_context_rebuilds_the_prefix_and_keeps_the_session(
        memory: Memory, clock: FakeClock, timers: FakeTimers) -> None:
    alice = memory.for_user("alice")
    alice.remember("Deploy with kubectl apply", "skill", context="work")
    alice.remember("Dentist on Thursday", "fact", context="personal")
    alice.remember("Name is Alice", "fact")
    agent = MemoryAgent(memory, user="alice", channel="cli", context="work",
                        sessions=Sessions(memory, timer_factory=timers))
    work = exchange(agent, clock, "Ship it", "Deploying.")
    assert work.prefix is not None and agent.context == "work"
    assert "kubectl" in work.prefix and "Name is Alice" in work.prefix
    assert "Dentist" not in work.prefix
    agent.set_context("personal")
    personal = agent.prepare("What's this week?")
    assert personal.new_prefix and personal.prefix is not None
    assert "Dentist" in personal.prefix and "kubectl" not in personal.prefix
    assert "Name is Alice" in personal.prefix
    assert [m["content"] for m in personal.messages[1:3]] == ["Ship it", "Deploying."]
    again = agent.prepare("And next week?")
    assert not again.new_prefix and again.prefix == personal.prefix
    written = json.loads(agent.call_tool("remember", {"content": "Gym on Mondays"}))
    assert written["context"] == "personal"
    with pytest.raises(InvalidInput):
        agent.set_context(" ")
    assert agent.context == "personal"


# async -------------------------------------------------------------------------------------
def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


NOT_AWAITED = {"tools", "anthropic_tools", "is_memory_tool"}


def test_the_async_agent_has_the_sync_agents_methods(memory: Memory) -> None:
    agent = MemoryAgent(memory, user="alice", channel="web")
    amem = AsyncMemory.from_sync(memory)
    asynchronous = AsyncMemoryAgent(amem, user="alice", channel="web")
    methods = {name for name in public(MemoryAgent)
               if callable(getattr(MemoryAgent, name))}
    assert methods <= public(AsyncMemoryAgent)
    for name in methods:
        bound = getattr(asynchronous, name)
        assert inspect.iscoroutinefunction(bound) == (name not in NOT_AWAITED), name
        if name != "run_tool":  # the async one also takes coroutine functions
            assert inspect.signature(bound) == inspect.signature(getattr(agent, name)), name
    # the sync agent's attributes are reachable as properties or through .sync
    assert {"session_id", "context", "profile", "memory"} <= public(AsyncMemoryAgent)
    assert asynchronous.sync.memory is memory
    agent.close()


@pytest.mark.anyio
async def test_the_async_agent(memory: Memory, clock: FakeClock, timers: FakeTimers) -> None:
    amem = AsyncMemory.from_sync(memory, threads=2)
    sessions = Sessions(memory, timer_factory=timers)
    async with AsyncMemoryAgent(amem, user="alice", channel="web",
                                sessions=sessions) as agent:
        assert agent.session_id == "alice:web" and agent.sync.sessions is sessions
        turn = await agent.prepare("I like tea")
        assert turn.new_prefix and [m["role"] for m in turn.messages] == ["system", "user"]
        written = json.loads(await agent.call_tool("remember", {"content": "Likes tea"}))
        assert written["written"] == "added"
        await agent.finish("I like tea", "Noted.")
        again = await agent.prepare("More?")
        assert again.prefix == turn.prefix and len(again.messages) == 4
        assert (await agent.prepare("/memory")).messages == []

        async def fetch(url: str) -> str:
            await asyncio.sleep(0.01)
            raise TimeoutError(url)

        with pytest.raises(TimeoutError):
            await agent.run_tool("fetch", fetch, "https://example.com")
        assert await agent.run_tool("add", lambda a, b: a + b, 1, 2) == 3
        [failed] = memory.for_user("alice").tool_errors()
        assert failed.name == "fetch" and failed.duration_ms is not None
        assert failed.duration_ms >= 10
        await agent.set_context("work")
        assert agent.context == "work" and (await agent.prepare("hi")).new_prefix
        assert agent.tools() == openai_tools()
        assert agent.is_memory_tool("recall")


# the mixin ---------------------------------------------------------------------------------
class Agent:
    """A host agent whose __init__ does not call super().__init__."""

    def __init__(self, name: str = "bot") -> None:
        self.name = name


def test_the_mixin_first_works(memory: Memory, timers: FakeTimers) -> None:
    class Bot(MemoryMixin, Agent):
        pass

    class Child(Bot):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(name="child", **kwargs)

    sessions = Sessions(memory, timer_factory=timers)
    bot = Bot(memory=memory, user="alice", channel="cli", name="helper",
              memory_sessions=sessions, memory_context="work")
    assert bot.name == "helper" and isinstance(bot.memory_agent, MemoryAgent)
    assert bot.memory_agent.context == "work" and bot.memory_agent.sessions is sessions
    child = Child(memory=memory, user="bob", channel="cli", memory_sessions=sessions)
    assert child.name == "child" and child.memory_agent.user == "bob"


def test_the_mixin_in_the_wrong_order_raises_at_construction(memory: Memory) -> None:
    with pytest.raises(TypeError, match=r"Put MemoryMixin first: class Wrong\(MemoryMixin, "
                                        r"Agent\)"):
        class Wrong(Agent, MemoryMixin):
            pass

    class Skips(MemoryMixin, Agent):
        def __init__(self) -> None:
            Agent.__init__(self, "skipper")  # never reaches MemoryMixin.__init__

    with pytest.raises(TypeError, match=r"without running MemoryMixin\.__init__"):
        Skips()


def test_a_changed_config_file_rebuilds_the_prompt_and_keeps_the_session(
        tmp_path: Any, clock: FakeClock) -> None:
    import os

    from ledgermem.config import SettingsWatcher, prompt_options

    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  preload: true\n")
    with Memory.open(tmp_path / "cfg.db", clock=clock, embedder=None) as memory:
        memory.for_user("alice").remember("Is vegetarian", category="preference")
        with SettingsWatcher(config, os.environ, lambda s: None, start=False) as watcher, \
                MemoryAgent(memory, user="alice", channel="cli",
                            options=prompt_options(watcher.settings)) as agent:
            watcher.on_change = lambda new: agent.reconfigure(prompt_options(new))
            first = exchange(agent, clock, "Hello", "Hi")
            assert first.prefix is not None and "Profile" in first.prefix
            config.write_text("memory:\n  preload: false\n")
            assert watcher.check()
            after = agent.prepare("And now?")
            assert after.new_prefix and after.prefix is not None
            assert "Profile" not in after.prefix and "Is vegetarian" in after.prefix
            assert [m["content"] for m in after.messages[1:3]] == ["Hello", "Hi"]
            with pytest.raises(InvalidInput):
                agent.reconfigure("preload: false")  # type: ignore[arg-type]
