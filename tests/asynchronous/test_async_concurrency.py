"""Many tasks on one ``AsyncMemory``, on both stores and both event loops.

A hundred tasks write and search for several users at once: nothing fails, nothing
is lost, no user sees another's rows, the worker threads stay within the limit (the
memory's own ``CapacityLimiter``, not anyio's default one of 40 threads), and a
burst larger than any limit neither deadlocks nor starves a call. Leaving
``async with`` while tasks still run waits for the calls under way, refuses the
calls that had not started (``StoreClosed``), and closes: every write a task saw
succeed is kept, whole.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgermem import AsyncMemory, Memory, StoreClosed
from tests.support import FakeClock

pytestmark = pytest.mark.anyio

USERS = ("ada", "bea", "cyd", "dov", "eli")
TASKS = 100


class Peak:
    """The most store calls seen running at once (the store's trace hook sees every
    statement's thread; a thread is in a call between its first statement and the
    call's return)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[int] = set()
        self.most = 0

    def enter(self) -> None:
        with self._lock:
            self._running.add(threading.get_ident())
            self.most = max(self.most, len(self._running))

    def leave(self) -> None:
        with self._lock:
            self._running.discard(threading.get_ident())


async def burst(amem: AsyncMemory, peak: Peak | None = None) -> dict[str, set[str]]:
    """``TASKS`` tasks at once, each for one of ``USERS``: remember a fact, then search
    for the word every fact shares. Returns what each user's searches found."""
    found: dict[str, set[str]] = {user: set() for user in USERS}

    async def one(n: int) -> None:
        user = USERS[n % len(USERS)]
        handle = amem.for_user(user)
        item = await handle.remember(f"marker fact {n} of {user}", dedup=False)
        assert item.user_id == user
        hits = await handle.search("marker", top_k=TASKS, touch=n % 2 == 0)
        found[user].update(h.content for h in hits)

    with anyio.fail_after(120):        # a deadlock fails here, not by hanging the run
        async with anyio.create_task_group() as tasks:
            for n in range(TASKS):
                tasks.start_soon(one, n)
    return found


def expected(user: str) -> set[str]:
    return {f"marker fact {n} of {user}" for n in range(TASKS)
            if USERS[n % len(USERS)] == user}


@pytest.mark.parametrize("threads", [8, 40])
async def test_a_hundred_tasks_write_and_search_for_five_users(
        memory: Memory, threads: int) -> None:
    amem = AsyncMemory.from_sync(memory, threads=threads)
    found = await burst(amem)
    await amem.flush()
    for user in USERS:
        handle = amem.for_user(user)
        kept = {i.content for i in (await handle.all_knowledge())["items"]}
        assert kept == expected(user)                      # none lost, none foreign
        assert found[user] <= expected(user)               # searches saw only theirs
        hits = await handle.search("marker", top_k=TASKS, touch=False)
        assert {h.content for h in hits} == expected(user)
    report = await amem.verify()
    assert report["problems"] == [], report
    await amem.close()


@pytest.mark.sqlite_only   # the limit is the memory's, whatever the store
@pytest.mark.parametrize("threads", [1, 3])
async def test_a_burst_runs_at_most_threads_calls_at_once(memory: Memory,
                                                          threads: int) -> None:
    peak = Peak()
    original = memory.for_user

    def traced(*args: Any, **kwargs: Any) -> Any:
        handle = original(*args, **kwargs)
        remember, search = handle.remember, handle.search

        def remember_(*a: Any, **k: Any) -> Any:
            peak.enter()
            try:
                return remember(*a, **k)
            finally:
                peak.leave()

        def search_(*a: Any, **k: Any) -> Any:
            peak.enter()
            try:
                return search(*a, **k)
            finally:
                peak.leave()

        handle.remember, handle.search = remember_, search_  # type: ignore[method-assign]
        return handle

    memory.for_user = traced  # type: ignore[method-assign]
    amem = AsyncMemory.from_sync(memory, threads=threads)
    await burst(amem)
    assert 1 <= peak.most <= threads


@pytest.mark.sqlite_only   # the limiter is the same on both stores
async def test_calls_do_not_queue_behind_anyio_s_default_thread_limiter(
        memory: Memory) -> None:
    """Sync endpoints (FastAPI's) and ``to_thread`` calls elsewhere share anyio's
    default limiter of 40 threads: with all of it taken, the memory's calls still run."""
    default = anyio.to_thread.current_default_thread_limiter()
    taken, release = threading.Event(), threading.Event()
    amem = AsyncMemory.from_sync(memory, threads=2)

    def take_it() -> None:
        taken.set()
        release.wait(30)

    default.total_tokens = 1
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.to_thread.run_sync, take_it)
            while not taken.is_set():
                await anyio.sleep(0.005)
            with anyio.fail_after(30):
                found = await burst(amem)
            release.set()
    finally:
        default.total_tokens = 40
    assert found["ada"] <= expected("ada")


