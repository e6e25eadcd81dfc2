"""A turn's neighbour text (``context``: up to ``CONTEXT_TURNS`` turns each side in its
session) is written with the turn, and the stored turns around it are updated, however
the new turns' times fall among the stored ones; on both stores."""

from __future__ import annotations

import random
from contextlib import nullcontext
from typing import Any

from ledgermem import Memory
from ledgermem.store.sql import CONTEXT_TURNS


def _expected(turns: list[tuple[str, int, str]]) -> dict[str, str]:
    """(ts, order written, content) → each turn's context, computed from scratch."""
    ordered = sorted(turns)
    n = CONTEXT_TURNS
    return {ordered[i][2]: "\n".join(ordered[j][2] for j in range(
        max(0, i - n), min(len(ordered), i + n + 1)) if j != i) for i in range(len(ordered))}


def _stored(mem: Memory) -> dict[str, str]:
    store: Any = mem.store
    with store._scope(("alice", False)) if hasattr(store, "_scope") else nullcontext():
        return dict(store._read("SELECT content, context FROM conversations "
                                "WHERE session_id = ?", ["alice:talk"]))


def test_turns_added_among_stored_ones_get_the_neighbours_a_rebuild_gives(
        mem: Memory) -> None:
    alice = mem.for_user("alice")
    rng = random.Random(7)
    written: list[tuple[str, int, str]] = []
    # Four calls whose times interleave: before, among and after what is stored,
    # with ties on the same second.
    for call in range(4):
        batch = []
        for k in range(7):
            second = rng.randrange(0, 40)
            text = f"turn {call}-{k} about kites"
            batch.append({"role": "user", "content": text,
                          "at": f"2026-03-01T10:00:{second:02d}+00:00"})
            written.append((f"2026-03-01T10:00:{second:02d}", len(written), text))
        alice.add_turns(batch, session_id="alice:talk")
    alice.add_turn("user", "another session", session_id="alice:other")
    rows = _stored(mem)
    assert rows == _expected(written)
    mem.store.rebuild()  # replays the ledger into empty views, one event after another
    assert _stored(mem) == rows
