"""Dedup merges restatements only, says when it merged, and can be turned off; planned
writes check what they depend on inside the transaction that writes (issue 9 §4)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ledgermem import InvalidInput, Memory, UserMemory
from ledgermem.domain.dedup import markers, restates
from tests.support import FakeClock

DIFFERENT_FACTS = [
    ("Deploy on Fridays", "Do not deploy on Fridays"),
    ("We deploy on Fridays after the review", "We never deploy on Fridays after the review"),
    ("The API is stable for production use", "The API isn't stable for production use"),
    ("My son Tom plays football on the weekend", "My son Max plays football on the weekend"),
    ("Takes 20mg of lisinopril every morning", "Takes 40mg of lisinopril every morning"),
    ("The primary database is prod-db-1 in eu-west",
     "The primary database is prod-db-2 in eu-west"),
    ("Team standup is every Monday at the office", "Team standup is every Tuesday at the office"),
    ("The lease on the flat ends in March 2027", "The lease on the flat ends in June 2027"),
    ("Sarah Chen is the manager of the data team", "Priya Nair is the manager of the data team"),
    # one word in place of another, however many others they share
    ("Severely allergic to shellfish, carries an epipen everywhere",
     "Severely allergic to peanuts, carries an epipen everywhere"),
    ("Works from the office three days a week, usually",
     "Works from the office four days a week, usually"),
    ("Keeps the thermostat set higher during the winter months",
     "Keeps the thermostat set lower during the winter months"),
    ("Prefers window seats on long flights for the view",
     "Prefers aisle seats on long flights for the view"),
    # a text that leaves out much of a stored one, though it holds only its words
    ("prefers jasmine tea over coffee", "prefers coffee"),
    ("Walks the dog every evening along the river path", "Walks the dog every evening"),
]

# (stored, written, the text the merged item holds): a restatement that drops words
# leaves the fuller text; one that adds words, or words only in another case or
# stopwords, leaves the new one.
RESTATEMENTS = [
    ("Alice prefers green tea every single morning", "alice prefers green tea every morning",
     "Alice prefers green tea every single morning"),
    ("Prefers tea over coffee", "She prefers tea over coffee", "She prefers tea over coffee"),
    ("Allergic to peanuts", "Allergic to peanuts.", "Allergic to peanuts."),
    ("Meets Bob on Mondays at noon", "meets bob on mondays at noon",
     "meets bob on mondays at noon"),
    ("Allergic to peanuts and carries an epipen", "Allergic to peanuts, carries an epipen",
     "Allergic to peanuts, carries an epipen"),
    ("Allergic to peanuts since early childhood", "Allergic to peanuts since childhood",
     "Allergic to peanuts since early childhood"),
    ("Allergic to peanuts since childhood", "Allergic to peanuts since early childhood",
     "Allergic to peanuts since early childhood"),
]


@pytest.mark.parametrize(("first", "second"), DIFFERENT_FACTS)
def test_texts_that_state_a_different_fact_are_never_merged(
        alice: UserMemory, first: str, second: str) -> None:
    one = alice.remember(first)
    two = alice.remember(second)
    assert two.id != one.id and two.written == "added"
    assert alice.get(one.id).content == first
    assert {i.content for i in alice.all_knowledge()["items"]} == {first, second}


@pytest.mark.parametrize(("first", "second", "kept"), RESTATEMENTS)
def test_restatements_are_merged_and_the_result_says_into_what(
        alice: UserMemory, first: str, second: str, kept: str) -> None:
    one = alice.remember(first)
    assert one.written == "added"
    two = alice.remember(second)
    assert (two.id, two.written, two.content) == (one.id, "merged", kept)
    assert alice.all_knowledge()["total"] == 1
    assert alice.get(one.id) == two  # ``written`` is about the call, not stored


@pytest.mark.parametrize(("first", "second"), DIFFERENT_FACTS[-6:-2])
def test_a_batch_never_merges_a_swapped_word_either(
        alice: UserMemory, first: str, second: str) -> None:
    stored = alice.remember(first)
    items = alice.remember_many([second, first.upper(), second + "."])
    assert [i.written for i in items] == ["added", "merged", "merged"]
    assert items[1].id == stored.id and items[2].id == items[0].id
    assert {i.content for i in alice.all_knowledge()["items"]} == {first.upper(),
                                                                   second + "."}


def test_many_numbered_facts_stay_apart(alice: UserMemory) -> None:
    for i in range(300):
        alice.remember(f"shared fact number {i} about the same thing")
    assert alice.all_knowledge(limit=None)["total"] == 300


def test_dedup_can_be_turned_off_per_call_and_per_memory(
        alice: UserMemory, db_url: str, clock: FakeClock) -> None:
    first = alice.remember("Allergic to peanuts")
    again = alice.remember("Allergic to peanuts", dedup=False)
    assert again.id != first.id and again.written == "added"
    alice.memory.close()
    with Memory.open(db_url, embedder=None, clock=clock, dedup=False) as mem:
        user = mem.for_user("alice")
        third = user.remember("Allergic to peanuts")
        assert third.written == "added"
        assert user.remember("Allergic to peanuts", dedup=True).written == "merged"
        assert user.all_knowledge()["total"] == 3


def test_markers_name_what_makes_a_fact_particular() -> None:
    assert markers("Do not deploy on Fridays") == {"¬", "fridays"}  # "do" is a stopword
    assert markers("Takes 20mg of it") == {"takes", "20mg"}
    assert not restates("", "anything")
    assert restates("Deploy on Fridays", "deploy on fridays")


def _race(count: int, action: Callable[[int], object]) -> list[BaseException]:
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        barrier.wait()
        try:
            action(n)
        except BaseException as exc:  # collected, asserted by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_revisions_of_one_item_leave_one_active_version(
        mem: Memory, alice: UserMemory) -> None:
    item = alice.remember("Lives in Lisbon")
    errors = _race(8, lambda n: mem.for_user("alice").revise(item.id, f"Lives in city {n}"))
    versions = alice.all_knowledge(include_superseded=True, limit=None)["items"]
    active = [v for v in versions if v.active]
    assert len(active) == 1
    # Exactly one revision won; the others were refused because the item was no longer
    # active when their transaction read it.
    assert len(errors) == 7 and all(isinstance(e, InvalidInput) for e in errors)
    assert len(versions) == 2
    assert alice.get(item.id).superseded_by == active[0].id


def test_concurrent_invalidate_and_restore_never_leave_two_active_versions(
        mem: Memory, alice: UserMemory) -> None:
    old = alice.remember("Works at Acme")
    new = alice.revise(old.id, "Works at Globex")
    _race(6, lambda n: mem.for_user("alice").restore(old.id if n % 2 else new.id))
    versions = alice.all_knowledge(include_superseded=True, limit=None)["items"]
    assert len([v for v in versions if v.active]) <= 1


def test_concurrent_identical_remembers_make_one_item(mem: Memory, alice: UserMemory) -> None:
    errors = _race(8, lambda n: mem.for_user("alice").remember("Allergic to shellfish"))
    assert errors == []
    assert alice.all_knowledge()["total"] == 1
