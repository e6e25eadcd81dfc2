"""Time-aware search: a time expression in the query boosts (or filters) what falls in
the window it names. Runs on SQLite and PostgreSQL, with the test's clock as "now"."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import product

import pytest

from ledgermem import Hit, InvalidInput, Item, Memory, SearchOptions, UserMemory
from ledgermem.store import sqlite_keyword
from ledgermem.store.base import TurnQuery
from tests.support import START, FakeClock

# START is Monday 1 June 2026, 12:00 UTC: "last week" is 25–31 May 2026.


def ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def why_without_time(hit: Hit) -> dict[str, float]:
    return {k: v for k, v in hit.why.items() if not k.startswith("time_")}


@pytest.fixture
def hikes(alice: UserMemory, clock: FakeClock) -> dict[str, Item]:
    """Two similar items, one true since May 2023, one since June 2023. The June one is
    written later, so recency alone ranks it first."""
    may = alice.remember("Hiking trip in the Alps near Zermatt", valid_from="2023-05-20")
    clock.advance(days=30)
    june = alice.remember("Hiking trip in the Rockies near Banff", valid_from="2023-06-20")
    return {"may": may, "june": june}


def test_the_month_named_ranks_its_item_first(alice: UserMemory,
                                              hikes: dict[str, Item]) -> None:
    plain = alice.search("hiking trip", touch=False)
    assert ids(plain) == [hikes["june"].id, hikes["may"].id]
    in_may = alice.search("where did I go on a hiking trip in May 2023?", touch=False)
    assert ids(in_may) == [hikes["may"].id, hikes["june"].id]
    in_june = alice.search("where did I go on a hiking trip in June 2023?", touch=False)
    assert ids(in_june) == [hikes["june"].id, hikes["may"].id]


def test_hits_show_the_window_and_the_time_rank(alice: UserMemory,
                                                hikes: dict[str, Item]) -> None:
    first, second = alice.search("hiking in May 2023", touch=False)
    assert first.id == hikes["may"].id and first.why["time_rank"] == 1
    assert "time_rank" not in second.why
    for hit in (first, second):
        assert hit.why["time_window_start"] == datetime(2023, 5, 1, tzinfo=UTC).timestamp()
        assert hit.why["time_window_end"] == datetime(2023, 6, 1, tzinfo=UTC).timestamp()
        assert hit.why["score"] == pytest.approx(hit.score, abs=1e-6)


def test_time_words_do_not_match_as_keywords_in_knowledge(alice: UserMemory,
                                                          clock: FakeClock) -> None:
    # "yesterday" is a rarer word than "tea": as a keyword it would rank the wrong item.
    wrong = alice.remember("Yesterday's weather was awful", valid_from=START - timedelta(
        days=30))
    right = alice.remember("Drank tea with Sam", valid_from=START - timedelta(days=1))
    for n in range(4):
        alice.remember(f"Likes tea number {n}", valid_from=START - timedelta(days=60))
    hits = alice.search("what tea did I drink yesterday", touch=False)
    assert hits[0].id == right.id
    assert wrong.id not in ids(hits)


def test_last_week_with_an_injected_clock(alice: UserMemory, clock: FakeClock) -> None:
    clock.now = datetime(2026, 5, 20, 10, tzinfo=UTC)            # two weeks ago
    old = alice.add_turn("user", "The garden needs new tomato plants")
    clock.now = datetime(2026, 5, 27, 10, tzinfo=UTC)            # last week
    recent = alice.add_turn("user", "Planted tomato seedlings in the garden bed")
    clock.now = START
    hits = alice.search_conversations("what did I say about the garden last week?")
    assert ids(hits)[0] == recent.id and old.id in ids(hits)
    assert hits[0].why["time_window_start"] == datetime(2026, 5, 25, tzinfo=UTC).timestamp()
    # Three weeks later "last week" is another week: neither turn is in it.
    clock.advance(weeks=3)
    later = alice.search_conversations("garden last week")
    assert all("time_rank" not in hit.why for hit in later)


def test_hard_filter_keeps_only_the_window(alice: UserMemory,
                                           hikes: dict[str, Item]) -> None:
    hits = alice.search("hiking in May 2023", time_mode="filter", touch=False)
    assert ids(hits) == [hikes["may"].id]
    assert alice.search("hiking in 2021", time_mode="filter", touch=False) == []
    # Filter and the caller's own range combine (both must hold).
    assert alice.search("hiking since May 2023", time_mode="filter", touch=False,
                        time_to=START - timedelta(days=10)) == []


def test_hard_filter_as_the_memorys_default(db_url: str, clock: FakeClock,
                                            alice: UserMemory,
                                            hikes: dict[str, Item]) -> None:
    with Memory.open(db_url, clock=clock, embedder=None,
                     search=SearchOptions(time_filter=True)) as filtering:
        handle = filtering.for_user("alice")
        assert ids(handle.search("hiking in June 2023", touch=False)) == [hikes["june"].id]
        assert len(handle.search("hiking in 2023", time_mode="boost", touch=False)) == 2


def test_hard_filter_on_conversations(alice: UserMemory, clock: FakeClock) -> None:
    clock.now = datetime(2026, 5, 31, 9, tzinfo=UTC)
    yesterday = alice.add_turn("user", "Booked the dentist for Tuesday")
    clock.now = datetime(2026, 5, 29, 9, tzinfo=UTC)
    earlier = alice.add_turn("user", "Called the dentist, no answer")
    clock.now = START
    assert ids(alice.search_conversations("dentist yesterday", time_mode="filter")) == [
        yesterday.id]
    assert set(ids(alice.search_conversations("dentist yesterday", time_mode="off"))) == {
        yesterday.id, earlier.id}


def test_a_window_finds_every_turn_inside_it_whatever_order_they_were_written(
        mem: Memory, alice: UserMemory, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A time-bounded keyword search reads only the stretch of the index between the
    window's first and last turn as stored (SQLite) when that pays (``_turn_span``);
    turns written out of time order sit inside and outside that stretch, and the answer
    is the unbounded search's rows inside the window."""
    days = [10, 1, 5, 2, 9, 3, 1, 7]
    written = {}
    for n, day in enumerate(days):
        clock.now = datetime(2026, 5, day, 9, n, tzinfo=UTC)
        written[alice.add_turn("user", f"The copper kettle whistled again, take {n}").id] = day
    bob = mem.for_user("bob")
    bob.add_turn("user", "The copper kettle of bob whistled")
    everything = mem.store.keyword_search_turns("alice", ["copper", "kettle"], "or",
                                                TurnQuery(), 50)
    assert {doc for doc, _ in everything} == set(written)
    windows = [(1, 2), (2, 3), (4, 8), (10, 10), (11, 12), (None, 2), (9, None)]
    # Bounded whenever the store would; then only while the window holds at most two
    # turns; then only when its earliest and latest turn are one.
    spans = [(1.0, sqlite_keyword.SPAN_ROWS), (1.0, 2), (0.0, sqlite_keyword.SPAN_ROWS)]
    for (span_share, span_rows), (low, high) in product(spans, windows):
        monkeypatch.setattr(sqlite_keyword, "SPAN_SHARE", span_share)
        monkeypatch.setattr(sqlite_keyword, "SPAN_ROWS", span_rows)
        query = TurnQuery(
            time_from=None if low is None else datetime(2026, 5, low, tzinfo=UTC).isoformat(),
            time_to=None if high is None else datetime(2026, 5, high, 23, 59,
                                                      tzinfo=UTC).isoformat())
        inside = {doc for doc, day in written.items()
                  if (low is None or day >= low) and (high is None or day <= high)}
        for mode in ("or", "and"):
            found = mem.store.keyword_search_turns("alice", ["copper", "kettle"], mode,
                                                   query, 50)
            assert {doc for doc, _ in found} == inside, (low, high, mode, span_share, span_rows)
            assert [score for _, score in found] == sorted(
                (score for doc, score in everything if doc in inside), reverse=True)


