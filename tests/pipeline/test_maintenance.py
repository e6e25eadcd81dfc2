"""Background maintenance: reconciliation outcomes, consolidation, caps, and the CLI."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledgermem import MaintenanceOptions, Memory, UserMemory
from ledgermem.cli import main
from ledgermem.testing import HashEmbedder, ScriptedLLMServer
from tests.pipeline.conftest import open_memory
from tests.pipeline.scripts import LONG, add, kinds, ops
from tests.support import FakeClock

PAIRS = {  # context → (older, newer): similar enough (cosine > 0.85) to be compared
    "reinforce": ("Drinks green tea every morning before work",
                  "Drinks green tea every single morning before work"),
    "contradict": ("Sister Anna lives in Porto near the river",
                   "Sister Anna lives in Porto near the old river"),
    "weaken": ("Commutes to the office by bicycle every day",
               "Commutes to the office by electric bicycle every day"),
    "neutral": ("Plays chess online with friends on Sundays",
                "Plays chess online with old friends on Sundays"),
}


def judge(body: dict[str, Any]) -> dict[str, str]:
    """Answer a reconciliation prompt with the relation its items' context names."""
    prompt = body["messages"][1]["content"]
    relation = re.search(r"context (\w+)", prompt)
    assert relation is not None, prompt
    return {"relation": relation.group(1), "reason": f"scripted {relation.group(1)}"}


@pytest.fixture
def pairs(mem: Memory, alice: UserMemory, clock: FakeClock) -> dict[str, tuple[str, str]]:
    made: dict[str, tuple[str, str]] = {}
    embed = HashEmbedder()
    for context, (older, newer) in PAIRS.items():
        vectors = embed.embed_batch([older, newer])
        assert float(vectors[0] @ vectors[1]) > 0.85
        first = alice.remember(older, "fact", context=context)
        clock.advance(hours=1)
        # another category, so that dedup keeps both
        second = alice.remember(newer, "note", context=context)
        made[context] = (first.id, second.id)
    mem.flush()  # vectors
    return made


def test_reconciliation_applies_all_four_outcomes(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer,
        pairs: dict[str, tuple[str, str]]) -> None:
    server.default = judge
    result = alice.maintain()
    assert result["reconcile"] == {"pairs_checked": 4, "reinforced": 1, "contradicted": 1,
                                   "weakened": 1, "neutral": 1, "failed": 0}
    assert len(server.chat_requests) == 4  # one call per pair, none across contexts
    conf = {ctx: (alice.get(a).confidence, alice.get(b).confidence)
            for ctx, (a, b) in pairs.items()}
    assert conf["reinforce"] == pytest.approx((0.85, 0.85))
    assert conf["contradict"][1] == pytest.approx(0.9)
    assert conf["weaken"] == pytest.approx((0.7, 0.8))
    assert conf["neutral"] == (0.8, 0.8)
    older, newer = pairs["contradict"]
    assert not alice.get(older).active and alice.get(older).valid_to is not None
    assert alice.get(newer).active
    invalidated = alice.history(older)[-1]
    assert (invalidated.kind, invalidated.payload["contradicted_by"],
            invalidated.payload["reason"]) == ("memory.invalidated", newer, "reconcile: contradict")
    compared = mem.store.events("alice", kinds=["memory.compared"])
    assert sorted(e.payload["outcome"] for e in compared) == sorted(PAIRS)
    assert all(e.payload["similarity"] > 0.85 for e in compared)
    assert alice.restore(older).active  # a contradiction is recoverable too
    # every pair is compared once: the next run asks nothing
    again = alice.maintain()
    assert again["reconcile"]["pairs_checked"] == 0
    assert len(server.chat_requests) == 4
    assert alice.stats()["llm_calls"]["calls"] == 4


def test_reconciliation_is_capped_per_run_and_retries_failed_calls(
        tmp_path: Path, clock: FakeClock, server: ScriptedLLMServer, llm: Any) -> None:
    options = MaintenanceOptions(max_pairs=3)
    with open_memory(tmp_path / "cap.db", clock, llm, maintenance=options) as memory:
        alice = memory.for_user("alice")
        for context, (older, newer) in PAIRS.items():
            alice.remember(older, "fact", context=context)
            alice.remember(newer, "note", context=context)
        memory.flush()
        server.reply(500, 500)
        server.default = judge
        first = alice.maintain()["reconcile"]
        assert (first["pairs_checked"], first["failed"]) == (2, 1)
        second = alice.maintain()["reconcile"]
        assert (second["pairs_checked"], second["failed"]) == (2, 0)
        assert alice.maintain()["reconcile"]["pairs_checked"] == 0


def session(user: UserMemory, name: str, count: int, at: str) -> list[str]:
    turns = [{"role": "user" if n % 2 == 0 else "assistant",
              "content": f"{name} message {n} about the trip to Japan in April", "at": at}
             for n in range(count)]
    return [t.id for t in user.add_turns(turns, session_id=name)]


