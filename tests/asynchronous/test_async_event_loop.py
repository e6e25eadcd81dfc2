"""The async API never does its work on the event loop's thread.

Pinned by cause, not by timing: the store's trace hook and a recording embedder say
which thread ran every SQL statement and every embedding (and which thread read the
embedder's model while the store was opened); none may be the loop's. One loop-lag
probe backs this up with a bound no loaded machine reaches by chance: an embedder
that takes a full second per call, against a worst lag of half that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy.typing as npt
import pytest

from ledgermem import AsyncMemory
from ledgermem.testing import HashEmbedder

pytestmark = [pytest.mark.anyio, pytest.mark.sqlite_only]  # the trace hook is SQLite's


class ThreadsSeen:
    """The threads that did a kind of work, by kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_kind: dict[str, set[str]] = {}

    def saw(self, kind: str) -> None:
        with self._lock:
            self.by_kind.setdefault(kind, set()).add(threading.current_thread().name)

    def on(self, thread: threading.Thread) -> list[str]:
        """The kinds of work done on ``thread``."""
        with self._lock:
            return sorted(kind for kind, names in self.by_kind.items()
                          if thread.name in names)


class RecordingEmbedder(HashEmbedder):
    """``HashEmbedder`` that notes which thread embeds and reads its model id."""

    def __init__(self, seen: ThreadsSeen, delay_s: float = 0.0) -> None:
        super().__init__(dimensions=32)
        self.seen, self.delay_s = seen, delay_s

    @property
    def model_id(self) -> str:
        self.seen.saw("model id read")
        return "hash:32"

    @model_id.setter
    def model_id(self, value: str) -> None:
        pass

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        self.seen.saw("embedding")
        time.sleep(self.delay_s)
        return super()._embed(texts, query=query)


async def test_no_statement_or_embedding_runs_on_the_loop_thread(tmp_path: Path) -> None:
    loop_thread = threading.current_thread()
    seen = ThreadsSeen()
    mem = await AsyncMemory.open(tmp_path / "m.db", embedder=RecordingEmbedder(seen))
    assert seen.by_kind.get("model id read")            # the store was opened
    mem.store.trace(lambda sql: seen.saw("SQL"))        # type: ignore[attr-defined]
    alice = mem.for_user("alice")
    # Properties and handles: no I/O at all.
    for name in ("threads", "store", "embedder", "llm", "clock", "limits", "date_order",
                 "views", "memory_index", "extraction_instructions", "maintenance",
                 "skipped"):
        getattr(mem, name)
    assert (alice.scope.user_id, alice.user_id, alice.memory) == ("alice", "alice", mem)
    assert seen.on(loop_thread) == [] and "SQL" not in seen.by_kind
    # Every kind of call, awaited.
    tea = await alice.remember("Prefers green tea", category="preference")
    await alice.remember_many(["Owns a red bike", {"content": "Allergic to nuts"}])
    await alice.add_turns([{"role": "user", "content": "Flying to Lisbon on Friday"}],
                          session_id="alice:chat")
    await mem.flush()
    await alice.search("green tea")
    await alice.search_all("Lisbon tea")
    await alice.search_conversations("Lisbon")
    await alice.get(tea.id)
    tea = await alice.revise(tea.id, "Prefers jasmine tea")
    await alice.update(tea.id, confidence=0.9)
    await alice.history(tea.id)
    await alice.stats()
    await alice.status()
    await alice.record("world.observed", {"text": "it rained"}, agent_id="agent-1")
    await alice.episodic("agent-1")
    await alice.forget(tea.id)
    await mem.embed_pending()
    await mem.maintain()
    await mem.verify()
    await mem.rebuild()
    await mem.close()
    assert {"SQL", "embedding"} <= seen.by_kind.keys()   # the probes saw the work
    assert seen.on(loop_thread) == [], seen.by_kind


async def test_the_loop_keeps_running_while_a_call_takes_a_second(tmp_path: Path) -> None:
    seen = ThreadsSeen()
    async with AsyncMemory.open(tmp_path / "m.db", embedder=RecordingEmbedder(seen)
                                ) as mem:
        alice = mem.for_user("alice")
        await alice.remember("Prefers green tea")
        await mem.flush()
        mem.sync.embedder.delay_s = 1.0   # every embedding from now on takes a second
        worst, probing = 0.0, True

        async def probe() -> None:
            nonlocal worst
            while probing:
                before = time.monotonic()
                await anyio.sleep(0.001)
                worst = max(worst, time.monotonic() - before)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(probe)
            started = time.monotonic()
            hits: Any = await alice.search("green tea", touch=False)  # embeds its query
            took = time.monotonic() - started
            probing = False
        assert [h.content for h in hits] == ["Prefers green tea"]
        assert took >= 1.0                     # the slow embedding did run
        assert worst < 0.5, f"the loop stalled {worst:.2f} s during a search"
