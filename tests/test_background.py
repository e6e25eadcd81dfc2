"""The background worker loop: failures are retried, a close mid-batch is quiet, a
store closed under a running worker ends it, and a process that exits without closing
its workers exits cleanly."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy.typing as npt
import pytest

from ledgermem import Memory
from ledgermem.background import BackgroundWorker
from ledgermem.retrieval.embedding import EmbeddingWorker
from ledgermem.testing import HashEmbedder


class _Failing(BackgroundWorker):
    thread_name = "ledgermem-test-worker"
    log_name = "ledgermem.test-worker"

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def run_once(self) -> int:
        self.started.set()
        self.release.wait(5)
        raise RuntimeError("the store is closed")


def test_a_batch_failing_because_of_close_is_not_logged_as_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    worker = _Failing()
    with caplog.at_level(logging.DEBUG, logger="ledgermem.test-worker"):
        worker.notify()
        assert worker.started.wait(5)
        closing = threading.Thread(target=worker.close)
        closing.start()
        while not worker._stop.is_set():
            pass
        worker.release.set()  # the batch now fails, as it would on a closed store
        closing.join(10)
    assert worker.failures == 0
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_a_failing_batch_is_logged_and_retried() -> None:
    worker = _Failing()
    worker.release.set()
    worker.notify()
    deadline = threading.Event()
    for _ in range(100):
        if worker.failures:
            break
        deadline.wait(0.01)
    worker.close()
    assert worker.failures >= 1


def test_a_store_closed_under_the_recall_worker_ends_it_without_retrying(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    memory = Memory.open(tmp_path / "m.db", embedder=None, recall_interval_s=30)
    alice = memory.for_user("alice")
    alice.remember("Alice takes her tea without sugar")
    assert alice.search("tea")  # notes the use: the recall worker now holds work
    worker = memory.recalls
    assert worker.pending() == 1 and worker._thread is not None
    memory.store.close()  # the store, not the memory: the worker was never closed
    with caplog.at_level(logging.DEBUG, logger="ledgermem.recall"):
        worker._wake.set()
        worker._thread.join(10)
    assert not worker._thread.is_alive()
    assert worker.failures == 0
    assert [(r.levelno, r.exc_info) for r in caplog.records] == [(logging.WARNING, None)]
    assert "store was closed" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ledgermem.recall"):
        memory.close()  # quiet: says what it could not apply
    assert [r.getMessage() for r in caplog.records] == [
        "1 recalled items not applied: the store was closed"]


def test_the_recall_worker_writes_once_an_interval_while_searches_keep_noting(
        tmp_path: Path) -> None:
    """Searches without a pause note items all the time; the worker still applies them
    once per interval (one ``memory.recalled`` event), not in a transaction after every
    few searches, each of which made the searches read their pages again."""
    interval = 0.25
    with Memory.open(tmp_path / "m.db", embedder=None, recall_interval_s=interval) as memory:
        alice = memory.for_user("alice")
        alice.remember("Alice takes her tea without sugar")
        started = time.monotonic()
        searches = 0
        while time.monotonic() - started < 4 * interval:
            assert alice.search("tea")
            searches += 1
        elapsed = time.monotonic() - started
        written = len(memory.store.events("alice", kinds=["memory.recalled"]))
        assert searches > 20 * written
        assert 1 <= written <= elapsed / interval + 1
        used = [hit.item.use_count for hit in alice.search("tea", touch=False) if hit.item]
        assert used == [written]   # one use per interval, however many searches


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_the_embedding_worker_and_the_threads_it_starts_yield_the_cpu(tmp_path: Path) -> None:
    """Background embedding runs at a lower priority than the caller (and so do the
    batch threads it starts), so writes and searches get the cores first."""
    seen: dict[str, int] = {}
    inner_done = threading.Event()

    def started_by_it() -> None:
        me = threading.get_native_id()
        seen.setdefault("started by it", os.getpriority(os.PRIO_PROCESS, me))
        inner_done.set()

    class Watching(HashEmbedder):
        def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
            me = threading.get_native_id()
            seen.setdefault(threading.current_thread().name,
                            os.getpriority(os.PRIO_PROCESS, me))
            if threading.current_thread().name == EmbeddingWorker.thread_name:
                started = threading.Thread(target=started_by_it)
                started.start()
                started.join()
            return super()._embed(texts, query=query)

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with Memory.open(tmp_path / "nice.db", embedder=Watching()) as memory:
        memory.for_user("alice").remember("Tea at four")
        assert inner_done.wait(30)
    assert mine < 19    # else there is no lower priority to take
    assert seen[EmbeddingWorker.thread_name] == min(19, mine + 10)
    assert seen["started by it"] == seen[EmbeddingWorker.thread_name]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


_EXIT_WHILE_THE_MODEL_LOADS = '''
import sys, threading, time
from ledgermem import Memory


class SlowTeardown:
    def __del__(self) -> None:  # the interpreter's teardown takes a while, as a big app's
        time.sleep(2)


slow = SlowTeardown()
memory = Memory.open("memory.db")  # no close(), as a short script goes
memory.for_user("alice").remember("Prefers green tea over coffee")


def loading() -> bool:
    for thread in threading.enumerate():
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            if frame.f_code.co_name == "_minilm_session":
                return True
            frame = frame.f_back
    return False


deadline = time.monotonic() + 60
while not loading() and time.monotonic() < deadline:
    time.sleep(0.001)
print("exiting while the model loads" if loading() else "missed")
'''


def test_a_script_that_exits_while_the_embedder_works_exits_cleanly(tmp_path: Path) -> None:
    """A process that ends without ``close()`` while the embedding worker is inside
    onnxruntime: the worker is stopped at exit (its call in flight finishes) rather than
    killed as it takes the GIL back, which aborted the process (SIGABRT: "terminate
    called without an active exception")."""
    done = subprocess.run([sys.executable, "-c", _EXIT_WHILE_THE_MODEL_LOADS], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "exiting while the model loads"
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr
