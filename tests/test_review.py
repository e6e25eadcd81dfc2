"""The review queue: nothing proposed is stored, searched or shown in a prompt until a
person approves it; every decision is a ledger event; a rejection leaves no item and
no text. On SQLite and PostgreSQL (the ``alice`` / ``mem`` fixtures run on both), and
through the CLI (``ledgermem review``)."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result

from ledgermem import (
    AsyncMemory,
    Finding,
    InvalidInput,
    Memory,
    NotFound,
    Proposal,
    UserMemory,
)
from ledgermem.agent import profile, system_prefix
from ledgermem.cli import main
from tests.support import FakeClock, rows, snapshot, user_rows

SECRET = "quixotrellis"
"""A word that appears only in proposals: where it shows up, their text leaked."""


def leaked(mem: Memory, word: str = SECRET) -> list[tuple[Any, ...]]:
    """Ledger events and view rows whose text holds ``word`` (raw SQL, under the API)."""
    found = rows(mem, "SELECT kind FROM events WHERE payload LIKE ?", [f"%{word}%"])
    found += rows(mem, "SELECT id FROM knowledge WHERE content LIKE ?", [f"%{word}%"])
    return found


def findings() -> list[Finding]:
    return [
        Finding(f"Writes code in Python ({SECRET} project)", category="skill",
                entity="language:python", why=f"~/code/{SECRET}",
                key="files:language:python"),
        Finding(f"Often visits {SECRET}.example", entity=f"site:{SECRET}.example",
                sensitive=True, why="browser history", key=f"history:site:{SECRET}"),
    ]


def kinds(mem: Memory, user: str = "alice") -> list[str]:
    return [r[0] for r in rows(mem, "SELECT kind FROM events WHERE user_id = ? ORDER BY seq",
                               [user])]


# nothing proposed is stored ------------------------------------------------------------
def test_a_proposal_is_no_item_until_a_person_approves_it(mem: Memory,
                                                           alice: UserMemory) -> None:
    alice.remember("Prefers green tea", "preference")
    python, site = alice.propose(findings(), proposer="bootstrap")

    assert [p.status for p in (python, site)] == ["pending", "pending"]
    assert alice.proposals() == [python, site]
    assert alice.search(SECRET) == [] and alice.search("Python") == []
    assert alice.search_all(SECRET) == []
    assert [i.content for i in alice.all_knowledge()["items"]] == ["Prefers green tea"]
    assert alice.by_category("skill") == [] and alice.entities() == []
    assert SECRET not in system_prefix(alice) and "Python" not in system_prefix(alice)
    assert all(SECRET not in bullet for bullet in profile(alice).bullets)
    assert rows(mem, "SELECT count(*) FROM knowledge")[0][0] == 1
    assert kinds(mem)[-1] == "proposal.made"

    approved = alice.approve([python.id])

    assert [p.status for p in approved] == ["approved"]
    item = alice.get(approved[0].item_id or "")
    assert (item.content, item.category, item.source, item.confidence, item.entity) == (
        python.content, "skill", "discovery", 0.4, "language:python")
    assert item.metadata == {"proposal_id": python.id, "proposer": "bootstrap"}
    assert python.id in (alice.history(item.id)[0].payload.get("reason") or "")
    assert [h.id for h in alice.search("Python")] == [item.id]
    assert "Writes code in Python" in system_prefix(alice)
    assert alice.proposals() == [site]  # still pending, still nowhere else
    assert "Often visits" not in system_prefix(alice) and alice.search("visits") == []


def test_every_decision_is_a_ledger_event(mem: Memory, alice: UserMemory) -> None:
    first, second = alice.propose(findings(), proposer="bootstrap")
    third = alice.propose([{"content": "Keeps a sourdough starter called Bob"}],
                          proposer="reflection")[0]
    alice.approve(first.id)
    alice.reject([second.id])
    alice.edit_and_approve(third.id, content="Keeps a sourdough starter named Bob",
                           category="note")

    decided = [json.loads(r[0]) for r in rows(
        mem, "SELECT payload FROM events WHERE kind = 'proposal.decided' ORDER BY seq")]
    assert [d["decision"] for d in decided] == ["approved", "rejected", "edited"]
    assert decided[2]["changes"] == {"content": "Keeps a sourdough starter named Bob",
                                     "category": "note"}
    assert kinds(mem) == ["proposal.made"] * 3 + [
        "memory.added", "proposal.decided", "proposal.decided", "memory.added",
        "proposal.decided"]
    assert {p.id: p.status for p in alice.proposals("all")} == {
        first.id: "approved", second.id: "rejected", third.id: "edited"}
    assert [p.id for p in alice.proposals("decided")] == [first.id, second.id, third.id]
    edited = alice.proposal(third.id)
    assert edited.content == "Keeps a sourdough starter called Bob"  # as proposed
    assert alice.get(edited.item_id or "").content == "Keeps a sourdough starter named Bob"
    assert alice.get(edited.item_id or "").category == "note"


def test_a_rejection_leaves_no_item_and_no_text(mem: Memory, alice: UserMemory) -> None:
    proposed = alice.propose(findings(), proposer="bootstrap")
    assert leaked(mem)

    rejected = alice.reject("all")

    assert [p.status for p in rejected] == ["rejected", "rejected"]
    assert leaked(mem) == []
    assert rows(mem, "SELECT count(*) FROM knowledge")[0][0] == 0
    assert all(p.content == "[forgotten]" and p.why == "" and p.key is None
               for p in alice.proposals("rejected"))
    assert [p.id for p in alice.proposals("rejected")] == [p.id for p in proposed]
    assert alice.proposals() == []
    again = alice.propose(findings()[:1])  # nothing left to match: it can come back
    assert again[0].id not in {p.id for p in proposed} and again[0].status == "pending"


def test_sensitive_findings_stay_sensitive(alice: UserMemory) -> None:
    site = alice.propose(findings()[1:])[0]
    with pytest.raises(InvalidInput, match="stays"):
        alice.edit_and_approve(site.id, sensitive=False)
    item = alice.get(alice.edit_and_approve(site.id, content=f"Reads {SECRET}.example "
                                                               "daily").item_id or "")
    assert item.sensitive and item.content == f"Reads {SECRET}.example daily"
    assert SECRET not in system_prefix(alice)
    assert alice.search(SECRET, sensitive=False) == []


# bad input changes nothing ------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    {"content": ""}, {"content": "x", "category": "gossip"},
    {"content": "x", "confidence": 2}, {"content": "x", "entity": "no-colon"},
    {"content": "x", "sensitive": "yes"}, {"content": "x", "source": "rumour"},
    {"content": "x", "colour": "red"}, {"content": "x", "why": "y" * 3000},
    {"content": "x\x00y"}, "just text",
])
def test_a_bad_finding_stores_nothing(mem: Memory, alice: UserMemory, bad: Any) -> None:
    before = snapshot(mem)
    with pytest.raises(InvalidInput):
        alice.propose([{"content": "A good one"}, bad])
    assert snapshot(mem) == before


def test_deciding_twice_or_an_unknown_id_is_a_typed_error(mem: Memory,
                                                         alice: UserMemory) -> None:
    first, second = alice.propose(findings())
    alice.approve(first.id)
    before = snapshot(mem)
    with pytest.raises(InvalidInput, match="already approved"):
        alice.approve([second.id, first.id])  # all or nothing: the second stays pending
    with pytest.raises(InvalidInput, match="already approved"):
        alice.reject(first.id)
    with pytest.raises(NotFound):
        alice.approve("01a20000-0000-7000-8000-000000000000")
    with pytest.raises(NotFound):
        alice.proposal("nope")
    for call in (lambda: alice.approve([]), lambda: alice.reject(42),  # type: ignore[arg-type]
                 lambda: alice.approve(second.id, edits={first.id: {"content": "x"}}),
                 lambda: alice.approve(second.id, edits={second.id: {"due_at": "now"}}),
                 lambda: alice.edit_and_approve(second.id),
                 lambda: alice.proposals("maybe"),  # type: ignore[arg-type]
                 lambda: alice.propose("not a list")):  # type: ignore[arg-type]  # on purpose
        with pytest.raises(InvalidInput):
            call()
    assert snapshot(mem) == before
    assert alice.proposal(second.id).status == "pending"


def test_two_reviewers_approving_at_once_make_one_item(db_url: str) -> None:
    """The queue is read inside the transaction that decides: one approval wins."""
    memories = [Memory.open(db_url, embedder=None) for _ in range(2)]
    try:
        pid = memories[0].for_user("alice").propose(findings()[:1])[0].id
        outcomes: list[str] = []
        barrier = threading.Barrier(2)

        def decide(memory: Memory) -> None:
            barrier.wait()
            try:
                memory.for_user("alice").approve(pid)
                outcomes.append("approved")
            except InvalidInput:
                outcomes.append("refused")

        threads = [threading.Thread(target=decide, args=(m,)) for m in memories]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["approved", "refused"]
        assert memories[0].for_user("alice").all_knowledge()["total"] == 1
    finally:
        for memory in memories:
            memory.close()


# the queue, one user at a time ---------------------------------------------------------
def test_proposing_the_same_finding_again_adds_nothing(mem: Memory, alice: UserMemory
                                                       ) -> None:
    first = alice.propose(findings())
    count = len(kinds(mem))
    assert alice.propose(findings()) == first
    assert alice.propose([{"content": first[0].content, "key": first[0].key}])[0] == first[0]
    assert len(kinds(mem)) == count
    alice.approve(first[0].id)
    assert alice.propose(findings()[:1])[0].status == "approved"  # not proposed twice
    assert len(alice.proposals("all")) == 2


def test_users_never_see_each_others_proposals(alice: UserMemory, bob: UserMemory) -> None:
    mine = alice.propose(findings())
    assert bob.proposals("all") == []
    with pytest.raises(NotFound):
        bob.approve(mine[0].id)
    with pytest.raises(NotFound):
        bob.proposal(mine[0].id)
    assert alice.proposals() == mine


def test_listing_filters_and_pages(alice: UserMemory) -> None:
    made = alice.propose([Finding(f"Fact {n}", source="llm_extract" if n % 2 else
                                  "discovery") for n in range(6)])
    assert alice.proposals(source="discovery") == made[0::2]
    assert alice.proposals(limit=2, offset=1) == made[1:3]
    alice.reject(made[0].id)
    assert alice.proposals("rejected") == [alice.proposal(made[0].id)]
    assert len(alice.proposals("all")) == 6 and len(alice.proposals()) == 5
    assert json.dumps(dataclasses.asdict(made[1]))  # JSON-friendly as it is


def test_the_views_and_agents_never_see_proposals(alice: UserMemory) -> None:
    alice.record("world.observed", {"text": "The bakery opened"})
    alice.propose(findings())
    assert [e.kind for e in alice.episodic("baker")] == ["world.observed"]
    assert alice.ledger_events() == alice.ledger_events(kinds=["world.observed"])
    with pytest.raises(InvalidInput, match="ledgermem writes itself"):
        alice.record("proposal.made", {"content": "Injected"})


# forgetting takes proposals along -------------------------------------------------------
def test_forgetting_an_approved_item_blanks_its_proposal(mem: Memory, alice: UserMemory
                                                          ) -> None:
    proposal = alice.propose(findings()[:1])[0]
    item_id = alice.approve(proposal.id)[0].item_id or ""
    alice.forget(item_id)
    assert leaked(mem) == []
    assert alice.proposal(proposal.id).content == "[forgotten]"


def test_forget_all_and_forget_user_take_proposals_along(mem: Memory, alice: UserMemory,
                                                          bob: UserMemory) -> None:
    alice.approve(alice.propose(findings()[:1])[0].id)
    pending = alice.propose(findings()[1:])[0]
    bob.propose([Finding(f"Bob's {SECRET}")])

    assert alice.forget_all() == 1
    assert alice.proposal(pending.id).status == "rejected"
    assert leaked(mem) == [("proposal.made",)]  # bob's proposal only

    assert bob.forget_user() > 0
    assert user_rows(mem, "bob")["events"] == []
    assert leaked(mem) == [] and bob.proposals("all") == []


def test_reset_discovery_forgets_discovery_items_and_pending_proposals(
        mem: Memory, alice: UserMemory) -> None:
    kept = alice.remember("Prefers green tea", "preference")
    stored, pending = alice.propose(findings(), proposer="bootstrap")
    other = alice.propose([Finding(f"Learnt {SECRET} from a chat", source="llm_extract")],
                          proposer="reflection")[0]
    alice.approve(stored.id)

    assert alice.reset_discovery() == {"items": 1, "proposals": 1}

    assert [i.id for i in alice.all_knowledge()["items"]] == [kept.id]
    assert alice.proposal(pending.id).status == "rejected"
    assert alice.proposal(other.id).status == "pending"
    assert [r[0] for r in leaked(mem)] == ["proposal.made"]  # the reflection's, pending
    assert alice.reset_discovery() == {"items": 0, "proposals": 0}


# the ledger stays whole -------------------------------------------------------------------
def test_verify_rebuild_and_as_of_hold_with_proposals(mem: Memory, alice: UserMemory,
                                                      clock: FakeClock) -> None:
    before = alice.all_knowledge()["items"]
    first, second = alice.propose(findings())
    moment = alice.proposal(first.id).proposed_at
    clock.advance(hours=1)
    item_id = alice.approve(first.id)[0].item_id or ""
    alice.reject(second.id)
    alice.propose([Finding("Still waiting")])

    report = mem.verify()
    assert report["problems"] == [] and report["items"] == 1
    mem.rebuild()
    assert [i.id for i in alice.all_knowledge()["items"]] == [item_id]
    assert before == []
    with pytest.raises(NotFound):
        alice.get(item_id, as_of=moment)  # proposed then, not yet an item
    assert alice.get(item_id, as_of=alice.get(item_id).created_at).id == item_id
    assert [p.status for p in alice.proposals("all")] == ["approved", "rejected", "pending"]


def test_the_queue_moves_with_the_ledger(alice: UserMemory, mem: Memory,
                                         make_db_url: Any) -> None:
    """``migrate`` (and export / import) replays the ledger: the queue comes along."""
    from ledgermem.transfer import migrate

    first, second = alice.propose(findings())
    alice.approve(first.id)
    with Memory.open(make_db_url(), embedder=None) as copy:
        migrate(mem.store, copy.store)
        moved = copy.for_user("alice")
        assert moved.proposals("all") == alice.proposals("all")
        moved.reject(second.id)
        assert leaked(copy, "Often visits") == [] and moved.all_knowledge()["total"] == 1


def test_the_async_twins_work(tmp_path: Path) -> None:
    async def main() -> list[str]:
        async with AsyncMemory.open(tmp_path / "a.db", embedder=None) as amem:
            alice = amem.for_user("alice")
            made = await alice.propose(findings())
            await alice.approve(made[0].id)
            await alice.reject(made[1].id)
            return [p.status for p in await alice.proposals("all")]

    assert anyio.run(main) == ["approved", "rejected"]


# the CLI ----------------------------------------------------------------------------------
def cli(db: str, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, ["--db", db, "--user", "ann", "--embedder", "none",
                                       *args])
    assert result.exit_code == code, result.output
    return result


def cli_json(db: str, *args: str) -> Any:
    return json.loads(cli(db, "--json", *args).stdout)


@pytest.fixture
def queued(tmp_path: Path) -> tuple[str, list[Proposal]]:
    db = str(tmp_path / "cli.db")
    with Memory.open(db, embedder=None) as memory:
        made = memory.for_user("ann").propose(
            [*findings(), Finding("Plays the cello"), Finding("Has a cat named Miso")],
            proposer="bootstrap")
    return db, made


def test_review_lists_approves_edits_and_rejects(queued: tuple[str, list[Proposal]]
                                                 ) -> None:
    db, made = queued
    assert [p["id"] for p in cli_json(db, "review")] == [p.id for p in made]
    assert "cello" in cli(db, "review", "list").stdout  # the table (folded at 80 columns)
    approved = cli_json(db, "review", "approve", made[0].id)
    assert approved[0]["status"] == "approved" and approved[0]["item_id"]
    edited = cli_json(db, "review", "edit", made[2].id, "--content", "Plays the viola",
                      "--category", "skill")
    assert edited["status"] == "edited" and edited["changes"]["content"] == "Plays the viola"
    assert [p["status"] for p in cli_json(db, "review", "reject", "all")] == [
        "rejected", "rejected"]
    assert cli_json(db, "review") == []
    assert {p["status"] for p in cli_json(db, "review", "list", "--status", "all")} == {
        "approved", "edited", "rejected"}
    assert sorted(i["content"] for i in cli_json(db, "list")["items"]) == sorted([
        made[0].content, "Plays the viola"])
    assert not rows(db, "SELECT seq FROM events WHERE payload LIKE ?", ["%cat named%"])


@pytest.mark.parametrize(("args", "code"), [
    (["review", "approve"], 2),
    (["review", "approve", "all", "x"], 2),
    (["review", "reject"], 2),
    (["review", "edit", "ID"], 2),
    (["review", "list", "--status", "maybe"], 2),
    (["review", "list", "--limit", "0"], 2),
    (["review", "approve", "no-such-proposal"], 3),
    (["review", "edit", "no-such-proposal", "--content", "x"], 3),
    (["review", "edit", "ID", "--entity", "no-colon"], 2),
    (["review", "edit", "ID", "--confidence", "3"], 2),
])
def test_review_refuses_bad_input_on_one_line(queued: tuple[str, list[Proposal]],
                                              args: list[str], code: int) -> None:
    db, made = queued
    before = snapshot(db)
    result = cli(db, *[made[0].id if a == "ID" else a for a in args], code=code)
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in result.output
    assert snapshot(db) == before


def test_review_refuses_deciding_twice(queued: tuple[str, list[Proposal]]) -> None:
    db, made = queued
    cli(db, "review", "approve", made[0].id)
    before = snapshot(db)
    assert "already approved" in cli(db, "review", "reject", made[0].id, code=2).stderr
    assert snapshot(db) == before


def test_review_of_a_missing_database_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "none.db"
    for args in (["review"], ["review", "approve", "all"], ["bootstrap", "--reset"]):
        assert "no database" in cli(str(missing), *args, code=2).stderr
    assert not missing.parent.exists()
