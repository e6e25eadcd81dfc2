"""Extraction against the scripted server: each operation kind, lineage and history,
DELETE then restore, what the model is shown, and the queue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ledgermem import Memory, NotFound, OpenAICompatibleLLM, UserMemory
from ledgermem.testing import Reply, ScriptedLLMServer
from tests.pipeline.scripts import LONG, add, aliases, kinds, ops, said, turns_section
from tests.support import FakeClock, rows

MOVE = ("I moved to Lisbon last month for a new job at a design studio called Atelier Sul, "
        "and I love the city so far")


def test_add_keeps_every_field_and_links_the_turns(mem: Memory, alice: UserMemory,
                                                   server: ScriptedLLMServer,
                                                   clock: FakeClock) -> None:
    server.reply(ops(
        add("Lives in Lisbon", category="fact", entity="place:lisbon", context="personal",
            reason="user said so"),
        add("Dentist appointment on Friday at 10:00", category="reminder",
            due_at="2026-06-05T10:00:00+00:00", entity="person:dr_silva"),
        add("Takes insulin every morning", category="fact", sensitive=True)))
    ids = said(alice, MOVE + ". I see my dentist Dr Silva on Friday at 10:00, and I take "
               "insulin every morning", "Congratulations on the move!")
    mem.flush()
    items = {i.content: i for i in alice.all_knowledge()["items"]}
    assert set(items) == {"Lives in Lisbon", "Dentist appointment on Friday at 10:00",
                          "Takes insulin every morning"}
    home = items["Lives in Lisbon"]
    assert (home.category, home.entity, home.context, home.source, home.confidence) == (
        "fact", "place:lisbon", "personal", "llm_extract", 0.4)
    assert home.metadata["turn_ids"] == ids[:1]  # the user's turn grounds it, not the reply
    assert home.valid_from == clock.iso()
    dentist = items["Dentist appointment on Friday at 10:00"]
    assert (dentist.category, dentist.due_at) == ("reminder", "2026-06-05T10:00:00.000000+00:00")
    assert items["Takes insulin every morning"].sensitive is True
    [added] = [e for e in alice.history(home.id) if e.kind == "memory.added"]
    assert added.payload["reason"] == "user said so"
    assert added.payload["item"]["metadata"]["turn_ids"] == ids[:1]
    assert alice.status()["extraction"] == {"pending": 0, "done": 2, "skipped": 0, "failed": 0}


def test_the_model_sees_the_turns_and_the_default_steering(mem: Memory, alice: UserMemory,
                                                           server: ScriptedLLMServer) -> None:
    server.reply(ops())
    said(alice, MOVE, "I updated your calendar and booked the moving van for you.")
    mem.flush()
    [request] = server.chat_requests
    system, user = request.body["messages"]
    assert "durable facts about the user" in system["content"]
    assert "only describes what the assistant did" in system["content"]
    assert "user: " + MOVE in user["content"]
    assert "assistant: I updated your calendar" in user["content"]
    assert "Memory items:\n(none)" in user["content"]
    assert request.body["response_format"]["json_schema"]["name"] == "ExtractionResult"


def test_extraction_instructions_replace_the_default(tmp_path: Path, clock: FakeClock,
                                                     server: ScriptedLLMServer,
                                                     llm: OpenAICompatibleLLM) -> None:
    from tests.pipeline.conftest import open_memory

    with open_memory(tmp_path / "i.db", clock, llm,
                     extraction_instructions="Keep only food allergies.") as memory:
        server.reply(ops())
        said(memory.for_user("alice"), MOVE)
        memory.flush()
    system = server.chat_requests[0].body["messages"][0]["content"]
    assert "Keep only food allergies." in system
    assert "durable facts about the user" not in system


def test_existing_items_are_shown_under_aliases_and_mapped_back(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer) -> None:
    job = alice.remember("Works at a bakery in Porto", entity="org:bakery")
    alice.remember("Has a cat called Miso", category="fact")
    shown: dict[str, str] = {}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        shown.update(aliases(body["messages"][1]["content"]))
        alias = next(a for a, text in shown.items() if "bakery" in text)
        return ops({"op": "UPDATE", "id": alias, "content": "Works at Atelier Sul in Lisbon",
                    "reason": "new job"})

    server.reply(answer)
    said(alice, MOVE + " so I no longer work at the bakery in Porto")
    mem.flush()
    assert job.id not in str(server.chat_requests[0].body)  # real ids never reach the model
    assert set(shown) <= {str(n) for n in range(1, 11)} and "Works at a bakery in Porto" in (
        shown.values())
    assert alice.get(job.id).superseded_by is not None


def test_update_makes_a_new_version_and_keeps_the_lineage(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    old = alice.remember("Works at a bakery in Porto", entity="org:bakery")
    clock.advance(days=3)
    server.reply(ops({"op": "UPDATE", "id": "1", "content": "Works at Atelier Sul in Lisbon",
                      "entity": "org:atelier_sul", "reason": "changed jobs"}))
    ids = said(alice, MOVE + " and left the bakery")
    mem.flush()
    before = alice.get(old.id)
    [new] = alice.all_knowledge()["items"]
    assert new.id != old.id and new.content == "Works at Atelier Sul in Lisbon"
    assert (before.superseded_by, before.valid_to) == (new.id, clock.iso())
    assert before.content == "Works at a bakery in Porto"  # nothing overwritten
    assert (new.entity, new.source, new.metadata["supersedes"], new.metadata["turn_ids"]) == (
        "org:atelier_sul", "llm_extract", old.id, ids)
    assert new.confidence == old.confidence  # a correction keeps what was trusted
    history = alice.history(new.id)
    assert history == alice.history(old.id)  # one lineage, seen from either end
    assert kinds(history) == ["memory.added", "memory.added", "memory.superseded"]
    assert [e.subject_id for e in history] == [old.id, new.id, old.id]
    superseded = history[-1].payload
    assert (superseded["by"], superseded["reason"], superseded["source"],
            superseded["turn_ids"]) == (new.id, "changed jobs", "llm_extract", ids)
    assert old.id not in [h.id for h in alice.search("bakery", touch=False)]
    assert alice.search("bakery", include_superseded=True, touch=False)[0].id == old.id


def test_delete_invalidates_and_restore_brings_it_back(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    cat = alice.remember("Has a cat called Miso who loves tuna")
    server.reply(ops({"op": "DELETE", "id": "1", "reason": "the cat was rehomed"}))
    ids = said(alice, "Sadly we had to find a new home for Miso the cat, "
               "the tuna-loving one " + LONG)
    mem.flush()
    gone = alice.get(cat.id)  # invalidated, not erased
    assert (gone.valid_to, gone.superseded_by, gone.content) == (
        clock.iso(), None, cat.content)
    assert alice.search("Miso cat", touch=False) == []
    event = alice.history(cat.id)[-1]
    assert (event.kind, event.payload["reason"], event.payload["source"],
            event.payload["turn_ids"]) == ("memory.invalidated", "the cat was rehomed",
                                           "llm_extract", ids)
    clock.advance(hours=1)
    back = alice.restore(cat.id)
    assert back.active and back.content == cat.content
    assert [h.id for h in alice.search("Miso cat", touch=False)] == [cat.id]
    assert kinds(alice.history(cat.id))[-2:] == ["memory.invalidated", "memory.restored"]


def test_restoring_an_old_version_invalidates_its_replacement(
        mem: Memory, alice: UserMemory, clock: FakeClock) -> None:
    first = alice.remember("Favourite colour is green", category="preference")
    second = alice.revise(first.id, "Favourite colour is blue", reason="told us")
    third = alice.revise(second.id, "Favourite colour is teal", reason="told us again")
    clock.advance(minutes=5)
    alice.restore(first.id)
    assert alice.get(first.id).active
    assert not alice.get(third.id).active and alice.get(third.id).valid_to == clock.iso()
    assert alice.get(second.id).superseded_by == third.id  # untouched history
    assert [i.id for i in alice.all_knowledge()["items"]] == [first.id]
    history = alice.history(second.id)
    assert {e.subject_id for e in history} == {first.id, second.id, third.id}
    assert kinds(history)[-2:] == ["memory.restored", "memory.invalidated"]
    assert history[-1].payload["restored"] == first.id


def test_noop_changes_nothing_but_marks_the_turns_done(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer) -> None:
    tea = alice.remember("Prefers green tea", category="preference")
    server.reply(ops({"op": "NOOP", "id": "1"}))
    ids = said(alice, "As you know I still love green tea in the morning " + LONG)
    mem.flush()
    assert alice.get(tea.id) == tea
    [done] = mem.store.events("alice", kinds=["turns.extracted"])
    assert (done.payload["ids"], done.payload["outcome"], done.payload["noop"]) == (
        ids, "done", 1)


def test_short_turns_are_skipped_without_a_call(mem: Memory, alice: UserMemory,
                                                server: ScriptedLLMServer) -> None:
    said(alice, "ok thanks", "You're welcome!")
    mem.flush()
    assert server.requests == []
    assert alice.status()["extraction"]["skipped"] == 2


def test_each_batch_is_extracted_once(mem: Memory, alice: UserMemory,
                                      server: ScriptedLLMServer) -> None:
    server.reply(ops(add("Lives in Lisbon")), ops(add("Plays the cello on weekends")))
    said(alice, MOVE)
    said(alice, "On weekends I play the cello with an amateur orchestra " + LONG)
    mem.flush()
    mem.flush()
    alice.add_turns([{"role": "user", "content": MOVE}])  # infer=False: not queued
    mem.flush()
    assert len(server.chat_requests) == 2
    assert sorted(i.content for i in alice.all_knowledge()["items"]) == [
        "Lives in Lisbon", "Plays the cello on weekends"]
    texts = [turns_section(r.text) for r in server.chat_requests]
    assert "Lisbon" in texts[0] and "cello" not in texts[0] and "cello" in texts[1]


def test_the_reply_never_waits_for_extraction(mem: Memory, alice: UserMemory,
                                              server: ScriptedLLMServer) -> None:
    server.reply(Reply(ops(add("Lives in Lisbon")), delay=0.4))
    started = time.monotonic()
    said(alice, MOVE)
    assert time.monotonic() - started < 0.3
    mem.flush()  # waits for the background worker's call
    assert [i.content for i in alice.all_knowledge()["items"]] == ["Lives in Lisbon"]


def test_a_turn_is_found_by_the_facts_drawn_from_it(mem: Memory, alice: UserMemory,
                                                    server: ScriptedLLMServer) -> None:
    server.reply(ops(add("Has a physiotherapy appointment for a knee injury",
                         category="reminder")))
    [turn_id] = said(alice, "Tomorrow I am seeing Dr. Patel about the knee I hurt while "
                            "running, the appointment is at nine in the morning")
    alice.add_turns([{"role": "user", "content": "The weather is lovely today"}])
    mem.flush()
    hits = alice.search_conversations("physiotherapy")
    assert hits[0].id == turn_id and hits[0].why["items_rank"] == 1
    assert "keyword_rank" not in hits[0].why  # the turn never says "physiotherapy"
    assert all("items_rank" not in h.why for h in hits[1:])


def test_as_of_answers_what_was_known_and_true_then(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    old = alice.remember("Works at a bakery in Porto")
    t1 = clock.iso()
    clock.advance(days=10)
    server.reply(ops({"op": "UPDATE", "id": "1", "content": "Works at a design studio "
                      "in Lisbon", "reason": "moved for a new job"}))
    said(alice, MOVE)
    mem.flush()
    [new] = alice.all_knowledge()["items"]
    clock.advance(days=1)
    assert [h.id for h in alice.search("works", as_of=t1)] == [old.id]
    assert [h.id for h in alice.search("works", as_of=clock.iso())] == [new.id]
    assert [h.id for h in alice.search("works", as_of=t1, include_superseded=True)] == [
        old.id]
    assert alice.search("works", as_of="2020-01-01") == []
    assert alice.get(old.id, as_of=t1).active
    assert alice.get(old.id, as_of=clock.iso()).superseded_by == new.id
    with pytest.raises(NotFound):
        alice.get(new.id, as_of=t1)
    # as_of reads the ledger, not the current view: a later edit does not leak back
    then = clock.iso()
    clock.advance(days=1)
    alice.update(new.id, content="Works at Atelier Sul in Lisbon")
    assert alice.get(new.id, as_of=then).content == "Works at a design studio in Lisbon"
    assert alice.get(new.id, as_of=clock.iso()).content == "Works at Atelier Sul in Lisbon"
    # and a forgotten item never comes back, whatever the moment
    alice.forget(old.id)
    with pytest.raises(NotFound):
        alice.get(old.id, as_of=t1)
    assert alice.search("bakery", as_of=t1) == []


def test_history_says_who_and_why_for_user_changes(alice: UserMemory, clock: FakeClock) -> None:
    item = alice.remember("Prefers aisle seats", category="preference",
                          reason="said during booking")
    clock.advance(days=1)
    alice.invalidate(item.id, reason="now prefers window seats")
    events = alice.history(item.id)
    assert [(e.kind, e.payload.get("reason")) for e in events] == [
        ("memory.added", "said during booking"), ("memory.invalidated", "now prefers window seats")]
    assert alice.get(item.id).valid_to == clock.iso()


def test_turns_queued_without_an_llm_are_extracted_once_one_is_configured(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer,
        llm: OpenAICompatibleLLM) -> None:
    from tests.pipeline.conftest import open_memory

    path = tmp_path / "later.db"
    with open_memory(path, clock, None) as offline:
        said(offline.for_user("alice"), MOVE)
        assert offline.for_user("alice").status()["extraction"]["pending"] == 1
    server.reply(ops(add("Lives in Lisbon")))
    with open_memory(path, clock, llm) as online:  # the worker starts on the backlog
        online.flush()
        assert [i.content for i in online.for_user("alice").all_knowledge()["items"]] == [
            "Lives in Lisbon"]
    assert rows(path, "SELECT extraction, count(*) FROM conversations GROUP BY 1") == [
        ("done", 1)]


def test_as_of_treats_a_bare_supersession_as_no_longer_true(
        mem: Memory, alice: UserMemory, clock: FakeClock) -> None:
    from tests.support import supersede

    old = alice.remember("Drives a red Fiat")
    new = alice.remember("Drives a blue Volvo", "note")
    clock.advance(days=1)
    supersede(mem, "alice", old.id, new.id, clock.iso())  # superseded_by only, no valid_to
    clock.advance(days=1)
    assert [h.id for h in alice.search("drives", as_of=clock.iso())] == [new.id]
