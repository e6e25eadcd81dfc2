"""Process entry points for the PostgreSQL multi-process tests (spawned children)."""

from __future__ import annotations

import os
from typing import Any

from ledgermem import Memory
from ledgermem.store.postgres import PostgresStore


def write_and_search(url: str, worker: int, count: int, start: Any) -> None:
    """Write ``count`` unique items and turns for one shared user, searching as it goes.

    ``start`` is a multiprocessing barrier: every child begins writing at once.
    """
    memory = Memory(PostgresStore(url, max_size=2), embedder=None)
    try:
        user = memory.for_user("shared")
        start.wait(timeout=60)
        for n in range(count):
            user.remember(" ".join(f"p{worker}w{n}t{i}" for i in range(4)),
                          metadata={"worker": worker})
            user.add_turn("user", f"worker {worker} turn {n}", session_id=f"worker-{worker}")
            if n % 10 == 0:
                user.search(f"p{(worker + 1) % 3}w{n}t0 p{worker}w0t1", touch=n % 20 == 0)
    finally:
        memory.close()


def claim_then_die(url: str, claimed: Any, release: Any) -> None:
    """Claim every pending knowledge row, report the ids, then die mid-claim."""
    store = PostgresStore(url, max_size=1)
    with store.claim_pending_embeddings("knowledge", 1000) as rows:
        claimed.put([row_id for row_id, _ in rows])
        release.wait(timeout=60)
        os._exit(3)  # no commit, no cleanup: the server must release the claim
