"""Kill the extracting process mid-queue, restart: every turn is processed exactly once."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ledgermem import ExtractionOptions, Memory, OpenAICompatibleLLM, SQLiteStore
from ledgermem.testing import ScriptedLLMServer
from tests.pipeline.children import extract_everything
from tests.pipeline.scripts import LONG, add, ops, turns_section
from tests.support import rows

BATCHES = 6
HANG_ON = 3


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_a_killed_worker_loses_nothing_and_nothing_is_applied_twice(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    with Memory(SQLiteStore(path)) as memory:  # no LLM: the turns just wait in the queue
        user = memory.for_user("alice")
        turn_ids = {n: [t.id for t in user.add_turns([
            {"role": "user", "content": f"Note batch{n} for the record " + LONG},
            {"role": "assistant", "content": f"Noted batch{n}."}], infer=True)]
            for n in range(1, BATCHES + 1)}
    asked: list[int] = []
    lock = threading.Lock()
    hang = threading.Event()
    hang.set()

    def answer(body: dict[str, Any]) -> Any:
        found = re.search(r"batch(\d+)", turns_section(body["messages"][1]["content"]))
        assert found is not None
        n = int(found.group(1))
        with lock:
            asked.append(n)
        if n == HANG_ON and hang.is_set():
            return 30.0  # the child waits here until it is killed
        return ops(add(f"Recorded batch{n}"))

    with ScriptedLLMServer(default=answer) as server:
        child = multiprocessing.get_context("spawn").Process(
            target=extract_everything, args=(str(path), server.url))
        child.start()
        deadline = time.monotonic() + 60
        while HANG_ON not in asked and time.monotonic() < deadline and child.is_alive():
            time.sleep(0.02)
        assert HANG_ON in asked, f"the child never asked for batch {HANG_ON}"
        os.kill(child.pid or 0, signal.SIGKILL)
        child.join(timeout=10)
        assert child.exitcode == -signal.SIGKILL
        # killed mid-queue: the batches before the hung one were applied, none after
        states = dict(rows(path, "SELECT id, extraction FROM conversations"))
        assert [{states[t] for t in turn_ids[n]} for n in range(1, BATCHES + 1)] == [
            {"done"} if n < HANG_ON else {"pending"} for n in range(1, BATCHES + 1)]
        hang.clear()

        llm = OpenAICompatibleLLM("scripted-model", server.url, timeout=5, retries=0)
        started = time.monotonic()
        with Memory(SQLiteStore(path), llm=llm,
                    extraction=ExtractionOptions(claim_seconds=1.0)) as memory:
            memory.flush()  # waits for the dead child's claim on batch 3 to lapse
            user = memory.for_user("alice")
            done = memory.store.events("alice", kinds=["turns.extracted"])
            items = user.all_knowledge(limit=None)["items"]
            status = user.status()["extraction"]
        assert time.monotonic() - started < 10
        assert server.errors == []

    # applied exactly once: one ``turns.extracted`` per batch, one item per batch
    settled = Counter(turn for event in done for turn in event.payload["ids"])
    assert settled == Counter(t for ids in turn_ids.values() for t in ids)
    assert all(event.payload["outcome"] == "done" for event in done)
    assert sorted(i.content for i in items) == [f"Recorded batch{n}"
                                               for n in range(1, BATCHES + 1)]
    assert status == {"pending": 0, "done": 2 * BATCHES, "skipped": 0, "failed": 0}
    # asked once each, except the batch whose answer died with the child
    assert Counter(asked) == {n: 2 if n == HANG_ON else 1 for n in range(1, BATCHES + 1)}


def test_two_workers_on_one_file_share_the_queue_without_asking_twice(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with Memory(SQLiteStore(path)) as memory:
        user = memory.for_user("alice")
        for n in range(1, BATCHES + 1):
            user.add_turns([{"role": "user", "content": f"Note batch{n} " + LONG}], infer=True)
    asked: list[int] = []

    def answer(body: dict[str, Any]) -> Any:
        found = re.search(r"batch(\d+)", turns_section(body["messages"][1]["content"]))
        assert found is not None
        asked.append(int(found.group(1)))
        time.sleep(0.05)
        return ops(add(f"Recorded batch{found.group(1)}"))

    with ScriptedLLMServer(default=answer) as server:
        workers = [Memory(SQLiteStore(path), llm=OpenAICompatibleLLM(
            "scripted-model", server.url, timeout=5, retries=0),
            extraction=ExtractionOptions(background=False, queue_batches=2))
            for _ in range(2)]
        threads = [threading.Thread(target=w.flush) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        for worker in workers:
            worker.close()
        assert server.errors == []
    assert Counter(asked) == dict.fromkeys(range(1, BATCHES + 1), 1)
    with Memory(SQLiteStore(path)) as memory:
        items = memory.for_user("alice").all_knowledge(limit=None)["items"]
        done = memory.store.events("alice", kinds=["turns.extracted"])
    assert sorted(i.content for i in items) == [f"Recorded batch{n}"
                                               for n in range(1, BATCHES + 1)]
    assert len(done) == BATCHES
