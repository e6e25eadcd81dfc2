"""Cancelling a call of the async API while its worker thread runs.

A call is held inside its write transaction (or its read) by a real second party, not
a fake store: on SQLite, the store's own trace hook stops the worker thread's
connection at the statement named; on PostgreSQL, a second connection holds the
user's ledger lock (which every write of that user takes first) or an exclusive lock
on a table a read needs. The test then cancels the caller, in the ways asyncio and
trio code does: asyncio's ``task.cancel()`` (which ``asyncio.timeout`` and
``wait_for`` use), an anyio cancel scope, ``fail_after``.

What must hold, whichever way: the cancelled call ends only once its thread has
finished (no thread goes on writing behind the caller's back, nor under ``close``);
the write is then whole, never half done (``verify``); the memory takes the next call
at once (no transaction or lock left behind); ``close`` afterwards closes; a call
cancelled before its thread started never runs; and ``close`` cancelled on the way
out of ``async with`` still closes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from ledgermem import AsyncMemory, AsyncUserMemory, Item, Memory, NotFound, StoreClosed
from ledgermem.store.pg_connection import USER_LOCK
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock, db_path, is_postgres, postgres_url

pytestmark = pytest.mark.anyio

ASYNCIO_ONLY = pytest.mark.parametrize("anyio_backend", ["asyncio"])
"""For tests of asyncio's own ``task.cancel()``: trio has no such thing."""

HELD = 0.3
"""How long a test gives a cancelled call to end too early (while its thread is held);
a correct call cannot end then at all, so this only bounds how long the test waits."""


@pytest.fixture
def memory(db_url: str, clock: FakeClock) -> Iterator[Memory]:
    # The package's ``memory`` (conftest.py), with recall bookkeeping applied only by
    # flush or close: the one worker thread that writes is the call's own.
    sync = Memory.open(db_url, clock=clock, embedder=None, recall_interval_s=3600)
    yield sync
    sync.close()


@pytest.fixture
def amem(memory: Memory) -> AsyncMemory:
    return AsyncMemory.from_sync(memory, threads=4)


