"""``remember_many``: many items in one transaction, each deduplicated as ``remember``
would, checked before anything is written; and bulk ``add_turns`` keeping the views
equal to what one write at a time leaves (both stores through the ``mem`` fixture)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import anyio
import pytest

from ledgermem import AsyncMemory, InvalidInput, Memory, UserMemory
from ledgermem.domain import dedup, writer
from ledgermem.domain.events import Kind
from ledgermem.domain.projection import Change, project
from ledgermem.retrieval.keyword import query_terms
from ledgermem.store.sql import SQLStore
from ledgermem.types import Event
from tests.support import FakeClock

TEXTS: list[Any] = [
    "Likes green tea in the morning",
    "Owns a red bicycle",
    "Likes green tea in the morning",          # the same text again: merged
    "Owns a red bicycle.",                     # a restatement: merged
    {"content": "Owns a red bicycle", "category": "preference"},  # another category
    "Does not own a red bicycle",              # a negation is another fact
    {"content": "Flies to Lisbon on Monday", "entity": "place:lisbon", "sensitive": True},
    {"content": "Flies to Lisbon on Tuesday", "entity": "place:lisbon"},  # a date differs
]


def _shape(items: list[Any]) -> list[tuple[str, str, str | None, int]]:
    """What each entry did, and which entries share an item (by first position)."""
    first: dict[str, int] = {}
    return [(i.written, i.category, i.entity, first.setdefault(i.id, n))
            for n, i in enumerate(items)]


def _state(user: UserMemory) -> list[tuple[str, str, str, bool, float]]:
    listed = user.all_knowledge(limit=None, include_superseded=True)["items"]
    return sorted((i.category, i.context, i.content, i.sensitive, i.confidence)
                  for i in listed)


def test_remember_many_matches_one_remember_at_a_time(mem: Memory) -> None:
    one, many = mem.for_user("one"), mem.for_user("many")
    for user in (one, many):
        user.remember("Likes green tea in the morning", confidence=0.5)
    expected = [one.remember(entry) if isinstance(entry, str) else one.remember(**entry)
                for entry in TEXTS]
    got = many.remember_many(TEXTS)
    assert _shape(got) == _shape(expected)
    assert [i.written for i in got] == ["merged", "added", "merged", "merged", "added",
                                        "added", "added", "added"]
    # Entries that end up as one item return that item, as stored at the end.
    assert got[1].id == got[3].id and got[1].content == "Owns a red bicycle."
    assert got[0].id == got[2].id
    assert _state(many) == _state(one)
    assert mem.verify()["problems"] == []


def test_templated_entries_are_compared_only_with_those_holding_their_number(
        mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Notes from one template share every word but their number: each entry is read
    against the earlier entries holding its number, not against all of them (a batch of
    1,000 such notes compared 499,500 pairs in 20 s), and still merges its restatement
    and the one earlier entry with its number."""
    compared: list[tuple[str, str]] = []
    restates = dedup.restates

    def counted(text: str, other: str) -> bool:
        compared.append((text, other))
        return restates(text, other)

    monkeypatch.setattr(dedup, "restates", counted)
    entries = [f"Work note {n} on the quarterly budget" for n in range(300)]
    entries += ["Work note 17 on the quarterly budget.", "Work note 17 on the yearly budget"]
    items = mem.for_user("alice").remember_many(entries)
    assert [i.written for i in items].count("merged") == 1
    assert items[300].id == items[17].id and items[301].id != items[17].id
    assert len({i.id for i in items}) == 301
    assert len(compared) <= 2, compared     # note 17 against its restatement and variant
    # Without a number, dates or names, the words still decide.
    more = mem.for_user("bob").remember_many(["Likes the color blue", "Likes the colour blue",
                                              "likes the color blue!"])
    assert [i.written for i in more] == ["added", "added", "merged"]
    # A shorter earlier text holding the number and the name restates a longer one,
    # though it holds one of the longer text's three rarest words: found in a batch
    # as one call at a time finds it.
    carol = mem.for_user("carol").remember_many(["Tom is 7", "My son Tom is 7 years old"])
    assert [i.written for i in carol] == ["added", "merged"]
    dave = mem.for_user("dave")
    dave.remember("Tom is 7")
    assert dave.remember("My son Tom is 7 years old").written == "merged"


def test_a_batch_finds_a_stored_shorter_text_by_the_rare_number_both_hold(mem: Memory) -> None:
    """A stored "Tom is 7" holds none of "My son Tom is 7 years old"'s three rarest
    words, yet the longer text restates it; the rows holding its rare number ("7") are
    its candidates, in a batch as in one call. (A batch once asked only the rows
    holding two of the rarest words, which found none, and added it.)"""
    erin = mem.for_user("erin")
    stored = erin.remember("Tom is 7")
    items = erin.remember_many(["Likes oat milk in coffee", "My son Tom is 7 years old",
                                "Walks the dog at six"])
    assert [i.written for i in items] == ["added", "merged", "added"]
    assert items[1].id == stored.id


