"""The pipeline's views are derived from the ledger: rebuilt from it, erased with the
user, and its costs accounted for."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ledgermem import InvalidInput, Memory, OpenAICompatibleLLM, UserMemory
from ledgermem.testing import Reply, ScriptedLLMServer
from tests.pipeline.conftest import open_memory
from tests.pipeline.scripts import LONG, add, ops, said
from tests.pipeline.test_maintenance import PAIRS, judge
from tests.support import FakeClock, rows


def test_llm_costs_are_accounted_per_purpose(mem: Memory, alice: UserMemory,
                                             server: ScriptedLLMServer) -> None:
    server.reply(Reply(ops(add("Plays the cello")),
                       usage={"prompt_tokens": 120, "completion_tokens": 30}),
                 500, 500)
    said(alice, "I play the cello in an amateur orchestra " + LONG)
    said(alice, "We rehearse every Thursday evening in the old church " + LONG)
    mem.flush()
    assert alice.stats()["llm_calls"] == {"calls": 2, "tokens_in": 120, "tokens_out": 30,
                                          "errors": 1}
    [usage] = alice.llm_usage()
    assert (usage["purpose"], usage["model"], usage["calls"], usage["errors"]) == (
        "extraction", "scripted-model", 2, 1)
    assert usage["latency_ms"] > 0
    assert mem.for_user("bob").stats()["llm_calls"]["calls"] == 0


def test_rebuild_rederives_queue_states_comparisons_and_costs(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer) -> None:
    server.reply(ops(add("Plays the cello")), 500, 500)
    said(alice, "I play the cello in an amateur orchestra " + LONG)
    said(alice, "We rehearse every Thursday evening in the old church " + LONG)
    said(alice, "ok")
    for context, (older, newer) in PAIRS.items():
        alice.remember(older, "fact", context=context)
        alice.remember(newer, "note", context=context)
    mem.flush()
    server.default = judge
    alice.maintain()
    before = (alice.status(), alice.stats(), mem.store.compared_pairs("alice"),
              alice.llm_usage(), alice.all_knowledge(include_superseded=True, limit=None))
    mem.rebuild()
    after = (alice.status(), alice.stats(), mem.store.compared_pairs("alice"),
             alice.llm_usage(), alice.all_knowledge(include_superseded=True, limit=None))
    assert after == before
    assert before[0]["extraction"] == {"pending": 0, "done": 1, "skipped": 1, "failed": 1}
    assert len(before[2]) == 4


def test_forgetting_a_user_erases_the_pipeline_views_too(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer) -> None:
    server.reply(ops(add("Plays the cello")))
    said(alice, "I play the cello in an amateur orchestra " + LONG)
    for context, (older, newer) in list(PAIRS.items())[:1]:
        alice.remember(older, "fact", context=context)
        alice.remember(newer, "note", context=context)
    mem.flush()
    server.default = judge
    alice.maintain()
    assert rows(mem, "SELECT count(*) FROM llm_calls")[0][0] == 2
    assert rows(mem, "SELECT count(*) FROM comparisons")[0][0] == 1
    alice.forget_user()
    for table in ("llm_calls", "comparisons", "conversations", "events"):
        assert rows(mem, f"SELECT count(*) FROM {table}")[0][0] == 0, table


def test_versions_can_only_move_between_active_and_inactive(alice: UserMemory) -> None:
    item = alice.remember("Prefers aisle seats", category="preference")
    assert alice.restore(item.id) == item  # already active: nothing to undo
    alice.invalidate(item.id)
    with pytest.raises(InvalidInput):
        alice.invalidate(item.id)
    with pytest.raises(InvalidInput):
        alice.revise(item.id, "Prefers window seats")
    assert alice.restore(item.id).active


def test_maintenance_can_run_on_start_up(tmp_path: Path, clock: FakeClock,
                                         server: ScriptedLLMServer,
                                         llm: OpenAICompatibleLLM) -> None:
    path = tmp_path / "startup.db"
    with open_memory(path, clock, None) as offline:
        offline.for_user("alice").add_turns(
            [{"role": "user", "content": f"Planning the Japan trip, part {n}",
              "at": (clock.now - timedelta(days=20)).isoformat()} for n in range(5)],
            session_id="trip")
    server.reply({"items": [{"content": "Is planning a trip to Japan"}]})
    with open_memory(path, clock, llm, maintain_on_start=True) as memory:
        pass  # close() waits for the start-up run
    with open_memory(path, clock, None) as memory:
        alice = memory.for_user("alice")
        assert [i.content for i in alice.all_knowledge()["items"]] == [
            "Is planning a trip to Japan"]
        assert alice.sessions()[0]["unconsolidated"] == 0