async def test_leaving_async_with_while_tasks_still_run_waits_and_refuses(
        db_url: str, clock: FakeClock) -> None:
    written: list[str] = []
    refused: list[BaseException] = []
    begun = anyio.Event()

    async def writer(mem: AsyncMemory, n: int) -> None:
        begun.set()   # its call is made before this task next lets another run
        try:
            item = await mem.for_user(USERS[n % len(USERS)]).remember(
                f"written {n}", dedup=False)
        except StoreClosed as exc:
            refused.append(exc)
        else:
            written.append(item.content)

    async with (anyio.create_task_group() as outside,
                AsyncMemory.open(db_url, embedder=None, clock=clock, threads=4) as mem):
        for n in range(40):
            outside.start_soon(writer, mem, n)   # in a task group the block outlives
        await begun.wait()                       # a first call is under way (trio runs
        # new tasks and this one in a random order: one checkpoint did not promise it)
    assert len(written) + len(refused) == 40
    assert written, "no call had started when the block ended"
    assert all(str(exc) == "the store is closed" for exc in refused)
    with Memory.open(db_url, embedder=None) as reopened:
        kept = {i.content for user in USERS
                for i in reopened.for_user(user).all_knowledge()["items"]}
        assert kept == set(written)
        assert reopened.verify()["problems"] == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_closing_with_asyncio_tasks_still_running_lets_them_finish(
        db_url: str, clock: FakeClock) -> None:
    mem = await AsyncMemory.open(db_url, embedder=None, clock=clock, threads=4)
    tasks = [asyncio.create_task(mem.for_user(USERS[n % 5]).remember(f"written {n}"))
             for n in range(40)]
    await asyncio.sleep(0)
    await mem.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(e, StoreClosed) for e in errors), errors
    written = {r.content for r in results if not isinstance(r, BaseException)}
    assert written
    with Memory.open(db_url, embedder=None) as reopened:
        kept = {i.content for user in USERS
                for i in reopened.for_user(user).all_knowledge()["items"]}
        assert kept == written
        assert reopened.verify()["problems"] == []


CLOSE_DURING_A_WRITE = """
import sys, threading
from ledgermem import Memory, StoreClosed

memory = Memory.open(sys.argv[1], embedder=None)
alice = memory.for_user("alice")
reached, release = threading.Event(), threading.Event()


def hold(sql):
    if sql.startswith("INSERT INTO events") and not reached.is_set():
        reached.set()
        release.wait(30)


memory.store.trace(hold)
outcome = []


def write():
    try:
        outcome.append(alice.remember("Held mid-transaction").content)
    except StoreClosed:
        outcome.append("StoreClosed")


writer = threading.Thread(target=write)
writer.start()
reached.wait(30)
closer = threading.Thread(target=memory.close)
closer.start()
closer.join(0.3)
release.set()
writer.join(30)
closer.join(30)
print(outcome)
"""


def test_closing_the_sync_store_during_another_thread_s_write_is_safe(tmp_path: Path
                                                                      ) -> None:
    """``close`` waits for the transaction another thread holds (it closed that
    thread's connection mid-statement, and the interpreter crashed)."""
    path = tmp_path / "m.db"
    done = subprocess.run([sys.executable, "-c", CLOSE_DURING_A_WRITE, str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() in ("['Held mid-transaction']", "['StoreClosed']")
    with Memory.open(path, embedder=None) as reopened:
        assert reopened.verify()["problems"] == []


CLOSE_PAST_THE_WAIT = """
import sys, threading
from ledgermem import Memory, StoreClosed
from ledgermem.store import sqlite as backend

backend.CLOSE_WAIT_S = 0.2
memory = Memory.open(sys.argv[1], embedder=None)
alice = memory.for_user("alice")
alice.remember("Alice drinks green tea")
reached, release = threading.Event(), threading.Event()


def hold(sql):
    if "knowledge_fts MATCH" in sql and not reached.is_set():
        reached.set()
        release.wait(30)


outcome = []


def read():
    try:
        outcome.append([hit.content for hit in alice.search("green tea", touch=False)])
    except StoreClosed:
        outcome.append("StoreClosed")


memory.store.trace(hold)
reader = threading.Thread(target=read)
reader.start()
reached.wait(30)
memory.close()   # gives up waiting for the reader: its connection is left to it
outcome.append(memory.store.connections())
release.set()
reader.join(30)
outcome.append(memory.store.connections())
print(outcome)
"""


def test_a_statement_outlasting_close_s_wait_keeps_its_connection_until_it_ends(
        tmp_path: Path) -> None:
    """Past ``CLOSE_WAIT_S`` ``close`` returns and closes every idle connection; the
    one a statement still runs on is closed by its thread once the statement ends, and
    that thread's next statement meets ``StoreClosed``."""
    path = tmp_path / "m.db"
    done = subprocess.run([sys.executable, "-c", CLOSE_PAST_THE_WAIT, str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[1, 'StoreClosed', 0]"
    with Memory.open(path, embedder=None) as reopened:
        assert [h.content for h in reopened.for_user("alice").search("green tea")] == [
            "Alice drinks green tea"]
