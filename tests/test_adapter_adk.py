"""The Google ADK adapter against ADK's own classes: a real ``Runner`` (ADK's OpenAI
integration talking to the scripted server on loopback, or ADK's ``MockModel``), the
session service contract, the memory service, isolation and the ``ledgermem://``
registry scheme.

The session service contract runs on SQLite and PostgreSQL (``mem``); the rest runs on
a SQLite file.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed")

from google.adk.agents import LlmAgent
from google.adk.cli.agent_test_runner import MockModel
from google.adk.cli.service_registry import get_service_registry, load_services_module
from google.adk.cli.utils.service_factory import (
    create_memory_service_from_options,
    create_session_service_from_options,
)
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.integrations.openai import OpenAILlm
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.tools.load_memory_tool import load_memory_tool as load_memory
from google.adk.tools.preload_memory_tool import preload_memory_tool as preload_memory
from google.genai import types

from ledgermem import Memory
from ledgermem.adapters import MissingExtra
from ledgermem.adapters.adk import (
    AdkLedger,
    LedgermemMemoryService,
    LedgermemSessionService,
    adk_services,
    app_ledger,
    close_services,
    ledger_user,
    open_services,
    register,
    session_channel,
)
from ledgermem.agent.sessions import Sessions
from ledgermem.errors import InvalidInput, NotFound
from ledgermem.store.base import TurnQuery
from ledgermem.testing import ScriptedLLMServer
from ledgermem.validation import MAX_JSON_CHARS
from tests.agent.test_sessions import FakeTimers
from tests.pipeline.conftest import make_llm
from tests.support import FakeClock

APP = "shop"
PAST = "<PAST_CONVERSATIONS>"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def memory(tmp_path: Path, clock: FakeClock) -> Iterator[Memory]:
    opened = Memory.open(tmp_path / "adk.db", clock=clock, embedder=None)
    yield opened
    opened.close()


def said(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def user_event(text: str, **fields: Any) -> Event:
    return Event(invocation_id="inv", author="user", content=said(text), **fields)


def state_event(delta: dict[str, Any], timestamp: float | None = None) -> Event:
    extra: dict[str, Any] = {} if timestamp is None else {"timestamp": timestamp}
    return Event(invocation_id="inv", author="agent",
                 actions=EventActions(state_delta=delta), **extra)


async def run(runner: Runner, user: str, session_id: str, text: str) -> list[Event]:
    return [event async for event in runner.run_async(
        user_id=user, session_id=session_id, new_message=said(text))]


def openai_agent(server: ScriptedLLMServer, *tools: Any) -> LlmAgent:
    return LlmAgent(name="helper", instruction="Be brief.", tools=list(tools),
                    model=OpenAILlm(model="scripted", api_key="none", base_url=server.url))


# the story: a real Runner remembers across sessions, never across users or apps ----------
@pytest.mark.anyio
async def test_runner_session_lands_in_ledgermem_and_preload_finds_it_next_time(
        memory: Memory, server: ScriptedLLMServer) -> None:
    session_service, memory_service = adk_services(memory)
    runner = Runner(agent=openai_agent(server, preload_memory), app_name=APP,
                    session_service=session_service, memory_service=memory_service)
    server.reply("Noted: green tea, every morning.", "You drink green tea.", "No idea yet.",
                 "No idea yet.")

    first = await session_service.create_session(app_name=APP, user_id="alice")
    await run(runner, "alice", first.id, "I drink green tea every morning")
    # the session's events are ledgermem turns of alice's ledgermem user
    turns = memory.store.query_turns(ledger_user(APP, "alice"), TurnQuery())
    assert [(t.role, t.content) for t in turns] == [
        ("user", "I drink green tea every morning"),
        ("assistant", "Noted: green tea, every morning.")]
    assert turns[0].session_id == f"{APP}/alice:{session_channel(first.id)}"
    # not handed to memory yet: the first session's own preload found nothing
    assert PAST not in server.chat_requests[0].text

    stored = await session_service.get_session(app_name=APP, user_id="alice",
                                               session_id=first.id)
    assert stored is not None and len(stored.events) == 2
    await memory_service.add_session_to_memory(stored)

    second = await session_service.create_session(app_name=APP, user_id="alice")
    await run(runner, "alice", second.id, "What do I drink in the morning?")
    prompt = server.chat_requests[1].text
    assert PAST in prompt and "user: I drink green tea every morning" in prompt

    # another user of the app, and the same user id in another app, find nothing
    for app, user in ((APP, "bob"), ("other-app", "alice")):
        other = Runner(agent=openai_agent(server, preload_memory), app_name=app,
                       session_service=session_service, memory_service=memory_service)
        session = await session_service.create_session(app_name=app, user_id=user)
        await run(other, user, session.id, "What do I drink in the morning?")
        assert PAST not in server.chat_requests[-1].text
        assert (await memory_service.search_memory(
            app_name=app, user_id=user, query="green tea morning")).memories == []
    assert server.remaining == 0


@pytest.mark.anyio
async def test_load_memory_tool_finds_what_an_earlier_session_said(memory: Memory) -> None:
    session_service, memory_service = adk_services(memory)
    model = MockModel.create([
        types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
            name="load_memory", args={"query": "allergy peanuts"}))]),
        types.Content(role="model", parts=[types.Part(text="You are allergic to peanuts.")]),
    ])
    runner = Runner(agent=LlmAgent(name="helper", model=model, tools=[load_memory]),
                    app_name=APP, session_service=session_service,
                    memory_service=memory_service)
    earlier = await session_service.create_session(app_name=APP, user_id="alice")
    for text in ("I am allergic to peanuts", "Also, book a table for Friday"):
        await session_service.append_event(earlier, user_event(text))
    await memory_service.add_session_to_memory(earlier)

    session = await session_service.create_session(app_name=APP, user_id="alice")
    events = await run(runner, "alice", session.id, "Anything I can't eat?")
    results = [p.function_response.response for e in events if e.content
               for p in e.content.parts or [] if p.function_response]
    assert len(results) == 1
    assert results[0] is not None
    found = results[0]["result"].memories
    assert found and found[0].content.parts[0].text == "I am allergic to peanuts"
    assert found[0].author == "user" and found[0].custom_metadata["kind"] == "conversation"
    # what the tool returned is in the session, as stored and read back
    reloaded = await session_service.get_session(app_name=APP, user_id="alice",
                                                 session_id=session.id)
    assert reloaded is not None
    assert [e.author for e in reloaded.events] == ["user", "helper", "helper", "helper"]
    assert reloaded.events[-1].content is not None
    assert reloaded.events[-1].content.parts
    assert reloaded.events[-1].content.parts[0].text == "You are allergic to peanuts."


@pytest.mark.anyio
async def test_idle_session_is_consolidated_into_knowledge_with_an_llm(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer) -> None:
    memory = Memory.open(tmp_path / "llm.db", clock=clock, embedder=None,
                         llm=make_llm(server))
    timers = FakeTimers()
    ledger = AdkLedger(memory, Sessions(memory, timer_factory=timers))
    session_service, memory_service = (LedgermemSessionService(ledger),
                                       LedgermemMemoryService(ledger))
    try:
        session = await session_service.create_session(app_name=APP, user_id="alice")
        await session_service.append_event(session, user_event("I moved to Porto in May"))
        assert (await memory_service.search_memory(app_name=APP, user_id="alice",
                                                   query="Porto")).memories == []
        server.reply({"items": [{"content": "Lives in Porto", "category": "fact"}]})
        timers.made[-1].fire()  # the session went idle
        found = (await memory_service.search_memory(app_name=APP, user_id="alice",
                                                    query="Porto")).memories
        assert {(m.custom_metadata["kind"], m.content.parts[0].text)
                for m in found if m.content.parts} == {
            ("knowledge", "Lives in Porto"), ("conversation", "I moved to Porto in May")}
        assert "I moved to Porto in May" in server.chat_requests[0].text
        # the session itself is intact
        stored = await session_service.get_session(app_name=APP, user_id="alice",
                                                   session_id=session.id)
        assert stored is not None and len(stored.events) == 1
    finally:
        memory.close()


# the session service contract -----------------------------------------------------------
@pytest.mark.anyio
async def test_session_service_contract(mem: Memory) -> None:
    service = LedgermemSessionService(mem)
    session = await service.create_session(
        app_name=APP, user_id="alice", session_id="s1",
        state={"cart": [], "user:name": "Alice", "app:currency": "EUR", "temp:x": 1})
    assert session.id == "s1" and session.state == {
        "cart": [], "user:name": "Alice", "app:currency": "EUR"}
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id="alice", session_id="s1")

    for n, ts in enumerate((100.0, 200.0, 300.0)):
        await service.append_event(session, user_event(f"message {n}", timestamp=ts))
    await service.append_event(session, state_event(
        {"cart": ["tea"], "user:name": "Al", "app:currency": "USD", "temp:scratch": 9},
        timestamp=400.0))
    assert session.state["temp:scratch"] == 9  # for this invocation only

    def get(config: GetSessionConfig | None = None) -> Any:
        return service.get_session(app_name=APP, user_id="alice", session_id="s1",
                                   config=config)

    full = await get()
    assert [e.timestamp for e in full.events] == [100.0, 200.0, 300.0, 400.0]
    assert full.state == {"cart": ["tea"], "user:name": "Al", "app:currency": "USD"}
    assert full.last_update_time == 400.0
    assert full.events[0].content.parts[0].text == "message 0"
    assert [e.timestamp for e in (await get(GetSessionConfig(num_recent_events=2))).events] \
        == [300.0, 400.0]
    assert (await get(GetSessionConfig(num_recent_events=0))).events == []
    assert [e.timestamp for e in (await get(GetSessionConfig(after_timestamp=200.0))).events] \
        == [200.0, 300.0, 400.0]
    assert [e.timestamp for e in (await get(GetSessionConfig(
        after_timestamp=150.0, num_recent_events=1))).events] == [400.0]

    # user: state is the user's across sessions of the app; app: state everyone's
    other = await service.create_session(app_name=APP, user_id="alice")
    assert other.state == {"user:name": "Al", "app:currency": "USD"}
    bob = await service.create_session(app_name=APP, user_id="bob")
    assert bob.state == {"app:currency": "USD"}
    elsewhere = await service.create_session(app_name="elsewhere", user_id="alice")
    assert elsewhere.state == {}
    assert await service.get_user_state(app_name=APP, user_id="alice") == {"name": "Al"}
    assert await service.get_session(app_name=APP, user_id="bob", session_id="s1") is None

    listed = await service.list_sessions(app_name=APP, user_id="alice")
    assert {s.id for s in listed.sessions} == {"s1", other.id}
    assert all(s.events == [] for s in listed.sessions)
    everyone = await service.list_sessions(app_name=APP)
    assert sorted((s.user_id, s.id) for s in everyone.sessions) == sorted(
        [("alice", "s1"), ("alice", other.id), ("bob", bob.id)])

    # a second copy of the session is stale once the first has appended
    stale = await get()
    await service.append_event(full, user_event("from the first copy", timestamp=500.0))
    with pytest.raises(StaleSessionError):
        await service.append_event(stale, user_event("from the stale copy", timestamp=501.0))

    await service.delete_session(app_name=APP, user_id="alice", session_id="s1")
    assert await get() is None
    assert {s.id for s in (await service.list_sessions(app_name=APP, user_id="alice")
                           ).sessions} == {other.id}
    with pytest.raises(SessionNotFoundError):
        await service.append_event(full, user_event("after deletion"))
    again = await service.create_session(app_name=APP, user_id="alice", session_id="s1")
    assert again.events == [] and again.state == {"user:name": "Al", "app:currency": "USD"}


@pytest.mark.anyio
async def test_num_recent_events_agrees_with_in_memory_session_service(
        memory: Memory) -> None:
    services = {"mine": LedgermemSessionService(memory), "adk": InMemorySessionService()}
    for service in services.values():
        created = await service.create_session(app_name=APP, user_id="alice",
                                               session_id="s")
        for n in range(5):
            await service.append_event(created, user_event(f"m{n}", timestamp=100.0 + n))

    async def recent(name: str, count: int) -> list[float]:
        session = await services[name].get_session(
            app_name=APP, user_id="alice", session_id="s",
            config=GetSessionConfig(num_recent_events=count))
        assert session is not None
        return [e.timestamp for e in session.events]

    # fewer, all, more than there are (once and twice over), none
    for count in (1, 3, 4, 5, 6, 7, 9, 10, 11, 0):
        expected = [100.0 + n for n in range(5)][-count:] if count else []
        assert await recent("mine", count) == await recent("adk", count) == expected, count


@pytest.mark.anyio
async def test_an_event_over_the_json_cap_is_kept_cut_flagged_and_still_an_event(
        memory: Memory) -> None:
    image = bytes(range(256)) * 600  # 153,600 bytes: 204,800 characters of base64
    big_text = user_event("y" * 200_000, timestamp=1.0)
    big_image = Event(invocation_id="inv", author="user", timestamp=2.0, content=types.Content(
        role="user", parts=[types.Part(text="what is in this picture?"),
                            types.Part(inline_data=types.Blob(data=image,
                                                              mime_type="image/png"))]))
    big_state = state_event({"notes": "n" * 60_000}, timestamp=3.0)  # fits: kept whole
    too_much_state = state_event({"notes": "n" * 150_000}, timestamp=4.0)
    reference = InMemorySessionService()  # ADK's own service takes all four
    theirs = await reference.create_session(app_name=APP, user_id="alice")
    for event in (big_text, big_image, big_state, too_much_state):
        await reference.append_event(theirs, event)

    service = LedgermemSessionService(memory)
    session = await service.create_session(app_name=APP, user_id="alice", session_id="s")
    for event in (big_text, big_image, big_state):
        await service.append_event(session, event)
    with pytest.raises(InvalidInput, match="actions, kept whole"):
        # the state is rebuilt from the events' state deltas: never cut
        await service.append_event(session, too_much_state)

    stored = await service.get_session(app_name=APP, user_id="alice", session_id="s")
    assert stored is not None and [e.timestamp for e in stored.events] == [1.0, 2.0, 3.0]
    text, picture, state = stored.events  # Event models, validated on the way back
    assert text.id == big_text.id and text.content is not None and text.content.parts
    cut = text.content.parts[0].text or ""
    assert cut.startswith("y" * 90_000) and "… [cut: " in cut
    assert picture.content is not None and picture.content.parts
    assert picture.content.parts[0].text == "what is in this picture?"
    blob = picture.content.parts[1].inline_data
    assert blob is not None and blob.data and image.startswith(blob.data)  # a prefix
    assert blob.mime_type == "image/png"
    assert state == big_state and stored.state == {"notes": "n" * 60_000}
    turns = memory.store.query_turns(ledger_user(APP, "alice"), TurnQuery())
    for turn, event in zip(turns, (big_text, big_image, big_state), strict=True):
        assert len(json.dumps(turn.metadata, ensure_ascii=False)) <= MAX_JSON_CHARS
        whole = len(json.dumps(json.loads(event.model_dump_json(exclude_none=True)),
                               ensure_ascii=False))
        assert turn.metadata.get("original_length") == (
            None if event is big_state else whole)
        assert turn.metadata.get("truncated") is (None if event is big_state else True)


@pytest.mark.anyio
async def test_sessions_survive_a_restart_and_temp_state_is_never_stored(
        tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "restart.db"
    memory = Memory.open(path, clock=clock, embedder=None)
    service = LedgermemSessionService(memory)
    session = await service.create_session(app_name=APP, user_id="alice", session_id="s")
    await service.append_event(session, state_event({"step": 2, "temp:token": "secret"}))
    await service.append_event(session, user_event("hello"))
    memory.close()

    memory = Memory.open(path, clock=clock, embedder=None)
    try:
        reopened = await LedgermemSessionService(memory).get_session(
            app_name=APP, user_id="alice", session_id="s")
        assert reopened is not None
        assert reopened.state == {"step": 2}
        assert [e.author for e in reopened.events] == ["agent", "user"]
        ledger = memory.store.events(ledger_user(APP, "alice"))
        assert "secret" not in json.dumps([e.payload for e in ledger])
    finally:
        memory.close()


@pytest.mark.anyio
async def test_bad_input_is_refused_and_stores_nothing(memory: Memory) -> None:
    service = LedgermemSessionService(memory)
    with pytest.raises(InvalidInput):
        await service.create_session(app_name="", user_id="alice")
    with pytest.raises(InvalidInput):
        await service.create_session(app_name=APP, user_id="alice",
                                     state={"f": lambda: None})
    assert memory.store.user_ids() == []
    with pytest.raises(InvalidInput):
        LedgermemMemoryService(memory, top_k=0)


# the memory service -----------------------------------------------------------------------
@pytest.mark.anyio
async def test_memory_service_writes_searches_and_deletes(memory: Memory) -> None:
    _, service = adk_services(memory)
    await service.add_memory(app_name=APP, user_id="alice", memories=[
        MemoryEntry(content=said("Prefers aisle seats"), author="helper",
                    custom_metadata={"category": "preference"}),
        MemoryEntry(content=types.Content(role="user", parts=[]))])
    found = (await service.search_memory(app_name=APP, user_id="alice",
                                         query="aisle seats")).memories
    assert len(found) == 1 and found[0].custom_metadata["category"] == "preference"
    item_id = found[0].id
    assert item_id is not None

    # a delta from another session service: stored once however often it is added
    other = InMemorySessionService()
    session = await other.create_session(app_name=APP, user_id="alice")
    event = await other.append_event(session, user_event("My passport expires in June"))
    for _ in range(2):
        await service.add_events_to_memory(app_name=APP, user_id="alice", events=[event],
                                           session_id=session.id)
    turns = memory.store.query_turns(ledger_user(APP, "alice"), TurnQuery())
    assert [t.content for t in turns] == ["My passport expires in June"]
    hits = (await service.search_memory(app_name=APP, user_id="alice",
                                        query="passport")).memories
    assert [h.id for h in hits] == [turns[0].id]

    # another user cannot delete (or learn of) alice's memories
    with pytest.raises(NotFound):
        await service.delete_memory(app_name=APP, user_id="bob", memory_id=item_id)
    with pytest.raises(NotFound):
        await service.delete_memory(app_name=APP, user_id="alice", memory_id="no-such-id")
    await service.delete_memory(app_name=APP, user_id="alice", memory_id=None)
    await service.delete_memory(app_name=APP, user_id="alice", memory_id=item_id)
    await service.delete_memory(app_name=APP, user_id="alice", memory_id=turns[0].id)
    for query in ("aisle seats", "passport"):
        assert (await service.search_memory(app_name=APP, user_id="alice",
                                            query=query)).memories == []
    assert (await service.search_memory(app_name=APP, user_id="alice", query=" ")
            ).memories == []


@pytest.mark.anyio
async def test_a_deleted_session_leaves_memory_and_is_never_consolidated(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer) -> None:
    memory = Memory.open(tmp_path / "del.db", clock=clock, embedder=None,
                         llm=make_llm(server))
    timers = FakeTimers()
    ledger = AdkLedger(memory, Sessions(memory, timer_factory=timers))
    session_service, memory_service = (LedgermemSessionService(ledger),
                                       LedgermemMemoryService(ledger))
    try:
        kept = await session_service.create_session(app_name=APP, user_id="alice")
        await session_service.append_event(kept, user_event("The wifi password is on the fridge"))
        server.reply({"items": []})
        await memory_service.add_session_to_memory(kept)  # handed over, nothing distilled
        gone = await session_service.create_session(app_name=APP, user_id="alice")
        await session_service.append_event(gone, user_event("The fridge makes a noise"))
        await session_service.delete_session(app_name=APP, user_id="alice",
                                             session_id=gone.id)
        assert all(t.cancelled for t in timers.made[1:])
        timers.made[-1].fire()  # even a timer that fires late distils nothing
        assert len(server.chat_requests) == 1
        found = (await memory_service.search_memory(app_name=APP, user_id="alice",
                                                    query="fridge")).memories
        assert [m.content.parts[0].text for m in found if m.content.parts] == [
            "The wifi password is on the fridge"]
    finally:
        memory.close()


def test_scopes_map_one_way() -> None:
    assert ledger_user("shop", "alice") == "shop/alice"
    assert ledger_user("a/b", "c") != ledger_user("a", "b/c")
    assert ledger_user("a%2Fb", "c") != ledger_user("a/b", "c")
    assert app_ledger("shop") == "shop/" and not app_ledger("a/b").startswith("a/")
    assert session_channel("x:y") != session_channel("x%3Ay")
    assert ":" not in session_channel("a:b:c")
    with pytest.raises(InvalidInput):
        ledger_user("shop", "")


# registration ----------------------------------------------------------------------------
@pytest.fixture
def agents_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An agents folder whose ``services.py`` registers the scheme, as a user's would;
    the environment names a hash embedder and no config file."""
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "services.py").write_text(
        "from ledgermem.adapters.adk import register\nregister()\n", encoding="utf-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("LEDGERMEM_CONFIG", raising=False)
    monkeypatch.setenv("LEDGERMEM_EMBEDDER", "hash:32")
    for name in ("LEDGERMEM_LLM_BASE_URL", "LEDGERMEM_LLM_MODEL", "LEDGERMEM_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "services", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield folder
    close_services()
    sys.modules.pop("services", None)


@pytest.mark.anyio
async def test_adk_web_options_open_ledgermem_services_from_the_uri(
        agents_dir: Path, tmp_path: Path) -> None:
    load_services_module(str(agents_dir))  # what adk web / api_server do first
    uri = f"ledgermem://{tmp_path / 'web.db'}"
    sessions = create_session_service_from_options(base_dir=agents_dir,
                                                   session_service_uri=uri)
    memories = create_memory_service_from_options(base_dir=agents_dir,
                                                  memory_service_uri=uri)
    assert isinstance(sessions, LedgermemSessionService)
    assert isinstance(memories, LedgermemMemoryService)
    assert sessions.ledger is memories.ledger  # one database, one sessions layer
    session = await sessions.create_session(app_name=APP, user_id="alice")
    await sessions.append_event(session, user_event("Call me Ally"))
    await memories.add_session_to_memory(session)
    found = (await memories.search_memory(app_name=APP, user_id="alice",
                                          query="Ally")).memories
    assert [m.content.parts[0].text for m in found if m.content.parts] == ["Call me Ally"]
    assert sessions.ledger.memory.embedder.model_id == "hash:32"
    assert (tmp_path / "web.db").exists()


def test_register_adds_the_scheme_to_a_given_registry(agents_dir: Path,
                                                     tmp_path: Path) -> None:
    registry = type(get_service_registry())()
    uri = f"ledgermem://{tmp_path / 'given.db'}"
    assert registry.create_memory_service(uri) is None
    register(registry)
    service = registry.create_memory_service(uri, agents_dir=str(agents_dir))
    assert isinstance(service, LedgermemMemoryService)
    with pytest.raises(InvalidInput):
        open_services(f"sqlite:///{tmp_path / 'x.db'}")
    assert not (tmp_path / "x.db").exists()


def test_importing_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.adk.errors", None)
    monkeypatch.delitem(sys.modules, "ledgermem.adapters.adk")
    with pytest.raises(MissingExtra, match=r"ledgermem\[adk\]") as raised:
        importlib.import_module("ledgermem.adapters.adk")
    assert isinstance(raised.value, ImportError)



def test_the_example_runs_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from examples.adk_agent import main

    assert main(["--db", str(tmp_path / "example.db"), "--keyword-only"]) == 0
    out = capsys.readouterr().out
    assert "assistant> From our earlier conversations: I'm vegetarian, and I live in " \
           "Lisbon." in out
    assert "user: I'm vegetarian, and I live in Lisbon." in out.split("the model was shown:")[1]
