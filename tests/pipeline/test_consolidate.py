"""Consolidation beside extraction: turns extraction learnt are never distilled again,
turns it still owns are left to it, and only the rest is shown to the model."""

from __future__ import annotations

from typing import Any

from ledgermem import Memory, UserMemory
from ledgermem.testing import ScriptedLLMServer
from tests.pipeline.scripts import LONG, add, aliases, ops, said
from tests.support import FakeClock

PORTO = {"items": [{"content": "Lives in Porto"}]}
"""A consolidation answer that restates what the user has since corrected."""


def move_to_lisbon(body: dict[str, Any]) -> dict[str, Any]:
    """An extraction answer that updates the item "Lives in Porto", by its alias."""
    shown = aliases(body["messages"][-1]["content"])
    [porto] = [alias for alias, content in shown.items() if content == "Lives in Porto"]
    return ops({"op": "UPDATE", "id": porto, "content": "Lives in Lisbon",
                "reason": "moved to Lisbon"})


def open_turns(user: UserMemory, session_id: str) -> int:
    return int({s["session_id"]: s["unconsolidated"] for s in user.sessions()}[session_id])


def test_a_session_extraction_learnt_is_not_distilled_again(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    server.reply(ops(add("Lives in Porto", reason="said")))
    alice.add_turns([{"role": "user", "content": f"I live in Porto {LONG}"},
                     {"role": "assistant", "content": "Noted."},
                     {"role": "user", "content": "Thanks, that is all for now"},
                     {"role": "assistant", "content": "Bye"},
                     {"role": "user", "content": "bye"}], session_id="s1", infer=True)
    mem.flush()
    clock.advance(days=20)
    server.reply(move_to_lisbon)
    said(alice, f"I moved to Lisbon, I no longer live in Porto {LONG}", session_id="s2")
    mem.flush()
    asked = len(server.chat_requests)
    server.default = PORTO  # what the model would say, were it asked
    result = alice.maintain()
    assert len(server.chat_requests) == asked  # the old session cost no call
    assert [i.content for i in alice.all_knowledge()["items"]] == ["Lives in Lisbon"]
    # its turns are marked, saying why, so no later run looks at them again
    assert result["consolidate"] == {"consolidated": 1, "extracted_items": 0, "failed": 0}
    [mark] = mem.store.events("alice", kinds=["turn.consolidated"])
    assert (mark.payload["distilled"], mark.payload["reason"]) == (
        False, "already learnt by extraction")
    assert open_turns(alice, "s1") == 0
    assert alice.maintain()["consolidate"]["consolidated"] == 0


def test_only_turns_extraction_has_not_learnt_are_shown_and_failed_ones_wait(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    server.reply(ops(add("Lives in Porto", reason="said")))
    said(alice, f"I live in Porto {LONG}", "Noted.", session_id="s")
    mem.flush()
    server.reply("not json")  # extraction of the next batch fails
    said(alice, f"My sister Ana is a nurse in Braga {LONG}", session_id="s")
    mem.flush()
    alice.add_turns([{"role": "user", "content": "I play the cello on Sundays"},
                     {"role": "assistant", "content": "Lovely"}], session_id="s")
    clock.advance(days=20)
    server.reply({"items": [{"content": "Plays the cello on Sundays"}]})
    assert alice.maintain()["consolidate"] == {"consolidated": 1, "extracted_items": 1,
                                               "failed": 0}
    [request] = server.chat_requests[2:]
    assert "cello" in request.text
    assert "Porto" not in request.text.split("Conversation:")[-1]  # learnt: not shown
    assert "Ana" not in request.text  # failed: extraction's, until requeued
    assert open_turns(alice, "s") == 1
    # requeued and extracted, it is marked by the next run, without a call
    server.reply(ops(add("Sister Ana is a nurse in Braga", reason="said")))
    assert alice.requeue_extraction() == 1
    mem.flush()
    asked = len(server.chat_requests)
    assert alice.maintain()["consolidate"]["consolidated"] == 1
    assert len(server.chat_requests) == asked and open_turns(alice, "s") == 0
    assert sorted(i.content for i in alice.all_knowledge()["items"]) == [
        "Lives in Porto", "Plays the cello on Sundays", "Sister Ana is a nurse in Braga"]


def old_session(user: UserMemory, session_id: str, *said_by_user: str) -> list[str]:
    """A session of five turns never queued for extraction (``infer`` off): the user's
    lines, each answered, then a goodbye; returns the turn ids."""
    turns: list[dict[str, str]] = []
    for text in said_by_user:
        turns += [{"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}]
    turns += [{"role": "user", "content": "bye"}] * (5 - len(turns))
    return [t.id for t in user.add_turns(turns, session_id=session_id)]


def test_what_memory_holds_as_no_longer_true_is_not_learnt_again_from_older_turns(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    """Turns never queued for extraction are distilled; a fact they restate that memory
    has since superseded or invalidated is skipped, with the reason in the mark. A
    similar but different fact is stored."""
    old_session(alice, "old", "I live in Porto and I work in Porto too",
                "I play the cello on Sundays")
    clock.advance(days=1)
    porto = alice.remember("Lives in Porto")
    cello = alice.remember("Plays the cello on Sundays")
    clock.advance(days=1)
    alice.revise(porto.id, "Lives in Lisbon", reason="moved to Lisbon")
    alice.invalidate(cello.id, reason="sold the cello")
    clock.advance(days=20)
    server.reply({"items": [{"content": "Lives in Porto"},
                            {"content": "Plays the cello on Sundays", "category": "preference"},
                            {"content": "Works in Porto"}]})
    result = alice.maintain()
    assert result["consolidate"] == {"consolidated": 1, "extracted_items": 1, "failed": 0}
    assert sorted(i.content for i in alice.all_knowledge()["items"]) == [
        "Lives in Lisbon", "Works in Porto"]
    [mark] = mem.store.events("alice", kinds=["turn.consolidated"])
    assert (mark.payload["items"], mark.payload["skipped"]) == (1, 2)
    first, second = mark.payload["problems"]
    assert "'Lives in Porto'" in first and "no longer true" in first
    assert "'Plays the cello on Sundays'" in second and "no longer true" in second
    assert open_turns(alice, "old") == 0


def test_a_fact_said_again_after_its_version_ended_is_learnt(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    """Only turns older than the end of the version they restate are stale: a user who
    says it again later may mean it again."""
    porto = alice.remember("Lives in Porto")
    clock.advance(days=1)
    alice.revise(porto.id, "Lives in Lisbon", reason="moved to Lisbon")
    clock.advance(days=1)
    old_session(alice, "later", "I moved back home and I live in Porto again")
    clock.advance(days=20)
    server.reply({"items": [{"content": "Lives in Porto"}]})
    assert alice.maintain()["consolidate"]["extracted_items"] == 1
    assert sorted(i.content for i in alice.all_knowledge()["items"]) == [
        "Lives in Lisbon", "Lives in Porto"]
    [mark] = mem.store.events("alice", kinds=["turn.consolidated"])
    assert (mark.payload["items"], mark.payload["skipped"]) == (1, 0)


def test_the_reason_a_sensitive_fact_was_skipped_quotes_none_of_it(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    old_session(alice, "old", "I take insulin every morning")
    clock.advance(days=1)
    insulin = alice.remember("Takes insulin every morning", sensitive=True)
    alice.invalidate(insulin.id, reason="stopped")
    clock.advance(days=20)
    server.reply({"items": [{"content": "Takes insulin every morning", "sensitive": True}]})
    assert alice.maintain()["consolidate"]["extracted_items"] == 0
    [mark] = mem.store.events("alice", kinds=["turn.consolidated"])
    [problem] = mark.payload["problems"]
    assert "no longer true" in problem and "insulin" not in problem