# holding a call inside its transaction --------------------------------------------
class Hold:
    """Holds the next write of ``alice`` (or, with ``read``, the next read of her
    knowledge) where it runs, in its worker thread, until the ``with`` block ends."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.threads: list[threading.Thread] = []
        """The threads held (on SQLite; PostgreSQL holds them in the server)."""
        self._reached = threading.Event()
        self._released = threading.Event()
        self._holder: psycopg.Connection[Any] | None = None

    def __call__(self, *, read: bool = False) -> AbstractContextManager[None]:
        if is_postgres(self.memory):
            return self._postgres(read)
        return self._sqlite("SELECT" if read else "INSERT INTO events")

    @contextmanager
    def _sqlite(self, prefix: str) -> Iterator[None]:
        def hold(sql: str) -> None:
            if sql.startswith(prefix) and not self._reached.is_set():
                self.threads.append(threading.current_thread())
                self._reached.set()
                self._released.wait(30)

        self.memory.store.trace(hold)  # type: ignore[attr-defined]
        try:
            yield
        finally:
            self._released.set()
            self.memory.store.trace(None)  # type: ignore[attr-defined]

    @contextmanager
    def _postgres(self, read: bool) -> Iterator[None]:
        url = postgres_url(self.memory)
        assert url is not None
        with psycopg.connect(url) as holder:
            self._holder = holder
            if read:
                holder.execute("LOCK TABLE knowledge IN ACCESS EXCLUSIVE MODE")
            else:
                holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                               [USER_LOCK, "alice"])
            self._watch_waiting(url)
            try:
                yield
            finally:
                self.release()

    def _watch_waiting(self, url: str) -> None:
        def watch() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                while not self._released.is_set():
                    if conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted"
                                    ).fetchone() != (0,):
                        self._reached.set()
                        return
                    self._released.wait(0.01)

        threading.Thread(target=watch, daemon=True).start()

    def release(self) -> None:
        """Let the held call go on (before the ``with`` block ends)."""
        if self._holder is not None:
            self._holder.rollback()          # ends the transaction holding the lock
        self._released.set()

    async def reached(self) -> None:
        """Wait until a worker thread is held."""
        with anyio.fail_after(30):
            while not self._reached.is_set():
                await anyio.sleep(0.005)
        assert threading.main_thread() not in self.threads


@pytest.fixture
def hold(memory: Memory) -> Hold:
    return Hold(memory)


def returned(owner: Any, name: str) -> threading.Event:
    """Set when the sync method ``name`` of ``owner`` returns or raises (in its worker
    thread); to be called before the async twin is first used."""
    method = getattr(owner, name)
    ended = threading.Event()

    def watched(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        finally:
            ended.set()

    setattr(owner, name, watched)
    return ended


# the calls, and what each leaves when whole ---------------------------------------
Call = Callable[[AsyncUserMemory, Item], Coroutine[Any, Any, Any]]
Check = Callable[[Memory, Item], None]


def _items(memory: Memory) -> list[str]:
    return sorted(i.content for i in memory.for_user("alice").all_knowledge()["items"])


def _remembered(memory: Memory, seeded: Item) -> None:
    assert _items(memory) == ["Flies to Lisbon on Friday", "Prefers green tea"]


def _remembered_many(memory: Memory, seeded: Item) -> None:
    assert _items(memory) == ["Likes jazz", "Owns a red bike", "Prefers green tea"]


def _turns_added(memory: Memory, seeded: Item) -> None:
    said = memory.for_user("alice").session_history("alice:chat")
    assert [t.content for t in said] == ["Book the airport taxi", "Done, for 7 am"]


def _revised(memory: Memory, seeded: Item) -> None:
    assert _items(memory) == ["Prefers jasmine tea"]
    assert memory.for_user("alice").get(seeded.id).superseded_by is not None


def _forgotten(memory: Memory, seeded: Item) -> None:
    assert _items(memory) == []
    with pytest.raises(NotFound):
        memory.for_user("alice").get(seeded.id)


WRITES: dict[str, tuple[Call, Check]] = {
    "remember": (lambda alice, seeded: alice.remember("Flies to Lisbon on Friday"),
                 _remembered),
    "remember_many": (lambda alice, seeded: alice.remember_many(["Likes jazz",
                                                                 "Owns a red bike"]),
                      _remembered_many),
    "add_turns": (lambda alice, seeded: alice.add_turns(
        [{"role": "user", "content": "Book the airport taxi"},
         {"role": "assistant", "content": "Done, for 7 am"}], session_id="alice:chat"),
        _turns_added),
    "revise": (lambda alice, seeded: alice.revise(seeded.id, "Prefers jasmine tea"),
               _revised),
    "forget": (lambda alice, seeded: alice.forget(seeded.id), _forgotten),
}


async def next_calls_work(amem: AsyncMemory, memory: Memory) -> None:
    """The memory takes the next write and read at once (no transaction or lock was
    left behind), the views match the ledger, and it closes."""
    with anyio.fail_after(30):
        bob = amem.for_user("bob")
        await bob.remember("Next in line")
        assert [h.content for h in await bob.search("next line", touch=False)] == [
            "Next in line"]
    if not is_postgres(memory):
        free = sqlite3.connect(db_path(memory), isolation_level=None, timeout=0)
        free.execute("BEGIN IMMEDIATE")     # no write transaction is open
        free.execute("ROLLBACK")
        free.close()
    report = memory.verify()
    assert report["problems"] == [], report
    await amem.close()
    with pytest.raises(StoreClosed):
        await amem.for_user("bob").stats()


# asyncio's task.cancel() ----------------------------------------------------------
async def cancel_while_held(hold: Hold, call: Coroutine[Any, Any, Any], *,
                            read: bool = False) -> None:
    """Run ``call`` as a task and ``task.cancel()`` it while ``hold`` holds its thread:
    the task must not end while the thread is held, and raises ``CancelledError`` once
    it is let go."""
    with hold(read=read):
        task = asyncio.create_task(call)
        await hold.reached()
        task.cancel()
        await asyncio.wait({task}, timeout=HELD)
        assert not task.done(), "the task ended while its call's thread was still running"
    with pytest.raises(asyncio.CancelledError):
        await task


@ASYNCIO_ONLY
@pytest.mark.parametrize("name", WRITES)
async def test_a_write_cancelled_by_task_cancel_ends_whole_once_its_thread_has(
        name: str, amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    call, check = WRITES[name]
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")                  # a handle no call has used yet
    ended = returned(alice.sync, name)
    await cancel_while_held(hold, call(alice, seeded))
    assert ended.is_set()
    check(memory, seeded)
    await next_calls_work(amem, memory)


@ASYNCIO_ONLY
async def test_asyncio_timeout_around_a_write_raises_once_the_write_is_whole(
        amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")                  # a handle no call has used yet
    ended = returned(alice.sync, "remember")
    with hold():
        async def expire_then_release(timeout: asyncio.Timeout) -> None:
            await hold.reached()
            timeout.reschedule(asyncio.get_running_loop().time())   # due now
            await asyncio.sleep(HELD)
            hold.release()

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as timeout:
                releasing = asyncio.create_task(expire_then_release(timeout))
                await alice.remember("Flies to Lisbon on Friday")
        assert ended.is_set()
        await releasing
    _remembered(memory, seeded)
    await next_calls_work(amem, memory)


@ASYNCIO_ONLY
async def test_a_search_cancelled_by_task_cancel_leaves_no_thread_behind(
        amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    alice = amem.for_user("alice")
    await alice.remember("Prefers green tea")
    ended = returned(alice.sync, "search")
    await cancel_while_held(hold, alice.search("green tea"), read=True)
    assert ended.is_set()
    await next_calls_work(amem, memory)


@ASYNCIO_ONLY
async def test_a_flush_cancelled_by_task_cancel_applies_what_it_began(
        amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")                  # a handle no call has used yet
    await alice.search("green tea")                        # recall bookkeeping, queued
    ended = returned(memory, "flush")
    await cancel_while_held(hold, amem.flush())
    assert ended.is_set()
    assert memory.for_user("alice").get(seeded.id).confidence > seeded.confidence
    await next_calls_work(amem, memory)


@ASYNCIO_ONLY
async def test_a_close_cancelled_by_task_cancel_still_closes_before_the_task_ends(
        amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")                  # a handle no call has used yet
    await alice.search("green tea")       # close applies this bookkeeping: it writes
    ended = returned(memory, "close")
    await cancel_while_held(hold, amem.close())
    assert ended.is_set()
    with pytest.raises(StoreClosed):
        await alice.stats()
    with Memory.open(memory.store.url, embedder=None) as reopened:
        assert reopened.for_user("alice").get(seeded.id).confidence > seeded.confidence
        assert reopened.verify()["problems"] == []


@ASYNCIO_ONLY
async def test_a_call_cancelled_by_task_cancel_while_queued_never_runs(
        memory: Memory, hold: Hold) -> None:
    amem = AsyncMemory.from_sync(memory, threads=1)
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")                  # a handle no call has used yet
    with hold():
        first = asyncio.create_task(alice.remember("Flies to Lisbon on Friday"))
        await hold.reached()
        queued = asyncio.create_task(alice.forget(seeded.id))   # waits for the thread
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued                       # at once: it had not started
    await first
    _remembered(memory, seeded)                # the forget never ran
    await next_calls_work(amem, memory)


# anyio's cancel scopes, on asyncio and trio ---------------------------------------
MemoryCall = Callable[[AsyncMemory, AsyncUserMemory, Item], Coroutine[Any, Any, Any]]


def _of_user(call: Call) -> MemoryCall:
    return lambda amem, alice, seeded: call(alice, seeded)


CALLS: dict[str, MemoryCall] = {
    **{name: _of_user(call) for name, (call, _) in WRITES.items()},
    "search": lambda amem, alice, seeded: alice.search("green tea"),
    "flush": lambda amem, alice, seeded: amem.flush(),
}


@pytest.mark.parametrize("name", CALLS)
async def test_a_call_in_a_cancelled_scope_returns_its_result_once_its_thread_ends(
        name: str, amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    await amem.for_user("alice").search("green tea")       # for flush: bookkeeping
    alice = amem.for_user("alice")                  # a handle no call has used yet
    owner = memory if name == "flush" else alice.sync
    ended = returned(owner, name)
    outcome: dict[str, Any] = {}
    scope = anyio.CancelScope()

    async def cancelled_call() -> None:
        with scope:
            outcome["result"] = await CALLS[name](amem, alice, seeded)
            await anyio.sleep(30)       # the cancellation comes here, at the next wait
        outcome["ended"] = ended.is_set()

    with hold(read=name == "search"):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cancelled_call)
            await hold.reached()
            scope.cancel()
            await anyio.sleep(HELD)
            assert outcome == {}, "the call ended while its thread was still running"
            hold.release()
    assert outcome["ended"] and scope.cancelled_caught
    assert "result" in outcome                  # not lost: the call returned it
    if name in WRITES:
        WRITES[name][1](memory, seeded)
    await next_calls_work(amem, memory)


async def test_fail_after_around_a_write_fires_after_the_whole_write_returned(
        amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")                  # a handle no call has used yet
    ended = returned(alice.sync, "remember")
    result: list[Item] = []
    with hold():
        async with anyio.create_task_group() as tasks:
            async def release_when_due(scope: anyio.CancelScope) -> None:
                await hold.reached()
                scope.deadline = anyio.current_time()     # due now, the call held
                while not scope.cancel_called:
                    await anyio.sleep(0.01)
                hold.release()

            with pytest.raises(TimeoutError):
                with anyio.fail_after(30) as deadline:
                    tasks.start_soon(release_when_due, deadline)
                    result.append(await alice.remember("Flies to Lisbon on Friday"))
                    assert ended.is_set()
                    await anyio.sleep(30)
    assert [i.content for i in result] == ["Flies to Lisbon on Friday"]
    _remembered(memory, seeded)
    await next_calls_work(amem, memory)


@pytest.mark.sqlite_only   # the same code on both stores; the queue is the limiter's
async def test_a_call_cancelled_while_queued_never_runs(memory: Memory, hold: Hold
                                                        ) -> None:
    amem = AsyncMemory.from_sync(memory, threads=1)
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")                  # a handle no call has used yet
    ran: list[str] = []
    scope = anyio.CancelScope()

    async def queued_forget() -> None:
        with scope:
            await alice.forget(seeded.id)          # waits for the one thread
            ran.append("forget")

    with hold():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(alice.remember, "Flies to Lisbon on Friday")
            await hold.reached()
            tasks.start_soon(queued_forget)
            await anyio.sleep(0.05)
            scope.cancel()
            await anyio.sleep(0.05)
            hold.release()
    assert ran == [] and scope.cancelled_caught
    _remembered(memory, seeded)
    await next_calls_work(amem, memory)


@pytest.mark.sqlite_only   # closing is the same on both stores
async def test_leaving_async_with_in_a_cancelled_scope_still_closes(
        tmp_path: Path) -> None:
    with anyio.CancelScope() as scope:
        async with AsyncMemory.open(tmp_path / "m.db", embedder=None) as mem:
            await mem.for_user("alice").remember("Prefers green tea")
            scope.cancel()
            await anyio.sleep(30)
    assert scope.cancelled_caught
    with pytest.raises(StoreClosed):
        mem.sync.for_user("alice").stats()


# close while a call runs ------------------------------------------------------------
async def test_close_waits_for_a_running_write_and_refuses_calls_made_after_it(
        amem: AsyncMemory, memory: Memory, hold: Hold) -> None:
    seeded = await amem.for_user("alice").remember("Prefers green tea")
    alice = amem.for_user("alice")
    ended = returned(memory, "close")
    written: list[Item] = []
    with hold():
        async with anyio.create_task_group() as tasks:
            async def write() -> None:
                written.append(await alice.remember("Flies to Lisbon on Friday"))

            tasks.start_soon(write)
            await hold.reached()
            tasks.start_soon(amem.close)
            await anyio.sleep(HELD)
            assert not ended.is_set(), "the store closed under a running write"
            with pytest.raises(StoreClosed, match="the store is closed"):
                await alice.stats()                 # made after close: refused at once
            hold.release()
    assert ended.is_set() and [i.content for i in written] == ["Flies to Lisbon on Friday"]
    with Memory.open(memory.store.url, embedder=None) as reopened:
        _remembered(reopened, seeded)
        assert reopened.verify()["problems"] == []


@ASYNCIO_ONLY
@pytest.mark.sqlite_only   # SQLite shows who holds the file open
async def test_open_cancelled_by_task_cancel_closes_what_it_opened(tmp_path: Path) -> None:
    reached, release = threading.Event(), threading.Event()

    class SlowToCheck(HashEmbedder):
        """Holds ``Memory.open`` (which checks the model against the store's) in its
        worker thread."""

        @property
        def model_id(self) -> str:
            if not reached.is_set():
                reached.set()
                release.wait(30)
            return "hash:16"

        @model_id.setter
        def model_id(self, value: str) -> None:
            pass

    path = tmp_path / "m.db"
    with Memory.open(path, embedder=None) as seeding:
        seeding.for_user("alice").remember("Prefers green tea")  # to embed: a thread
    before = {thread.ident for thread in threading.enumerate()}

    async def opening() -> AsyncMemory:
        return await AsyncMemory.open(path, embedder=SlowToCheck(dimensions=16))

    task = asyncio.create_task(opening())
    with anyio.fail_after(30):
        while not reached.is_set():
            await asyncio.sleep(0.005)
    task.cancel()
    await asyncio.wait({task}, timeout=HELD)
    assert not task.done(), "the task ended while the store was being opened"
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(HELD)     # time for a store opened behind the task to show
    left = [thread.name for thread in threading.enumerate()    # the opened memory's
            if thread.ident not in before and thread.name.startswith("ledgermem-")
            and thread.name != "ledgermem-close"]
    assert left == [], "the memory opened for the cancelled task was left open"
