"""apply_confidence_decay and prune, driven by the fake clock."""

from __future__ import annotations

import pytest

from ledgermem import InvalidInput, Memory, NotFound, UserMemory
from tests.support import FakeClock, event_count, rows, supersede


def test_items_unused_for_over_30_days_decay_by_a_tenth(alice: UserMemory,
                                                        clock: FakeClock) -> None:
    item = alice.remember("Old fact")
    clock.advance(days=30, seconds=1)
    assert alice.apply_confidence_decay() == 1
    assert alice.get(item.id).confidence == pytest.approx(0.72)


def test_items_younger_than_30_days_do_not_decay(alice: UserMemory, clock: FakeClock) -> None:
    item = alice.remember("Fresh fact")
    clock.advance(days=29)
    assert alice.apply_confidence_decay() == 0
    assert alice.get(item.id).confidence == 0.8


def test_recently_recalled_items_do_not_decay(alice: UserMemory, clock: FakeClock) -> None:
    used = alice.remember("Fact about kayaks")
    unused = alice.remember("Fact about zeppelins")
    clock.advance(days=20)
    alice.search("kayaks")
    clock.advance(days=15)  # used 15 days ago, unused for 35
    assert alice.apply_confidence_decay() == 1
    assert alice.get(used.id).confidence == pytest.approx(0.82)
    assert alice.get(unused.id).confidence == pytest.approx(0.72)


def test_decay_happens_at_most_once_per_30_days(alice: UserMemory, clock: FakeClock) -> None:
    item = alice.remember("Rarely needed fact")
    clock.advance(days=31)
    assert alice.apply_confidence_decay() == 1
    assert alice.apply_confidence_decay() == 0  # same moment
    clock.advance(days=10)
    assert alice.apply_confidence_decay() == 0  # 10 days after the last decay
    assert alice.get(item.id).confidence == pytest.approx(0.72)
    clock.advance(days=21)  # 31 days after the last decay, still unused
    assert alice.apply_confidence_decay() == 1
    assert alice.get(item.id).confidence == pytest.approx(0.648)


def test_decay_skips_superseded_and_other_users(mem: Memory, alice: UserMemory,
                                                bob: UserMemory, clock: FakeClock) -> None:
    old = alice.remember("Lived in Oslo")
    new = alice.remember("Lives in Bergen")
    supersede(mem, "alice", old.id, new.id, clock.iso())
    bobs = bob.remember("Bob's old fact")
    clock.advance(days=31)
    assert alice.apply_confidence_decay() == 1
    assert alice.get(old.id).confidence == 0.8
    assert alice.get(new.id).confidence == pytest.approx(0.72)
    assert bob.get(bobs.id).confidence == 0.8


def test_decay_is_in_the_ledger_and_survives_rebuild(mem: Memory, alice: UserMemory,
                                                     clock: FakeClock) -> None:
    item = alice.remember("Ledgered fact")
    clock.advance(days=31)
    alice.apply_confidence_decay()
    mem.rebuild()
    assert alice.get(item.id).confidence == pytest.approx(0.72)


@pytest.fixture
def aged(alice: UserMemory, clock: FakeClock) -> dict[str, str]:
    """Old turns, tool calls and items (day 0), then fresh ones (day 91)."""
    made = {
        "old_turn": alice.add_turn("user", "ancient chat").id,
        "old_call": alice.log_tool_call("ancient_tool").id,
        "old_weak": alice.update_confidence(alice.remember("Weak old guess").id, 0.05).id,
        "old_strong": alice.remember("Strong old fact").id,
        "old_weak_used": alice.update_confidence(
            alice.remember("Weak but used lately").id, 0.05).id,
    }
    clock.advance(days=91)
    alice.search("lately")  # used: survives
    made["new_turn"] = alice.add_turn("user", "recent chat").id
    made["new_call"] = alice.log_tool_call("recent_tool").id
    made["new_weak"] = alice.update_confidence(alice.remember("Weak new guess").id, 0.05).id
    return made


def test_prune_drops_old_turns_tool_calls_and_weak_unused_items(
        mem: Memory, alice: UserMemory, aged: dict[str, str]) -> None:
    mem.flush()  # the search's recall bookkeeping (prune would apply it first anyway)
    events = event_count(mem)
    assert alice.prune(days=90) == {"turns": 1, "tool_calls": 1, "items": 1}
    assert [t.id for t in alice.recent_conversations()] == [aged["new_turn"]]
    assert [s["name"] for s in alice.tool_stats()] == ["recent_tool"]
    with pytest.raises(NotFound):
        alice.get(aged["old_weak"])
    for kept in ("old_strong", "old_weak_used", "new_weak"):
        alice.get(aged[kept])
    # the ledger keeps the events: one "memory.pruned" was added, nothing removed
    assert event_count(mem) == events + 1
    assert rows(mem, "SELECT count(*) FROM events WHERE subject_id = ?",
                [aged["old_weak"]])[0][0] >= 1


def test_prune_with_nothing_to_do_writes_nothing(mem: Memory, alice: UserMemory,
                                                 aged: dict[str, str]) -> None:
    alice.prune()
    events = event_count(mem)
    assert alice.prune() == {"turns": 0, "tool_calls": 0, "items": 0}
    assert event_count(mem) == events


def test_pruned_rows_stay_pruned_after_rebuild(mem: Memory, alice: UserMemory,
                                               aged: dict[str, str]) -> None:
    alice.prune()
    before = (alice.all_knowledge(limit=None)["items"], alice.recent_conversations(),
              alice.tool_stats())
    mem.rebuild()
    assert (alice.all_knowledge(limit=None)["items"], alice.recent_conversations(),
            alice.tool_stats()) == before


def test_prune_respects_days_and_min_confidence(alice: UserMemory, aged: dict[str, str]) -> None:
    assert alice.prune(days=365) == {"turns": 0, "tool_calls": 0, "items": 0}
    assert alice.prune(days=90, min_confidence=0.9)["items"] == 2  # old_weak + old_strong


@pytest.mark.parametrize("factor", [1.5, -0.5])
def test_decay_never_takes_confidence_outside_0_1(alice: UserMemory, clock: FakeClock,
                                                  factor: float) -> None:
    # Regression (fixed): UserMemory.apply_confidence_decay accepts any `factor` and the
    # projection (store/sql.py, "memory.decayed") multiplies without clamping, so factor=1.5 turns
    # 0.8 into 1.2 and factor=-0.5 into -0.4, breaking the 0–1 invariant every other write enforces.
    # Suggested fix: reject factors outside (0, 1] with InvalidInput (and/or clamp in the projection
    # SQL).
    item = alice.remember("Decays oddly")
    clock.advance(days=31)
    try:
        alice.apply_confidence_decay(factor=factor)
    except InvalidInput:
        return
    assert 0.0 <= alice.get(item.id).confidence <= 1.0
