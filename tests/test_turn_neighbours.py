"""SQLite: each turn's neighbours in its session, which its vector score is smoothed
over, kept current as turns arrive: after a turn is added only its session is read
again, and the neighbours equal those of a rebuild from scratch. Rows forgotten or
pruned stop scoring, and stop lifting their neighbours, once the change commits."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ledgermem import Memory, UserMemory
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.store.vector_index import UserVectors
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock, traced

DAY = datetime(2026, 3, 2, 9, tzinfo=UTC)


@pytest.fixture
def memory(tmp_path: Path, clock: FakeClock) -> Iterator[Memory]:
    with Memory.open(tmp_path / "n.db", embedder=HashEmbedder(), clock=clock) as opened:
        yield opened


def _say(alice: UserMemory, session: str, minutes: list[int]) -> list[str]:
    return [turn.id for turn in alice.add_turns(
        [{"role": "user", "content": f"{session} talk about kettles, minute {m}",
          "at": DAY + timedelta(minutes=m)} for m in minutes], session_id=session)]


def _block(memory: Memory) -> UserVectors:
    store = memory.store
    assert isinstance(store, SQLiteStore)
    return store._indexes["conversations"].users["alice"]


def _by_id(block: UserVectors) -> dict[str, set[str]]:
    assert block.neighbours is not None
    return {block.ids[row]: {block.ids[n] for n in block.neighbours[row] if n >= 0}
            for row in range(block.count)}


def _rebuilt(memory: Memory) -> dict[str, set[str]]:
    """The neighbours a rebuild from scratch gives (the live block is left as it was)."""
    block = _block(memory)
    kept = block.neighbours, block.neighbours_key
    block.neighbours, block.neighbours_key = None, (-1, -1)
    store = memory.store
    assert isinstance(store, SQLiteStore)
    store._turn_neighbours("alice", block)
    fresh = _by_id(block)
    block.neighbours, block.neighbours_key = kept
    return fresh


def _search(memory: Memory) -> list[str]:
    """The statements a search runs, after the turns written are embedded."""
    memory.flush()
    with traced(memory.store, lambda sql: "session_id" in sql) as seen:
        memory.for_user("alice").search_conversations("kettles", limit=5)
    return seen


def test_a_turn_added_rereads_only_its_session(memory: Memory) -> None:
    alice = memory.for_user("alice")
    first = _say(alice, "s1", [0, 10, 20, 30])
    _say(alice, "s2", [1, 11, 21])
    _say(alice, "s3", [2, 12])
    seen = _search(memory)
    assert any("ORDER BY session_id" in sql and "IN (" not in sql for sql in seen)
    assert _by_id(_block(memory))[first[1]] == {first[0], first[2], first[3]}

    # Into s1's middle by time (between minutes 10 and 20), and a new session.
    middle = _say(alice, "s1", [15])[0]
    _say(alice, "s4", [3, 13])
    seen = _search(memory)
    reads = [sql for sql in seen if "ORDER BY session_id" in sql]
    assert reads and all("session_id IN" in sql for sql in reads)
    assert all("'s2'" not in sql and "'s3'" not in sql for sql in reads)
    now = _by_id(_block(memory))
    assert now == _rebuilt(memory)
    assert now[middle] == {first[0], first[1], first[2], first[3]}
    assert now[first[3]] == {middle, first[2]}

    _search(memory)  # nothing new: nothing read
    assert not [sql for sql in _search(memory) if "ORDER BY session_id" in sql]


def test_a_block_that_lost_a_turn_reads_every_session_again(memory: Memory) -> None:
    alice = memory.for_user("alice")
    turns = _say(alice, "s1", [0, 10, 20, 30, 40, 50])
    _say(alice, "s2", [5, 15])
    _search(memory)
    block = _block(memory)
    block.forget([turns[2]])  # as a forget does once it commits
    assert block.neighbours is None
    seen = _search(memory)
    assert any("ORDER BY session_id" in sql and "IN (" not in sql for sql in seen)
    assert _by_id(_block(memory)) == _rebuilt(memory)


def test_pruned_turns_stop_scoring_and_lifting_their_neighbours(memory: Memory) -> None:
    alice = memory.for_user("alice")
    later = 60 * 24 * 60  # 60 days after DAY, within prune's 90 days of the clock
    old = _say(alice, "s1", [0, 10])
    recent = _say(alice, "s1", [later, later + 10])
    _search(memory)
    assert _by_id(_block(memory))[recent[0]] == {old[0], old[1], recent[1]}

    assert alice.prune(days=90)["turns"] == 2
    block = _block(memory)
    assert not block.alive[[block.position[turn] for turn in old]].any()
    assert block.alive[[block.position[turn] for turn in recent]].all()
    assert block.neighbours is None
    _search(memory)
    assert _by_id(_block(memory))[recent[0]] == {recent[1]}
    assert _by_id(_block(memory)) == _rebuilt(memory)


def test_a_forgotten_item_stops_scoring_in_the_live_index(memory: Memory) -> None:
    alice = memory.for_user("alice")
    kept = alice.remember("Alice keeps her kettle descaled")
    gone = alice.remember("Alice's old kettle was green")
    memory.flush()
    assert {hit.id for hit in alice.search("kettle")} >= {kept.id, gone.id}
    store = memory.store
    assert isinstance(store, SQLiteStore)
    block = store._indexes["knowledge"].users["alice"]
    alice.forget(gone.id)
    assert not block.alive[block.position[gone.id]]
    assert block.alive[block.position[kept.id]]
    assert block.accounted()[0] == 1
