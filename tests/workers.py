"""Process entry points for the multi-process tests (spawned children import this)."""

from __future__ import annotations

from typing import Any

from ledgermem import Memory


def write_items_and_turns(path: str, worker: int, count: int, start: Any) -> None:
    """Open the shared file and write ``count`` unique items and ``count`` turns.

    ``start`` is a multiprocessing barrier: every child begins writing at once.
    """
    memory = Memory.open(path, embedder=None)
    try:
        user = memory.for_user("shared")
        start.wait(timeout=60)
        for n in range(count):
            user.remember(f"worker{worker} item{n} " + " ".join(
                f"p{worker}w{n}t{i}" for i in range(4)), metadata={"worker": worker})
            user.add_turn("user" if n % 2 else "assistant", f"worker {worker} turn {n}",
                          session_id=f"worker-{worker}")
    finally:
        memory.close()