def test_a_query_that_is_only_a_time_lists_that_time(alice: UserMemory,
                                                     clock: FakeClock) -> None:
    clock.now = datetime(2026, 5, 30, 9, tzinfo=UTC)
    before = alice.add_turn("user", "Lunch at the usual place")
    clock.now = datetime(2026, 5, 31, 9, tzinfo=UTC)
    first = alice.add_turn("user", "Ran 10 km in the morning")
    clock.advance(hours=5)
    second = alice.add_turn("assistant", "Nice run! Remember to stretch.")
    clock.now = START
    for mode in ("boost", "filter"):
        hits = alice.search_conversations("what happened yesterday?", time_mode=mode)
        assert ids(hits) == [second.id, first.id], mode
    assert before.id not in ids(alice.search_conversations("what happened yesterday?"))


def test_no_time_expression_ranks_exactly_as_without_time_awareness(
        db_url: str, clock: FakeClock, alice: UserMemory) -> None:
    kinds = ["oolong", "sencha", "matcha", "gyokuro", "bancha", "hojicha"]
    places = ["kitchen", "office", "garden", "train", "library", "porch"]
    for n in range(6):
        clock.advance(days=n)
        alice.remember(f"{kinds[n]} green tea in the {places[n]}",
                       valid_from=START - timedelta(days=40 * n))
        alice.add_turn("user", f"I brewed green tea, round {n}")
    with Memory.open(db_url, clock=clock, embedder=None,
                     search=SearchOptions(time_weight=0)) as timeless:
        other = timeless.for_user("alice")
        for query in ("green tea", "sencha oolong", "round 3 tea", "matcha garden"):
            assert alice.search(query, touch=False) == other.search(query, touch=False)
            assert alice.search_conversations(query) == other.search_conversations(query)
            assert all(not k.startswith("time_") for h in alice.search(query, touch=False)
                       for k in h.why)


