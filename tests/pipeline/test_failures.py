"""A misbehaving model never breaks the conversation: each failure is logged and
skipped, the rest applied."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ledgermem import Memory, OpenAICompatibleLLM, UserMemory
from ledgermem.testing import ScriptedLLMServer
from tests.pipeline.scripts import LONG, add, ops, said
from tests.support import FakeClock

TOPICS = ("painting watercolours", "learning Portuguese", "training for a marathon",
          "restoring an old bicycle")


def topic_turn(topic: str) -> str:
    return f"These days I spend most evenings {topic} " + LONG


def extracted(mem: Memory) -> list[dict[str, Any]]:
    return [e.payload for e in mem.store.events("alice", kinds=["turns.extracted"])]


@pytest.mark.parametrize(("bad", "tries", "problem"), [
    ("{\"operations\": [", 1, "no valid ExtractionResult"),  # malformed JSON
    ({"memories": ["Paints watercolours"]}, 1, "no valid ExtractionResult"),  # wrong shape
    (2.0, 2, "Timeout"),  # HTTP failures are retried once by the client
    (500, 2, "HTTP 500"),
])
def test_a_failed_call_is_logged_and_skipped_and_the_next_turns_applied(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer,
        caplog: pytest.LogCaptureFixture, bad: object, tries: int, problem: str) -> None:
    server.reply(*[bad] * tries, ops(add("Is learning Portuguese")))
    first = said(alice, topic_turn(TOPICS[0]))
    second = said(alice, topic_turn(TOPICS[1]))
    with caplog.at_level(logging.WARNING, logger="ledgermem.extraction"):
        mem.flush()
    assert [i.content for i in alice.all_knowledge()["items"]] == ["Is learning Portuguese"]
    failed, done = extracted(mem)
    assert (failed["ids"], failed["outcome"]) == (first, "failed")
    assert problem in failed["error"]
    assert (done["ids"], done["outcome"]) == (second, "done")
    assert any(problem in r.getMessage() for r in caplog.records
               if r.name == "ledgermem.extraction")
    assert alice.status()["extraction"] == {"pending": 0, "done": 1, "skipped": 0, "failed": 1}
    # the failed call was paid for, and counted
    assert alice.stats()["llm_calls"]["errors"] == 1
    assert len(server.chat_requests) == tries + 1


def test_failed_turns_can_be_queued_again(mem: Memory, alice: UserMemory,
                                          server: ScriptedLLMServer) -> None:
    server.reply(500, 500, 500, 500)
    said(alice, topic_turn(TOPICS[0]))
    said(alice, topic_turn(TOPICS[1]))
    mem.flush()
    assert alice.status()["extraction"]["failed"] == 2
    server.reply(ops(add("Paints watercolours")), ops(add("Is learning Portuguese")))
    assert alice.requeue_extraction() == 2
    mem.flush()
    assert alice.status()["extraction"] == {"pending": 0, "done": 2, "skipped": 0, "failed": 0}
    assert len(alice.all_knowledge()["items"]) == 2
    assert alice.requeue_extraction() == 0


def test_bad_operations_are_skipped_and_the_rest_applied(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer,
        caplog: pytest.LogCaptureFixture) -> None:
    bike = alice.remember("Restores an old bicycle", entity="thing:bicycle")
    marathon = alice.remember("Is training for a marathon in the spring")
    real_id = bike.id
    server.reply(ops(
        {"op": "DELETE", "id": "1", "reason": "finished"},
        {"op": "DELETE", "id": "2", "reason": "one delete too many"},
        {"op": "UPDATE", "id": "7", "content": "Invented alias"},
        {"op": "UPDATE", "id": real_id, "content": "A real id the model should not know"},
        {"op": "UPDATE", "id": "1", "content": "Second operation on the same item"},
        {"op": "ADD"},
        {"op": "MERGE", "id": "1"},
        add("Paints watercolours", category="hobby", entity="not an entity"),
    ))
    with caplog.at_level(logging.WARNING, logger="ledgermem.extraction"):
        said(alice, "I finished restoring the bicycle and I am still training for the "
                    "marathon, and I started painting watercolours " + LONG)
        mem.flush()
    shown: dict[str, str | None] = {"1": None, "2": None}
    prompt = server.chat_requests[0].body["messages"][1]["content"]
    for alias, item in (("1", bike), ("2", marathon)):
        if f"[{alias}]" in prompt and item.content in prompt.split(f"[{alias}]", 1)[1][:200]:
            shown[alias] = item.id
    deleted = [i for i in (bike, marathon) if not alice.get(i.id).active]
    assert len(deleted) == 1 and deleted[0].id == shown["1"]  # only the first DELETE
    assert alice.get(shown["2"] or "").active
    painting = next(i for i in alice.all_knowledge()["items"] if "watercolour" in i.content)
    assert (painting.category, painting.entity) == ("fact", None)  # salvaged, not dropped
    [done] = extracted(mem)
    assert (done["added"], done["deleted"], done["updated"], done["rejected"]) == (1, 1, 0, 6)
    problems = "\n".join(done["problems"])
    for expected in ("more than 1 DELETE", "'7' was not among the items shown",
                     f"{real_id!r} was not among the items shown", "second operation",
                     "no content", "unreadable operation"):
        assert expected in problems
    warnings = [r.getMessage() for r in caplog.records if r.name == "ledgermem.extraction"]
    assert len(warnings) == 6


def test_the_delete_limit_is_configurable(tmp_path: Path, clock: FakeClock,
                                          server: ScriptedLLMServer,
                                          llm: OpenAICompatibleLLM) -> None:
    from ledgermem import ExtractionOptions
    from tests.pipeline.conftest import open_memory

    with open_memory(tmp_path / "d.db", clock, llm,
                     extraction=ExtractionOptions(max_deletes_per_turn=2)) as memory:
        alice = memory.for_user("alice")
        alice.remember("Restores an old bicycle")
        alice.remember("Is training for a marathon in the spring")
        server.reply(ops({"op": "DELETE", "id": "1"}, {"op": "DELETE", "id": "2"}))
        said(alice, "I finished restoring the bicycle and gave up on the marathon " + LONG)
        memory.flush()
        assert alice.all_knowledge()["items"] == []
