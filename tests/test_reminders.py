"""upcoming(days) and mark_reminded: due or overdue, not yet reminded."""

from __future__ import annotations

from ledgermem import UserMemory
from tests.support import FakeClock


def ids(items: list) -> list[str]:  # type: ignore[type-arg]
    return [i.id for i in items]


def test_upcoming_lists_items_due_within_the_window_soonest_first(
        alice: UserMemory, clock: FakeClock) -> None:
    in_five = alice.remember("Dentist appointment", "reminder", due_at="in 5 days")
    in_two = alice.remember("Submit expense report", "reminder", due_at="in 2 days")
    alice.remember("Renew passport", "reminder", due_at="in 30 days")
    alice.remember("No date on this one", "note")
    assert ids(alice.upcoming(7)) == [in_two.id, in_five.id]
    assert ids(alice.upcoming(3)) == [in_two.id]
    assert ids(alice.upcoming()) == [in_two.id, in_five.id]  # default: a week
    assert len(alice.upcoming(31)) == 3


def test_overdue_items_are_upcoming(alice: UserMemory, clock: FakeClock) -> None:
    overdue = alice.remember("Call the plumber", "reminder", due_at="yesterday")
    assert ids(alice.upcoming(1)) == [overdue.id]
    clock.advance(days=100)
    assert ids(alice.upcoming(0)) == [overdue.id]


def test_reminded_items_drop_out(alice: UserMemory) -> None:
    item = alice.remember("Pay the rent", "reminder", due_at="in 2 days")
    alice.mark_reminded(item.id)
    assert alice.upcoming(7) == []


def test_item_reminded_early_comes_back_once_its_due_date_passes(
        alice: UserMemory, clock: FakeClock) -> None:
    item = alice.remember("Flight to Lisbon", "reminder", due_at="in 3 days")
    alice.mark_reminded(item.id)  # reminded three days ahead
    clock.advance(days=2)
    assert alice.upcoming(7) == []
    clock.advance(days=2)  # now one day past due, reminded before it was due
    assert ids(alice.upcoming(7)) == [item.id]
    alice.mark_reminded(item.id)  # reminded again after the due date: done
    assert alice.upcoming(7) == []


def test_rescheduling_makes_a_reminded_item_upcoming_again(alice: UserMemory) -> None:
    item = alice.remember("Team offsite", "reminder", due_at="in 2 days")
    alice.mark_reminded(item.id)
    alice.update(item.id, due_at="in 4 days")
    assert ids(alice.upcoming(7)) == [item.id]


def test_clearing_due_at_removes_it(alice: UserMemory) -> None:
    item = alice.remember("Book tickets", "reminder", due_at="tomorrow")
    alice.update(item.id, due_at=None)
    assert alice.upcoming(7) == []


def test_forgotten_items_are_not_upcoming(alice: UserMemory) -> None:
    item = alice.remember("Secret meeting", "reminder", due_at="tomorrow")
    alice.forget(item.id)
    assert alice.upcoming(7) == []
