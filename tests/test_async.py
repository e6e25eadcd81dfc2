"""The async API (``ledgermem.aio``): the sync core, run in worker threads.

The parity tests fail when ``Memory`` / ``UserMemory`` and ``AsyncMemory`` /
``AsyncUserMemory`` stop having the same public methods, properties and parameters
(as llm's ``test_async_parity.py`` does for its models). The others use the async API
on a real SQLite file with the offline ``HashEmbedder``, on asyncio through anyio's
pytest plugin.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgermem import (
    AsyncMemory,
    AsyncUserMemory,
    Hit,
    InvalidInput,
    Memory,
    NotFound,
    UserMemory,
)
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock

NOT_AWAITED = frozenset({"for_user", "report_skipped", "now", "open"})
"""Methods that do no I/O, so are not coroutines on the async side either (``open``
returns what is awaited, or used with ``async with``)."""

ASYNC_ONLY = frozenset({"sync", "from_sync", "threads"})
"""Public names only the async classes have: the way to the sync object and the
thread limit."""

SYNC_ONLY = frozenset({"writer", "recalls", "searcher", "parts"})
"""``Memory``'s plumbing, reached through ``.sync``: objects whose own methods are
sync, and would block the event loop if called from async code."""

ASYNC_ONLY_PARAMETERS = frozenset({"threads"})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # trio is not installed


@pytest.fixture
def memory(tmp_path: Path, clock: FakeClock) -> Iterator[Memory]:
    sync = Memory(SQLiteStore(tmp_path / "m.db"), embedder=HashEmbedder(), clock=clock)
    yield sync
    sync.close()


@pytest.fixture
def amem(memory: Memory) -> AsyncMemory:
    return AsyncMemory.from_sync(memory, threads=4)


@pytest.fixture
def alice(amem: AsyncMemory) -> AsyncUserMemory:
    return amem.for_user("alice")


# parity -------------------------------------------------------------------------------
def public_members(obj: object) -> dict[str, Any]:
    """An object's public methods, properties and class attributes (inherited
    included), and its instance attributes, which count as properties."""
    members = {name: member for name, member in inspect.getmembers_static(type(obj))
               if not name.startswith("_")}
    members.update({name: property() for name in vars(obj)
                    if not name.startswith("_") and name not in members})
    return members


def parameters(function: Any) -> list[tuple[Any, ...]]:
    """What a call may pass: names, kinds, defaults and annotations."""
    return [(p.name, p.kind, p.default, str(p.annotation))
            for p in inspect.signature(function).parameters.values()
            if p.name not in ASYNC_ONLY_PARAMETERS]


def drift(sync: object, asynchronous: object) -> list[str]:
    """How the public API of ``asynchronous`` differs from that of ``sync``, its twin."""
    sync_api, async_api = public_members(sync), public_members(asynchronous)
    problems = [f"{name}: missing on the async side"
                for name in sorted(sync_api.keys() - async_api.keys() - SYNC_ONLY)]
    problems += [f"{name}: only on the async side"
                 for name in sorted(async_api.keys() - sync_api.keys() - ASYNC_ONLY)]
    for name in sorted(sync_api.keys() & async_api.keys()):
        properties = [isinstance(api[name], property) for api in (sync_api, async_api)]
        if any(properties):
            if not all(properties):
                problems.append(f"{name}: a property on one side only")
            continue
        sync_method, async_method = getattr(sync, name), getattr(asynchronous, name)
        if parameters(sync_method) != parameters(async_method):
            problems.append(f"{name}: {inspect.signature(sync_method)} on the sync side, "
                            f"{inspect.signature(async_method)} on the async side")
        if inspect.iscoroutinefunction(async_method) == (name in NOT_AWAITED):
            problems.append(f"{name}: {'not ' * (name not in NOT_AWAITED)}awaited")
    return problems


def test_memory_and_async_memory_have_the_same_methods(memory: Memory,
                                                       amem: AsyncMemory) -> None:
    assert drift(memory, amem) == []
    assert parameters(Memory) == parameters(AsyncMemory)  # the constructor's
    assert "threads" in inspect.signature(AsyncMemory).parameters


def test_user_memory_and_async_user_memory_have_the_same_methods(
        memory: Memory, alice: AsyncUserMemory) -> None:
    assert drift(memory.for_user("alice"), alice) == []


def test_the_parity_check_sees_a_method_added_or_changed_on_one_side(
        memory: Memory, alice: AsyncUserMemory) -> None:
    class Grown(UserMemory):
        def summarise(self, limit: int = 5) -> str:
            return ""

        def search(self, query: str, *, brand_new: bool = False  # type: ignore[override]
                   ) -> list[Hit]:
            return []

        @property
        def label(self) -> str:
            return ""

    grown = Grown(memory, alice.scope)
    grown.tag = "an attribute"  # type: ignore[attr-defined]
    problems = drift(grown, alice)
    assert [p.split(":")[0] for p in problems] == ["label", "summarise", "tag", "search"
                                                   ], problems


# the API, used ------------------------------------------------------------------------
@pytest.mark.anyio
async def test_remember_search_get_update_forget_and_history(amem: AsyncMemory,
                                                             alice: AsyncUserMemory) -> None:
    tea = await alice.remember("Prefers green tea over coffee", category="preference")
    boss = await alice.remember("Sarah Chen is her manager", entity="person:Sarah Chen")
    await amem.flush()                                  # waits for the embedder, off the loop
    assert (await alice.status())["embedding"] == {"pending": 0}
    hits = await alice.search("green tea", touch=False)
    assert hits[0].id == tea.id
    assert [h.id for h in hits] == [h.id for h in alice.sync.search("green tea", touch=False)]
    assert [h.id for h in await alice.recall("manager", touch=False)][:1] == [boss.id]
    assert await alice.get(tea.id) == alice.sync.get(tea.id)
    changed = await alice.update(tea.id, content="Prefers jasmine tea over coffee")
    assert changed.content == "Prefers jasmine tea over coffee"
    assert len(await alice.history(tea.id)) == 2
    assert [i.id for i in await alice.by_category("preference")] == [tea.id]
    await alice.forget(tea.id)
    with pytest.raises(NotFound):
        await alice.get(tea.id)
    assert (await alice.stats())["items"] == alice.sync.stats()["items"]


@pytest.mark.anyio
async def test_add_turns_and_search_all(amem: AsyncMemory, alice: AsyncUserMemory) -> None:
    turns = await alice.add_turns([
        {"role": "user", "content": "I'm flying to Lisbon on Friday"},
        {"role": "assistant", "content": "Enjoy the trip to Portugal"},
    ], session_id="alice:chat")
    assert [t.content for t in turns] == ["I'm flying to Lisbon on Friday",
                                          "Enjoy the trip to Portugal"]
    await alice.add_turn("user", "Also, book the airport taxi", session_id="alice:chat")
    fact = await alice.remember("Her passport expires in May")
    await amem.flush()
    assert [t.content for t in await alice.session_history("alice:chat")][-1] == (
        "Also, book the airport taxi")
    found = await alice.search_all("Lisbon flight passport", top_k=5, touch=False)
    assert any(h.turn is not None and "Lisbon" in h.content for h in found)
    assert any(h.item is not None and h.item.id == fact.id for h in found)
    said = await alice.search_conversations("Lisbon")
    assert said[0].content == "I'm flying to Lisbon on Friday"


@pytest.mark.anyio
async def test_the_event_loop_runs_other_tasks_during_a_search(
        amem: AsyncMemory, alice: AsyncUserMemory) -> None:
    for n in range(40):
        await alice.remember(f"note {n} on topic{n % 5} and subject{n % 7}")
    await amem.flush()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0)

    during: list[int] = []
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ticker)
        await anyio.sleep(0)
        for n in range(20):
            before = ticks
            await alice.search(f"topic{n % 5} subject{n % 7}", touch=False)
            during.append(ticks - before)
        before = ticks
        alice.sync.search("topic1 subject1", touch=False)   # the control: on the loop
        blocked = ticks - before
        tasks.cancel_scope.cancel()
    assert min(during) >= 1, during     # the ticker ran while each search did
    assert blocked == 0                 # a sync search lets nothing else run


@pytest.mark.anyio
async def test_calls_run_concurrently_up_to_the_thread_limit(
        memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    amem = AsyncMemory.from_sync(memory, threads=3)
    alice = amem.for_user("alice")
    inside, most = 0, 0
    lock = threading.Lock()
    together = threading.Barrier(3, timeout=30)   # breaks unless 3 calls run at once

    def stats() -> dict[str, Any]:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        together.wait()
        with lock:
            inside -= 1
        return {"items": 0}

    monkeypatch.setattr(alice.sync, "stats", stats)
    results: list[dict[str, Any]] = []

    async def call() -> None:
        results.append(await alice.stats())

    async with anyio.create_task_group() as tasks:
        for _ in range(9):
            tasks.start_soon(call)
    assert len(results) == 9 and most == 3 == amem.threads


@pytest.mark.anyio
async def test_errors_are_the_sync_api_s_typed_errors(amem: AsyncMemory,
                                                      alice: AsyncUserMemory) -> None:
    with pytest.raises(NotFound):
        await alice.get("no-such-id")
    with pytest.raises(NotFound):
        await alice.history("no-such-id")
    with pytest.raises(InvalidInput):
        await alice.remember("")
    with pytest.raises(InvalidInput):
        await alice.search(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await alice.add_turns([{"role": "nobody", "content": "hi"}])
    with pytest.raises(InvalidInput):
        amem.for_user("")                    # no I/O: raised at once, not awaited
    with pytest.raises(InvalidInput):
        AsyncMemory.from_sync(amem.sync, threads=0)
    assert await alice.stats() == alice.sync.stats()   # nothing was written


@pytest.mark.anyio
async def test_open_closes_on_the_way_out_and_attributes_need_no_await(tmp_path: Path
                                                                       ) -> None:
    path = tmp_path / "opened.db"
    async with AsyncMemory.open(path, embedder=None, threads=2) as mem:
        assert isinstance(mem.sync, Memory) and mem.threads == 2
        assert mem.store is mem.sync.store and mem.embedder is None and mem.llm is None
        alice = mem.for_user("alice", context="work")
        assert isinstance(alice.sync, UserMemory) and alice.memory is mem
        assert (alice.user_id, alice.scope.context) == ("alice", "work")
        await alice.remember("Kept across reopening")
    mem = await AsyncMemory.open(path, embedder=None)
    async with mem:
        knowledge = await mem.for_user("alice", context="work").all_knowledge()
        assert [i.content for i in knowledge["items"]] == ["Kept across reopening"]


@pytest.mark.anyio
async def test_async_memory_builds_its_memory_from_memory_s_arguments(
        tmp_path: Path, clock: FakeClock) -> None:
    async with AsyncMemory(SQLiteStore(tmp_path / "built.db"), embedder=None, clock=clock,
                           threads=1) as mem:
        assert mem.clock is clock and mem.threads == 1
        item = await mem.for_user("bob").remember("Built, not opened")
        assert item.created_at == clock.iso()
        assert mem.now() == clock()
