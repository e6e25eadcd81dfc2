"""Many threads on one Memory, and many processes on one file."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from pathlib import Path

import pytest

from ledgermem import Memory
from ledgermem.store.migrations import SQLITE_MIGRATIONS
from tests.workers import write_items_and_turns

THREADS, PER_THREAD = 8, 50
PROCESSES, PER_PROCESS = 4, 100
LATEST = max(m.version for m in SQLITE_MIGRATIONS)


def unique_text(thread: int, n: int) -> str:
    """Texts sharing no word with each other, so dedup never merges two of them."""
    return " ".join(f"t{thread}n{n}w{i}" for i in range(5))


def test_threads_remember_and_search_concurrently(mem: Memory) -> None:
    errors: list[BaseException] = []
    made: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def work(thread: int) -> None:
        try:
            user = mem.for_user("alice")
            start.wait(timeout=30)
            for n in range(PER_THREAD):
                item = user.remember(unique_text(thread, n), metadata={"thread": thread})
                with lock:
                    made.append(item.id)
                if n % 5 == 0:
                    user.search(f"t{(thread + 1) % THREADS}n{n}w0 t{thread}n0w1")
                    user.all_knowledge(limit=10)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    alice = mem.for_user("alice")
    items = alice.all_knowledge(limit=None)["items"]
    assert len(items) == THREADS * PER_THREAD == len(set(made))
    assert {i.id for i in items} == set(made)
    assert Counter(i.metadata["thread"] for i in items) == dict.fromkeys(range(THREADS),
                                                                          PER_THREAD)
    for number in range(THREADS):
        assert [h.content for h in alice.search(unique_text(number, 7), touch=False,
                                                top_k=1)] == [unique_text(number, 7)]
    assert alice.stats()["events"] >= THREADS * PER_THREAD


# SQLite only: processes sharing one file through WAL and its lock. PostgreSQL's twin
# is tests/postgres/test_postgres.py::test_processes_write_and_search_concurrently.
@pytest.mark.sqlite_only
def test_processes_write_the_same_file_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"  # not created yet: the children race to create it too
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(PROCESSES)
    children = [ctx.Process(target=write_items_and_turns,
                            args=(str(path), worker, PER_PROCESS, start))
                for worker in range(PROCESSES)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=180)
    assert [c.exitcode for c in children] == [0] * PROCESSES

    with Memory.open(path, embedder=None) as memory:
        user = memory.for_user("shared")
        items = user.all_knowledge(limit=None)["items"]
        assert len(items) == PROCESSES * PER_PROCESS
        assert Counter(i.metadata["worker"] for i in items) == dict.fromkeys(
            range(PROCESSES), PER_PROCESS)
        assert len(user.recent_conversations(limit=10_000)) == PROCESSES * PER_PROCESS
        assert sorted((s["session_id"], s["turns"]) for s in user.sessions()) == [
            (f"worker-{w}", PER_PROCESS) for w in range(PROCESSES)]
        stats = user.stats()
        assert (stats["items"], stats["turns"], stats["events"]) == (
            PROCESSES * PER_PROCESS, PROCESSES * PER_PROCESS, 2 * PROCESSES * PER_PROCESS)
        assert memory.store.schema_version() == LATEST  # type: ignore[attr-defined]
        assert len(user.search("worker3 item42", touch=False, top_k=1)) == 1


def test_a_thread_that_ends_releases_its_connection(tmp_path: Path) -> None:
    import gc

    from ledgermem.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "threads.db")
    try:
        baseline = store.connections()
        for _ in range(3):  # as a worker pool retiring idle threads and starting new ones
            workers = [threading.Thread(target=store.user_ids) for _ in range(4)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            del workers, worker
            gc.collect()
        assert store.connections() == baseline
    finally:
        store.close()


def test_a_thread_opening_a_connection_as_the_program_exits_prints_nothing(
        tmp_path: Path) -> None:
    """Threads still opening connections while the interpreter exits: no finalizer is
    registered per thread (registering one during the exit's walk of them raised
    "dictionary changed size during iteration" on stderr), and nothing is printed."""
    import subprocess
    import sys
    import weakref

    from ledgermem.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "exit.db")
    try:
        registered = len(weakref.finalize._registry)  # type: ignore[attr-defined]
        worker = threading.Thread(target=store.user_ids)
        worker.start()
        worker.join()
        assert len(weakref.finalize._registry) == registered  # type: ignore[attr-defined]
    finally:
        store.close()
    script = f"""
import threading
from ledgermem.store.sqlite import SQLiteStore
store = SQLiteStore({str(tmp_path / "exit.db")!r})
def churn():
    while True:
        worker = threading.Thread(target=store.user_ids)
        worker.start()
        worker.join()
for _ in range(4):
    threading.Thread(target=churn, daemon=True).start()
"""
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0 and done.stderr == "", done.stderr


TRACE_WHILE_BUSY = """
import os, sys, threading
from ledgermem.store.sqlite import SQLiteStore

store = SQLiteStore(sys.argv[1])
inside, go = threading.Event(), threading.Event()


def wait_here():       # runs inside the statement, holding the connection
    inside.set()
    go.wait(5)
    return 1


def busy():
    store._conn().create_function("wait_here", 0, wait_here)
    store._read("SELECT wait_here()")


worker = threading.Thread(target=busy, daemon=True)
worker.start()
inside.wait(5)
threading.Timer(0.3, go.set).start()
store.trace(lambda sql: None)
store.trace(None)
worker.join(5)
print("done" if not worker.is_alive() else "stuck")
os._exit(0)
"""


def test_tracing_starts_and_stops_while_another_thread_runs_a_statement(
        tmp_path: Path) -> None:
    """``trace`` does not touch a connection another thread is running a statement on:
    setting its callback there waited for the connection while holding the interpreter
    lock, which that statement's callbacks need, and the whole process hung (as a
    test's ``statements`` block once did while the embedding worker read). Run in a
    child process, so that a hang fails this test instead of stopping the suite."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", TRACE_WHILE_BUSY, str(tmp_path / "t.db")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "done", done.stderr
