"""Errors raised in a worker thread reach the awaiting caller as the sync API raises
them: the same type, the same message, the driver's error still chained, and nothing
logged (an expected error is the caller's to handle, not a traceback in the logs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgermem import (
    AsyncMemory,
    ConfigError,
    InvalidInput,
    LedgermemError,
    Memory,
    NotFound,
    SchemaMismatch,
    StorageError,
    StoreClosed,
)
from ledgermem.testing import HashEmbedder

pytestmark = pytest.mark.anyio


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record of the test, from every logger, DEBUG up."""
    with caplog.at_level(logging.DEBUG):
        yield caplog


def noisy(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Records that would put a traceback or a warning in a user's logs."""
    return [f"{r.name} {r.levelname}: {r.getMessage()}" for r in caplog.records
            if r.exc_info or r.levelno >= logging.WARNING]


# the same calls, sync and awaited, on a memory holding one item of bob's -----------
CASES: dict[str, tuple[type[LedgermemError], Callable[[Any, str], Any]]] = {
    "unknown id": (NotFound, lambda alice, bobs: alice.get("no-such-id")),
    "another user's id": (NotFound, lambda alice, bobs: alice.get(bobs)),
    "history of another user's id": (NotFound, lambda alice, bobs: alice.history(bobs)),
    "revise another user's id": (NotFound, lambda alice, bobs: alice.revise(bobs, "x")),
    "forget another user's id": (NotFound, lambda alice, bobs: alice.forget(bobs)),
    "empty content": (InvalidInput, lambda alice, bobs: alice.remember("  ")),
    "unknown category": (InvalidInput,
                         lambda alice, bobs: alice.remember("x", category="nonsense")),
    "bad role": (InvalidInput,
                 lambda alice, bobs: alice.add_turns([{"role": "nobody", "content": "hi"}])),
    "bad limit": (InvalidInput, lambda alice, bobs: alice.search("tea", top_k=0)),
    "query too long": (InvalidInput, lambda alice, bobs: alice.search("x" * 20_000)),
    "bad entry in a batch": (InvalidInput,
                             lambda alice, bobs: alice.remember_many(["ok", {"nope": 1}])),
}


def raised(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


@pytest.mark.parametrize("case", CASES)
async def test_an_error_in_the_worker_is_the_sync_api_s_error(
        case: str, memory: Memory, quiet: pytest.LogCaptureFixture) -> None:
    kind, call = CASES[case]
    bobs = memory.for_user("bob").remember("Bob's secret").id
    before = memory.for_user("alice").stats()
    expected = raised(lambda: call(memory.for_user("alice"), bobs))
    quiet.clear()
    amem = AsyncMemory.from_sync(memory)
    with pytest.raises(kind) as caught:
        await call(amem.for_user("alice"), bobs)
    assert type(caught.value) is type(expected)
    assert str(caught.value) == str(expected)
    assert noisy(quiet) == []
    assert await amem.for_user("alice").stats() == before      # nothing was written


async def test_an_error_from_the_store_keeps_the_driver_s_error_chained(
        tmp_path: Path, quiet: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "not-a-database.db"
    path.write_bytes(b"garbage " * 1000)
    expected = raised(lambda: Memory.open(path, embedder=None))
    with pytest.raises(StorageError) as caught:
        await AsyncMemory.open(path, embedder=None)
    assert type(caught.value) is type(expected) and str(caught.value) == str(expected)
    assert type(caught.value.__cause__) is type(expected.__cause__)
    assert noisy(quiet) == []


async def test_opening_errors_come_from_the_worker_unchanged(
        tmp_path: Path, quiet: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError, match="unsupported database URL"):
        await AsyncMemory.open("mysql://nowhere/db")
    with pytest.raises(ConfigError, match="unsupported database URL"):
        async with AsyncMemory.open("mysql://nowhere/db"):
            raise AssertionError("not reached")
    path = tmp_path / "m.db"
    with Memory.open(path, embedder=HashEmbedder(dimensions=16)):
        pass
    expected = raised(lambda: Memory.open(path, embedder=HashEmbedder(dimensions=32)))
    with pytest.raises(SchemaMismatch) as caught:
        await AsyncMemory.open(path, embedder=HashEmbedder(dimensions=32))
    assert str(caught.value) == str(expected)
    assert noisy(quiet) == []


async def test_a_store_closed_underneath_raises_store_closed(
        memory: Memory, quiet: pytest.LogCaptureFixture) -> None:
    amem = AsyncMemory.from_sync(memory)
    alice = amem.for_user("alice")
    await alice.remember("Prefers green tea")
    memory.close()                               # the sync object, closed directly
    expected = raised(lambda: memory.for_user("alice").stats())
    with pytest.raises(StoreClosed) as caught:
        await alice.stats()
    assert str(caught.value) == str(expected)
    assert noisy(quiet) == []


async def test_calls_after_close_raise_store_closed_without_a_thread(
        memory: Memory, quiet: pytest.LogCaptureFixture) -> None:
    amem = AsyncMemory.from_sync(memory)
    alice = amem.for_user("alice")
    await amem.close()
    await amem.close()                           # closing twice is fine
    with pytest.raises(StoreClosed, match="the store is closed"):
        await alice.remember("Too late")
    with pytest.raises(StoreClosed, match="the store is closed"):
        await amem.flush()
    assert noisy(quiet) == []
