"""The OpenAI Agents SDK adapter against the SDK's own classes: a real ``Runner`` with
the SDK's chat-completions model talking to the scripted server on loopback, resumed
after a restart; the window, ``pop_item``, ``clear_session``, idle consolidation, the
memory tools, isolation and bad input. SQLite files under ``tmp_path``."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from agents.memory import Session, SessionSettings, SQLiteSession
from openai import AsyncOpenAI

from ledgermem import Memory
from ledgermem.adapters import MissingExtra
from ledgermem.adapters.openai_agents import LedgermemSession, memory_tools
from ledgermem.agent.sessions import SessionOptions, Sessions
from ledgermem.errors import InvalidInput
from ledgermem.store.base import TurnQuery
from ledgermem.testing import Reply, ScriptedLLMServer
from ledgermem.validation import MAX_JSON_CHARS
from tests.agent.test_sessions import FakeTimers
from tests.pipeline.conftest import make_llm
from tests.support import FakeClock

OFFLINE = RunConfig(tracing_disabled=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def memory(tmp_path: Path, clock: FakeClock) -> Iterator[Memory]:
    opened = Memory.open(tmp_path / "agents.db", clock=clock, embedder=None)
    yield opened
    opened.close()


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def agent_on(server: ScriptedLLMServer, *tools: Any) -> Agent[Any]:
    client = AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0)
    return Agent(name="helper", instructions="Be brief.", tools=list(tools),
                 model=OpenAIChatCompletionsModel(model="scripted", openai_client=client))


def said(session_items: list[Any]) -> list[tuple[str, str]]:
    """``(role or type, text)`` of each item, for assertions."""
    out = []
    for item in session_items:
        content = item.get("content")
        text = content if isinstance(content, str) else " ".join(
            p.get("text", "") for p in content or []) if "content" in item else \
            item.get("output") or item.get("name", "")
        out.append((item.get("role") or item.get("type"), text))
    return out


# a real Runner, resumed after a restart ----------------------------------------------------
@pytest.mark.anyio
async def test_runner_conversation_resumes_after_reopening_the_store(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer) -> None:
    path = tmp_path / "restart.db"
    server.reply(Reply(tool_calls=[{"name": "weather", "arguments": {"city": "Porto"}}]),
                 "It is sunny in Porto.", "You asked about the weather in Porto.")
    memory = Memory.open(path, clock=clock, embedder=None)
    session = LedgermemSession(memory, user="alice", channel="web")
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    result = await Runner.run(agent_on(server, weather), "Weather in Porto?",
                              session=session, run_config=OFFLINE)
    assert result.final_output == "It is sunny in Porto."
    turns = memory.store.query_turns("alice", TurnQuery(session_id="alice:web"))
    assert [(t.role, t.content) for t in turns] == [
        ("user", "Weather in Porto?"),
        ("assistant", '[called weather({"city": "Porto"})]'),
        ("tool", "[tool result: sunny in Porto]"),
        ("assistant", "It is sunny in Porto.")]
    memory.close()

    memory = Memory.open(path, clock=clock, embedder=None)  # the process restarted
    try:
        resumed = LedgermemSession(memory, user="alice", channel="web")
        result = await Runner.run(agent_on(server, weather), "What did I ask?",
                                  session=resumed, run_config=OFFLINE)
        assert result.final_output == "You asked about the weather in Porto."
        sent = server.chat_requests[-1].body["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool",
                                             "assistant", "user"]
        assert sent[1]["content"] == "Weather in Porto?"
        assert sent[3]["content"] == "sunny in Porto"
        assert said(await resumed.get_items())[-2:] == [
            ("user", "What did I ask?"),
            ("assistant", "You asked about the weather in Porto.")]
    finally:
        memory.close()


@pytest.mark.anyio
async def test_two_users_on_one_channel_never_share_a_history(
        memory: Memory, server: ScriptedLLMServer) -> None:
    server.reply("Hello Alice.", "Hello, whoever you are.")
    alice = LedgermemSession(memory, user="alice")
    bob = LedgermemSession(memory, user="bob")
    await Runner.run(agent_on(server), "I am Alice", session=alice, run_config=OFFLINE)
    await Runner.run(agent_on(server), "Who am I?", session=bob, run_config=OFFLINE)
    assert "Alice" not in server.chat_requests[-1].text
    assert said(await bob.get_items()) == [("user", "Who am I?"),
                                           ("assistant", "Hello, whoever you are.")]
    assert alice.session_id == "alice:openai-agents" != bob.session_id


# the window and the SDK's limit ---------------------------------------------------------------
def exchange(n: int) -> list[Any]:
    return [{"role": "user", "content": f"question {n}"},
            {"type": "message", "role": "assistant", "status": "completed", "id": f"m{n}",
             "content": [{"type": "output_text", "text": f"answer {n}", "annotations": []}]}]


@pytest.mark.anyio
async def test_the_model_is_given_the_window_and_at_most_the_limit(memory: Memory) -> None:
    session = LedgermemSession(memory, user="alice", options=SessionOptions(window_turns=2))
    for n in range(3):
        await session.add_items(exchange(n))
    assert said(await session.get_items()) == [
        ("user", "question 1"), ("assistant", "answer 1"),
        ("user", "question 2"), ("assistant", "answer 2")]
    assert (await session.get_items())[-1] == exchange(2)[1]  # items come back as given
    assert said(await session.get_items(limit=1)) == [("assistant", "answer 2")]
    assert await session.get_items(limit=0) == []
    limited = LedgermemSession(memory, user="alice", options=SessionOptions(window_turns=2),
                               session_settings=SessionSettings(limit=3))
    assert len(await limited.get_items()) == 3
    assert len(await session.history()) == 6  # the whole conversation stays on disk


@pytest.mark.anyio
async def test_get_items_limits_agree_with_the_sdks_sqlite_session(
        memory: Memory, tmp_path: Path) -> None:
    items: list[Any] = [{"role": "user", "content": f"question {n}"} for n in range(3)]
    session = LedgermemSession(memory, user="alice")
    reference = SQLiteSession("alice", tmp_path / "sdk.db")
    await session.add_items(items)
    await reference.add_items(items)
    try:
        # fewer, all, more than there are (once and twice over), none, the SDK's
        # "everything" (None, or any negative limit: SQLite's LIMIT -1)
        for limit in (1, 2, 3, 4, 5, 6, 7, 100, 0, -1, -5, None):
            expected = items if limit is None or limit < 0 else items[-limit:] if limit \
                else []
            assert await session.get_items(limit) == await reference.get_items(limit) \
                == expected, limit
        for settings in (SessionSettings(limit=5), SessionSettings(limit=-1),
                         SessionSettings(limit=0), SessionSettings(limit=2)):
            mine = LedgermemSession(memory, user="alice", session_settings=settings)
            theirs = SQLiteSession("alice", tmp_path / "sdk.db", session_settings=settings)
            try:
                assert await mine.get_items() == await theirs.get_items(), settings
                assert await mine.get_items(-1) == await theirs.get_items(-1) == items
            finally:
                theirs.close()
    finally:
        reference.close()


@pytest.mark.anyio
async def test_an_item_over_the_json_cap_is_kept_with_its_longest_texts_cut_and_flagged(
        memory: Memory, tmp_path: Path) -> None:
    huge: Any = {"role": "user", "content": "x" * 2_000_000}
    output: Any = {"type": "function_call_output", "call_id": "call_1",
                   "output": "row\n" * 60_000}  # a long tool result: newlines escaped
    small: Any = {"role": "assistant", "content": "short " * 10}
    near: Any = {"role": "user", "content": "y" * 99_000}  # under the cap: kept whole
    reference = SQLiteSession("alice", tmp_path / "sdk.db")
    await reference.add_items([huge, output, small, near])  # the SDK's session takes them
    reference.close()

    session = LedgermemSession(memory, user="alice")
    await session.add_items([huge, output, small, near])
    back: list[Any] = await session.get_items()
    assert back[2:] == [small, near]
    cut, cut_output = back[0], back[1]
    assert cut["role"] == "user" and cut["content"].startswith("x" * 50_000)
    assert cut["content"].endswith(" characters]") and "… [cut: " in cut["content"]
    assert cut_output["call_id"] == "call_1" and "… [cut: " in cut_output["output"]
    assert cut_output["output"].startswith("row\n" * 1_000)
    turns = memory.store.query_turns("alice", TurnQuery())
    for turn, item in zip(turns, (huge, output, small, near), strict=True):
        size = len(json.dumps(turn.metadata, ensure_ascii=False))
        assert size <= MAX_JSON_CHARS
        if item in (huge, output):
            assert turn.metadata["truncated"] is True
            assert turn.metadata["original_length"] == len(json.dumps(item, ensure_ascii=False))
            assert size > MAX_JSON_CHARS - 200  # cut no more than needed
        else:
            assert "truncated" not in turn.metadata and "original_length" not in turn.metadata
    assert said([await session.pop_item()]) == [("user", "y" * 99_000)]


@pytest.mark.anyio
async def test_pop_item_takes_the_newest_item_out_of_the_session_and_of_learning(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer) -> None:
    memory = Memory.open(tmp_path / "pop.db", clock=clock, embedder=None,
                         llm=make_llm(server))
    try:
        session = LedgermemSession(memory, user="alice")
        assert await session.pop_item() is None
        await session.add_items([{"role": "user", "content": "I live in Lisbon"},
                                 {"role": "user", "content": "I live in Narnia"}])
        assert await session.pop_item() == {"role": "user", "content": "I live in Narnia"}
        assert said(await session.get_items()) == [("user", "I live in Lisbon")]
        server.reply({"items": [{"content": "Lives in Lisbon"}]})
        result = await session.consolidate()
        assert result.status == "consolidated" and result.items == 1
        assert "Lisbon" in server.chat_requests[-1].text
        assert "Narnia" not in server.chat_requests[-1].text
        assert await session.get_items() == []
    finally:
        memory.close()


@pytest.mark.anyio
async def test_clear_session_consolidates_and_the_memory_tools_recall_it(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer) -> None:
    memory = Memory.open(tmp_path / "clear.db", clock=clock, embedder=None,
                         llm=make_llm(server))
    try:
        session = LedgermemSession(memory, user="alice")
        await session.add_items([{"role": "user", "content": "My sister Nora lives in Oslo"}])
        server.reply({"items": [{"content": "Sister Nora lives in Oslo", "category": "fact"}]})
        await session.clear_session()
        assert await session.get_items() == []
        server.reply(Reply(tool_calls=[{"name": "recall", "arguments": {"query": "Nora"}}]),
                     "Nora lives in Oslo.")
        agent = agent_on(server, *memory_tools(memory.for_user("alice")))
        result = await Runner.run(agent, "Where does Nora live?", session=session,
                                  run_config=OFFLINE)
        assert result.final_output == "Nora lives in Oslo."
        tool_result = server.chat_requests[-1].body["messages"][-1]
        assert tool_result["role"] == "tool"
        assert "Sister Nora lives in Oslo" in tool_result["content"]
        # a bad call is an error the model reads, not an exception
        recall = memory_tools(memory.for_user("alice"))[1]
        assert json.loads(await recall.on_invoke_tool(None, "not json"))[  # type: ignore[arg-type]
            "code"] == "invalid_arguments"
    finally:
        memory.close()


@pytest.mark.anyio
async def test_an_idle_session_is_consolidated_and_starts_empty(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer) -> None:
    memory = Memory.open(tmp_path / "idle.db", clock=clock, embedder=None,
                         llm=make_llm(server))
    timers = FakeTimers()
    try:
        shared = Sessions(memory, timer_factory=timers)
        session = LedgermemSession(shared, user="alice")
        await session.add_items(exchange(0))
        assert [t.cancelled for t in timers.made] == [True, False]  # re-armed per item
        server.reply({"items": [{"content": "Asked question 0"}]})
        timers.made[-1].fire()
        assert await session.get_items() == []
        assert [i.content for i in memory.for_user("alice").by_category("fact")] == [
            "Asked question 0"]
    finally:
        memory.close()


# bad input ---------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_bad_input_is_refused_and_stores_nothing(memory: Memory) -> None:
    session = LedgermemSession(memory, user="alice")
    with pytest.raises(InvalidInput):
        await session.add_items([{"role": "user", "content": "fine"}, "not an item"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput):
        await session.add_items([{"role": "user", "content": "NUL \x00 inside"}])
    assert await session.get_items() == []
    with pytest.raises(InvalidInput):
        LedgermemSession(memory, user="alice", channel="a:b")
    with pytest.raises(InvalidInput):
        LedgermemSession(memory, user="")
    with pytest.raises(InvalidInput):
        LedgermemSession("memory.db", user="alice")  # type: ignore[arg-type]


def test_importing_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents.items", None)
    monkeypatch.delitem(sys.modules, "ledgermem.adapters.openai_agents")
    with pytest.raises(MissingExtra, match=r"ledgermem\[openai-agents\]"):
        importlib.import_module("ledgermem.adapters.openai_agents")


def test_the_example_runs_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from examples.openai_agents_session import main

    assert main(["--db", str(tmp_path / "example.db"), "--keyword-only"]) == 0
    out = capsys.readouterr().out
    assert "(restarted)" in out
    assert "assistant> Earlier you said: I'm vegetarian." in out