def test_consolidation_distils_old_sessions_and_marks_their_turns(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    long_ago = clock.now - timedelta(days=20)
    old = session(alice, "old", 6, long_ago.isoformat())
    session(alice, "short", 3, long_ago.isoformat())
    session(alice, "recent", 6, (clock.now - timedelta(days=2)).isoformat())
    server.reply({"items": [
        {"content": "Is planning a trip to Japan in April", "entity": "place:japan"},
        {"content": "Prefers window seats on long flights", "category": "preference"},
        {"no": "content"}]})
    result = alice.maintain()
    # the window seats were never mentioned in the session: the guards skip that item
    assert result["consolidate"] == {"consolidated": 1, "extracted_items": 1, "failed": 0}
    [request] = server.chat_requests
    assert "old message 5" in request.text and "recent message" not in request.text
    items = {i.content: i for i in alice.all_knowledge(source="consolidation")["items"]}
    assert set(items) == {"Is planning a trip to Japan in April"}
    [mark] = mem.store.events("alice", kinds=["turn.consolidated"])
    assert (mark.payload["items"], mark.payload["skipped"]) == (1, 2)
    japan = items["Is planning a trip to Japan in April"]
    assert (japan.entity, japan.confidence, japan.metadata["turn_ids"]) == (
        "place:japan", 0.5, old)
    marked = {s["session_id"]: s["unconsolidated"] for s in alice.sessions()}
    assert marked == {"old": 0, "short": 3, "recent": 6}
    assert [t.consolidated_at for t in alice.session_history("old")] == [clock.iso()] * 6
    # turns are marked, not deleted; the next run has nothing to do
    assert alice.maintain()["consolidate"] == {"consolidated": 0, "extracted_items": 0,
                                               "failed": 0}
    assert len(server.chat_requests) == 1


def test_a_failed_consolidation_leaves_the_session_for_the_next_run(
        mem: Memory, alice: UserMemory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    session(alice, "old", 5, (clock.now - timedelta(days=30)).isoformat())
    server.reply("not json", {"items": [{"content": "Is planning a trip to Japan"}]})
    assert alice.maintain()["consolidate"]["failed"] == 1
    assert alice.sessions()[0]["unconsolidated"] == 5
    assert alice.maintain()["consolidate"]["consolidated"] == 1
    assert alice.sessions()[0]["unconsolidated"] == 0


def test_maintain_runs_every_step_in_order_and_over_all_users(
        mem: Memory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    alice, bob = mem.for_user("alice"), mem.for_user("bob")
    stale = alice.remember("An old note nobody reads", "note")
    bob.remember("Bob likes jazz")
    session(bob, "bob-old", 5, (clock.now - timedelta(days=100)).isoformat())
    server.reply({"items": [{"content": "Is planning a trip to Japan"}]})
    clock.advance(days=95)
    result = mem.maintain()
    assert result["users"] == 2
    assert result["decay"] == {"decayed": 2}
    assert result["consolidate"]["consolidated"] == 1
    # prune ran after consolidation: bob's old turns were distilled, then dropped
    assert result["prune"]["turns"] == 5
    assert alice.get(stale.id).confidence == pytest.approx(0.8 * 0.9)
    assert kinds(mem.store.events("bob", kinds=["turn.consolidated", "memory.pruned"])) == [
        "turn.consolidated", "memory.pruned"]


def test_cli_maintain_and_status(tmp_path: Path, server: ScriptedLLMServer) -> None:
    path = tmp_path / "cli.db"
    with Memory.open(path, embedder=None) as offline:
        offline.for_user("local").add_turns([{"role": "user", "content": (
            "I just adopted a greyhound called Pixel from the shelter " + LONG)}], infer=True)
    runner = CliRunner()
    env = {"LEDGERMEM_LLM_BASE_URL": server.url, "LEDGERMEM_LLM_MODEL": "scripted-model"}
    before = runner.invoke(main, ["--db", str(path), "--json", "status"], env={
        "LEDGERMEM_LLM_BASE_URL": "", "LEDGERMEM_LLM_MODEL": ""})
    assert before.exit_code == 0, before.output
    offline_status = json.loads(before.output)
    assert (offline_status["mode"], offline_status["extraction"]["pending"]) == ("embedder", 1)
    assert offline_status["skipped"]["extraction"] == "no LLM configured"
    server.reply(ops(add("Has a greyhound called Pixel", entity="pet:pixel")))
    done = runner.invoke(main, ["--db", str(path), "--json", "maintain"], env=env)
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert set(result) == {"decay", "reconcile", "consolidate", "prune", "skipped"}
    after = runner.invoke(main, ["--db", str(path), "--json", "status"], env=env)
    status = json.loads(after.output)
    assert (status["mode"], status["llm"], status["extraction"]["done"]) == (
        "llm+embedder", "scripted-model", 1)
    assert status["skipped"] == {}
    half = runner.invoke(main, ["--db", str(path), "status"],
                         env={"LEDGERMEM_LLM_BASE_URL": server.url, "LEDGERMEM_LLM_MODEL": ""})
    assert half.exit_code == 1 and "LEDGERMEM_LLM_MODEL" in half.output