def test_time_mode_off_reads_the_words_as_words(alice: UserMemory,
                                                hikes: dict[str, Item]) -> None:
    off = alice.search("hiking in May 2023", time_mode="off", touch=False)
    assert all(why_without_time(h) == h.why for h in off)
    assert ids(off)[0] == hikes["june"].id


def test_as_of_resolves_against_the_as_of_time(alice: UserMemory, clock: FakeClock) -> None:
    clock.now = datetime(2026, 3, 10, tzinfo=UTC)
    march = alice.remember("Started the pottery course")
    clock.now = datetime(2026, 4, 20, tzinfo=UTC)
    april = alice.remember("Finished the pottery course")
    clock.now = START
    # As of 5 April, "last month" is March: the March item ranks first.
    as_of = datetime(2026, 4, 5, tzinfo=UTC)
    hits = alice.search("pottery course last month", as_of=as_of)
    assert ids(hits) == [march.id]                  # April's was not known yet
    hits = alice.search("pottery course last month", as_of=START)
    assert set(ids(hits)) == {april.id, march.id}   # "last month" is May: neither
    assert all("time_rank" not in h.why for h in hits)
    hits = alice.search("pottery course in March", as_of=START)
    assert ids(hits)[0] == march.id and hits[0].why["time_rank"] == 1
    assert ids(alice.search("pottery in April", as_of=START, time_mode="filter")) == [april.id]
    assert ids(alice.search("what did I do in March?", as_of=START)) == [march.id]


def test_item_time_is_valid_from_not_when_it_was_written(alice: UserMemory) -> None:
    # Written today (START), true since 2023: a filter on 2023 finds it, one on 2026 not.
    item = alice.remember("Adopted a cat named Miso", valid_from="2023-08-02")
    assert ids(alice.search("cat in August 2023", time_mode="filter", touch=False)) == [
        item.id]
    assert alice.search("cat in 2026", time_mode="filter", touch=False) == []


def test_bad_time_settings_are_invalid_input(alice: UserMemory) -> None:
    with pytest.raises(InvalidInput):
        alice.search("tea", time_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        SearchOptions(time_weight=-0.1)
    with pytest.raises(InvalidInput):
        SearchOptions(rerank_depth=0)


@pytest.fixture
def hybrid_alice(vector_mem: Memory) -> Iterator[UserMemory]:
    yield vector_mem.for_user("alice")


def test_hybrid_search_filters_vector_candidates_too(
        vector_mem: Memory, hybrid_alice: UserMemory, clock: FakeClock) -> None:
    clock.now = datetime(2026, 5, 27, tzinfo=UTC)
    inside = hybrid_alice.add_turn("user", "We repainted the fence blue")
    clock.now = datetime(2026, 4, 2, tzinfo=UTC)
    outside = hybrid_alice.add_turn("user", "We repainted the fence green")
    clock.now = START
    vector_mem.flush()
    filtered = hybrid_alice.search_conversations("repainted fence last week",
                                                 time_mode="filter")
    assert ids(filtered) == [inside.id]
    boosted = hybrid_alice.search_conversations("repainted fence last week")
    assert ids(boosted) == [inside.id, outside.id]
    assert "vector_rank" in boosted[0].why and boosted[0].why["time_rank"] == 1


def test_as_of_ties_go_to_the_newest(alice: UserMemory, clock: FakeClock) -> None:
    older = alice.remember("Booked the pottery course")
    clock.advance(days=1)
    newer = alice.remember("Paid the pottery course")
    clock.advance(days=1)
    hits = alice.search("pottery course", as_of=clock.now, time_mode="off")
    assert ids(hits) == [newer.id, older.id]