def _counting_overlaps(monkeypatch: pytest.MonkeyPatch) -> list[AbstractSet[str]]:
    """The word sets the writer's ``overlaps`` is called with from now on, in order."""
    compared: list[AbstractSet[str]] = []
    overlaps = dedup.overlaps

    def counted(words: AbstractSet[str], others: AbstractSet[str]) -> bool:
        compared.append(words)
        return overlaps(words, others)

    monkeypatch.setattr(writer, "overlaps", counted)
    return compared


def test_entries_without_numbers_are_compared_only_with_those_sharing_a_first_word(
        mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a number, date or name, an entry is compared with the earlier entries
    that can overlap it: those sharing a word with its rarest few in the batch, or whose
    rarest few it holds (prefix filtering). Entries alike in four words of five do not
    overlap enough to restate each other; comparing each with all of them took 19.5 s
    for 4,000."""
    compared = _counting_overlaps(monkeypatch)
    code = ["".join(chr(ord("a") + int(d)) for d in str(n)) for n in range(400)]
    items = mem.for_user("alice").remember_many([f"crate {c} holds quince jam" for c in code])
    assert {i.written for i in items} == {"added"}
    assert len(compared) < 400, len(compared)          # 79,800 pairs before
    # A shorter earlier entry that a later one holds whole restates it, though it holds
    # none of the later one's three rarest words.
    more = mem.for_user("bob").remember_many(
        ["likes oat milk", "likes oat milk in strong black coffee"])
    assert [i.written for i in more] == ["added", "merged"]


def test_a_name_every_entry_holds_does_not_make_each_entry_read_all_of_them(
        mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries that all name one person ("Alice …") but share few other words are
    compared by their first words, the shorter list, not with every earlier entry
    holding the name (300 such entries compared 2,081 pairs)."""
    compared = _counting_overlaps(monkeypatch)
    code = ["".join(chr(ord("a") + int(d)) for d in f"{n:03d}") for n in range(300)]
    entries = [f"Alice keeps {c}{c[::-1]} beside {c[::-1]}x near {c}q" for c in code]
    items = mem.for_user("alice").remember_many([*entries, entries[42] + "."])
    assert [i.written for i in items].count("merged") == 1
    assert items[300].id == items[42].id
    assert len(compared) < 300, len(compared)


NOTES = [f"Crate {n} holds quince jam from Lisbon" for n in range(30)]
NOTES.append("Crate 7 holds quince jam from Lisbon.")      # a restatement: merged


def test_a_batch_splits_each_entry_into_search_terms_once(
        mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting a batch's words, choosing each entry's rarest and finding its rarest
    number, date or name all read one split of its text (``dedup.search_terms``)."""
    split: list[str] = []

    def counted(text: str, *, max_terms: int = 32) -> list[str]:
        split.append(text)
        return query_terms(text, max_terms=max_terms)

    monkeypatch.setattr(dedup, "query_terms", counted)
    dedup.search_terms.cache_clear()
    items = mem.for_user("alice").remember_many(NOTES)
    assert [i.written for i in items].count("merged") == 1
    assert sorted(split) == sorted(NOTES)


def test_a_batch_projects_only_its_merges(
        mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new item stands as it was planned; only a merge's changes are projected onto
    the item it refreshes (the store projects every event again as it appends it)."""
    projected: list[str] = []

    def counted(event: Event) -> list[Change]:
        projected.append(event.kind)
        return project(event)

    monkeypatch.setattr(writer, "project", counted)
    items = mem.for_user("alice").remember_many(NOTES)
    assert items[30].id == items[7].id and items[30].written == "merged"
    assert projected == [Kind.MEMORY_UPDATED]


def test_items_come_back_in_input_order_with_every_field(alice: UserMemory) -> None:
    entries: list[Any] = [
        {"content": f"Measurement {n} of the west tank reads {n * 7} litres",
         "category": "note", "context": "work", "entity": "tank:west", "confidence": 0.6,
         "metadata": {"n": n}, "due_at": "2026-07-01T09:00:00+00:00", "reason": "import",
         "source": "tool", "domain": "plant", "valid_from": f"2026-01-0{n % 9 + 1}T00:00:00+00:00"}
        for n in range(30)]
    items = alice.remember_many(entries)
    assert [i.metadata["n"] for i in items] == list(range(30))
    assert all(i.written == "added" for i in items)
    first = alice.get(items[0].id)
    assert (first.category, first.context, first.entity, first.confidence, first.source,
            first.domain) == ("note", "work", "tank:west", 0.6, "tool", "plant")
    assert first.due_at is not None and first.due_at.startswith("2026-07-01T09:00:00")
    assert first.valid_from is not None and first.valid_from.startswith("2026-01-01T00:00")
    assert alice.history(items[0].id)[0].payload.get("reason") == "import"
    assert alice.stats()["items"] == 30


def test_dedup_false_adds_every_entry(alice: UserMemory) -> None:
    items = alice.remember_many(["Owns a red bicycle"] * 3, dedup=False)
    assert len({i.id for i in items}) == 3 and {i.written for i in items} == {"added"}


@pytest.mark.parametrize(("entries", "message"), [
    (["fine", ""], "item 1: "),
    (["fine", {"content": "x", "category": "gossip"}], "item 1: "),
    (["fine", "also fine", {"content": "x", "colour": "red"}], "item 2: unknown field"),
    ([{"category": "fact"}], "item 0: content is required"),
    (["fine", 42], "item 1: expected a text"),
    (["fine", {"content": "x", "confidence": 3}], "item 1: "),
    (["fine", {"content": "x", "due_at": "whenever the moon is blue"}], "item 1: "),
    (["fine", {"content": "x", "metadata": ["not", "an", "object"]}], "item 1: "),
    ("just one text", "entries must be a list"),
])
def test_a_bad_entry_is_named_and_nothing_is_written(
        alice: UserMemory, entries: Any, message: str) -> None:
    alice.remember("Already here")
    before = (alice.stats()["events"], _state(alice))
    with pytest.raises(InvalidInput, match=message):
        alice.remember_many(entries)
    assert (alice.stats()["events"], _state(alice)) == before


def test_an_empty_batch_writes_nothing(alice: UserMemory) -> None:
    assert alice.remember_many([]) == []
    assert alice.stats()["events"] == 0


def test_a_store_error_midway_leaves_nothing(alice: UserMemory) -> None:
    # NUL passes the checks on SQLite and is refused by PostgreSQL's driver, so only
    # the checks that both stores make are relied on here: a lone surrogate.
    with pytest.raises(InvalidInput, match="item 2"):
        alice.remember_many(["one", "two", "bad \ud800 text"])
    assert alice.stats()["items"] == 0


def test_a_large_batch_spans_chunks_and_verifies(mem: Memory) -> None:
    alice = mem.for_user("alice")
    texts = [f"Crate {n} holds {n % 13} jars of quince jam from shelf {n // 10}"
             for n in range(1_000)]
    items = alice.remember_many(texts)
    assert len({i.id for i in items}) == 1_000
    assert alice.stats()["items"] == 1_000
    found = alice.search("quince jam crate 417", top_k=1)[0].item
    assert found is not None and found.content == texts[417]
    again = alice.remember_many(texts[:10])
    assert [i.id for i in again] == [i.id for i in items[:10]]
    assert {i.written for i in again} == {"merged"}
    assert mem.verify()["problems"] == []


def _contexts(mem: Memory, user: str) -> list[tuple[str, str]]:
    store = mem.store
    assert isinstance(store, SQLStore)
    rows = store._read("SELECT content, context FROM conversations WHERE user_id = ? "
                       "ORDER BY ts, pk", [user])
    return [(str(r[0]), str(r[1])) for r in rows]


def test_bulk_add_turns_leaves_the_neighbour_text_one_turn_at_a_time_leaves(
        mem: Memory, clock: FakeClock) -> None:
    turns: list[dict[str, Any]] = [
        {"role": "user" if n % 2 else "assistant", "content": f"message {n} about kites"}
        for n in range(12)]
    turns[5]["at"] = "2020-01-01T00:00:00+00:00"   # said long before the rest
    turns[8]["at"] = turns[5]["at"]                 # at the same moment
    for user in ("single", "bulk"):
        mem.for_user(user).add_turns([{"role": "user", "content": "earlier hello"}],
                                     session_id="s")
    clock.advance(seconds=60)
    for turn in turns:
        mem.for_user("single").add_turn(turn["role"], turn["content"], session_id="s",
                                        at=turn.get("at"))
    mem.for_user("bulk").add_turns(turns, session_id="s")
    assert _contexts(mem, "bulk") == _contexts(mem, "single")
    assert mem.verify()["problems"] == []


def test_remember_many_has_an_async_twin(tmp_path: Path, clock: FakeClock) -> None:
    async def main() -> list[str | None]:
        async with AsyncMemory.open(tmp_path / "a.db", embedder=None, clock=clock) as amem:
            items = await amem.for_user("alice").remember_many(["Owns a kite", "Owns a kite"])
            return [i.written for i in items]

    assert anyio.run(main) == ["added", "merged"]
