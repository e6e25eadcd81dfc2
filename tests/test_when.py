"""find_time_window: time expressions in queries, resolved against a reference time."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgermem.retrieval.when import MAX_QUERY, TimeWindow, find_time_window

THURSDAY = datetime(2024, 3, 14, 15, 30, tzinfo=UTC)
"""A Thursday in a leap year; most expressions below are read against it."""


def days(query: str, now: datetime = THURSDAY) -> tuple[date | None, date | None]:
    """The window as local dates (start, end exclusive); fails when there is none."""
    window = find_time_window(query, now)
    assert window is not None, query
    return (window.start.date() if window.start else None,
            window.end.date() if window.end else None)


D = date


@pytest.mark.parametrize(("query", "start", "end"), [
    # days
    ("what did I do today", D(2024, 3, 14), D(2024, 3, 15)),
    ("what did I do earlier today", D(2024, 3, 14), D(2024, 3, 15)),
    ("what happened yesterday?", D(2024, 3, 13), D(2024, 3, 14)),
    ("the day before yesterday", D(2024, 3, 12), D(2024, 3, 13)),
    ("3 days ago", D(2024, 3, 11), D(2024, 3, 12)),
    ("a couple of days ago", D(2024, 3, 12), D(2024, 3, 13)),
    ("last Friday", D(2024, 3, 8), D(2024, 3, 9)),
    ("last wednesday", D(2024, 3, 13), D(2024, 3, 14)),
    ("on 8 May 2023", D(2023, 5, 8), D(2023, 5, 9)),
    ("on May 8th, 2023", D(2023, 5, 8), D(2023, 5, 9)),
    ("the 8th of May 2023", D(2023, 5, 8), D(2023, 5, 9)),
    ("on 1 February, 2023", D(2023, 2, 1), D(2023, 2, 2)),
    ("shared on December 1,2023", D(2023, 12, 1), D(2023, 12, 2)),
    ("8th December, 2023", D(2023, 12, 8), D(2023, 12, 9)),
    ("2023-05-08", D(2023, 5, 8), D(2023, 5, 9)),
    ("2023/05/08", D(2023, 5, 8), D(2023, 5, 9)),
    ("Sept 3 2022", D(2022, 9, 3), D(2022, 9, 4)),
    ("on March 2", D(2024, 3, 2), D(2024, 3, 3)),       # the latest March 2: this year
    ("on March 20", D(2023, 3, 20), D(2023, 3, 21)),     # not yet this year: last year's
    # weeks
    ("this week", D(2024, 3, 11), D(2024, 3, 18)),
    ("what did we discuss last week?", D(2024, 3, 4), D(2024, 3, 11)),
    ("two weeks ago", D(2024, 2, 26), D(2024, 3, 4)),
    ("last weekend", D(2024, 3, 9), D(2024, 3, 11)),
    ("this weekend", D(2024, 3, 16), D(2024, 3, 18)),
    ("over the weekend", D(2024, 3, 9), D(2024, 3, 11)),
    ("the past week", D(2024, 3, 8), D(2024, 3, 15)),
    ("in the last 3 days", D(2024, 3, 12), D(2024, 3, 15)),
    ("past two weeks", D(2024, 3, 1), D(2024, 3, 15)),
    # months
    ("in May 2023", D(2023, 5, 1), D(2023, 6, 1)),
    ("May 2023", D(2023, 5, 1), D(2023, 6, 1)),
    ("may 2023", D(2023, 5, 1), D(2023, 6, 1)),
    ("during September 2023", D(2023, 9, 1), D(2023, 10, 1)),
    ("Nov. 2022", D(2022, 11, 1), D(2022, 12, 1)),
    ("in May", D(2023, 5, 1), D(2023, 6, 1)),             # the latest May not after now
    ("in March", D(2024, 3, 1), D(2024, 4, 1)),           # the current month
    ("this month", D(2024, 3, 1), D(2024, 4, 1)),
    ("last month", D(2024, 2, 1), D(2024, 3, 1)),
    ("two months ago", D(2024, 1, 1), D(2024, 2, 1)),
    # years
    ("in 2022", D(2022, 1, 1), D(2023, 1, 1)),
    ("during the year 2021", D(2021, 1, 1), D(2022, 1, 1)),
    ("this year", D(2024, 1, 1), D(2025, 1, 1)),
    ("last year", D(2023, 1, 1), D(2024, 1, 1)),
    ("4 years ago", D(2020, 1, 1), D(2021, 1, 1)),
    # seasons
    ("last summer", D(2023, 6, 1), D(2023, 9, 1)),
    ("in summer 2021", D(2021, 6, 1), D(2021, 9, 1)),
    ("the fall of 2022", D(2022, 9, 1), D(2022, 12, 1)),
    ("last winter", D(2023, 12, 1), D(2024, 3, 1)),
    ("during the winter", D(2023, 12, 1), D(2024, 3, 1)),
    # shifts
    ("the week before 16 November 2023", D(2023, 11, 9), D(2023, 11, 16)),
    ("two days after May 8, 2023", D(2023, 5, 10), D(2023, 5, 11)),
    ("the Sunday before October 25, 2022", D(2022, 10, 23), D(2022, 10, 24)),
    ("the month before May 2023", D(2023, 4, 1), D(2023, 5, 1)),
    # ranges
    ("between August 11 and August 15 2023", D(2023, 8, 11), D(2023, 8, 16)),
    ("from May to July 2023", D(2023, 5, 1), D(2023, 8, 1)),
    ("since March 2023 until May 2023", D(2023, 3, 1), D(2023, 6, 1)),
    ("in 2022 and 2023", D(2022, 1, 1), D(2024, 1, 1)),
    ("yesterday or today", D(2024, 3, 13), D(2024, 3, 15)),
])
def test_expressions(query: str, start: date, end: date) -> None:
    assert days(query) == (start, end)


@pytest.mark.parametrize(("query", "start", "end"), [
    ("since March", D(2024, 3, 1), None),
    ("from May 2023", D(2023, 5, 1), None),
    ("after last week", D(2024, 3, 11), None),
    ("before 2022", None, D(2022, 1, 1)),
    ("prior to June 2023", None, D(2023, 6, 1)),
    ("until June 2023", None, D(2023, 7, 1)),
    ("by 2023", None, D(2024, 1, 1)),
    ("as of December 2023", None, D(2024, 1, 1)),
])
def test_a_relation_in_front_opens_one_side(query: str, start: date | None,
                                            end: date | None) -> None:
    assert days(query) == (start, end)


@pytest.mark.parametrize("query", [
    "",
    "what is my favourite tea",
    "May I ask something?",             # the verb, not the month
    "what may 3 people do",
    "I have 2022 apples",               # a count, not a year
    "a photo of June",                  # a name
    "Plans for the summer",             # no season without a relation or a year
    "what is next week",                # future expressions are not read
    "31 February 2023",                 # impossible; no shorter reading replaces it
    "29 February 2023",
    "in 2022 I moved, last week I came back",   # two unrelated windows
    "since March until May",            # a range running backwards (May 2023 → March 2024)
])
def test_absent_or_ambiguous_gives_none(query: str) -> None:
    assert find_time_window(query, THURSDAY) is None


def test_spans_and_rest() -> None:
    query = "What did I do last week?"
    window = find_time_window(query, THURSDAY)
    assert window is not None
    assert [query[a:b] for a, b in window.spans] == ["last week"]
    assert window.rest == "What did I do?"
    query = "Who did Maria have dinner with on May 3, 2023 at home"
    window = find_time_window(query, THURSDAY)
    assert window is not None
    assert [query[a:b] for a, b in window.spans] == ["on May 3, 2023"]
    assert window.rest == "Who did Maria have dinner with at home"


def test_a_range_is_one_span_with_its_connector() -> None:
    query = "Where was John between August 11 and August 15 2023?"
    window = find_time_window(query, THURSDAY)
    assert window is not None
    assert [query[a:b] for a, b in window.spans] == ["between August 11 and August 15 2023"]
    assert window.rest == "Where was John?"


# reference-time edge cases ---------------------------------------------------------------

@pytest.mark.parametrize(("now", "query", "start", "end"), [
    # month and year boundaries
    (datetime(2024, 1, 1, 9, tzinfo=UTC), "yesterday", D(2023, 12, 31), D(2024, 1, 1)),
    (datetime(2024, 1, 3, tzinfo=UTC), "last month", D(2023, 12, 1), D(2024, 1, 1)),
    (datetime(2024, 1, 3, tzinfo=UTC), "last week", D(2023, 12, 25), D(2024, 1, 1)),
    (datetime(2024, 1, 3, tzinfo=UTC), "in December", D(2023, 12, 1), D(2024, 1, 1)),
    (datetime(2024, 1, 15, tzinfo=UTC), "two months ago", D(2023, 11, 1), D(2023, 12, 1)),
    (datetime(2024, 1, 15, tzinfo=UTC), "this winter", D(2023, 12, 1), D(2024, 3, 1)),
    (datetime(2024, 12, 31, 23, 59, tzinfo=UTC), "this year", D(2024, 1, 1), D(2025, 1, 1)),
    (datetime(2024, 9, 1, tzinfo=UTC), "last summer", D(2024, 6, 1), D(2024, 9, 1)),
    (datetime(2024, 3, 31, tzinfo=UTC), "last month", D(2024, 2, 1), D(2024, 3, 1)),
    (datetime(2024, 3, 31, tzinfo=UTC), "a month ago", D(2024, 2, 1), D(2024, 3, 1)),
    # leap years
    (datetime(2024, 3, 1, tzinfo=UTC), "yesterday", D(2024, 2, 29), D(2024, 3, 1)),
    (datetime(2023, 3, 1, tzinfo=UTC), "yesterday", D(2023, 2, 28), D(2023, 3, 1)),
    (datetime(2024, 3, 1, tzinfo=UTC), "3 days ago", D(2024, 2, 27), D(2024, 2, 28)),
    (datetime(2025, 3, 1, tzinfo=UTC), "on February 29", D(2024, 2, 29), D(2024, 3, 1)),
    (datetime(2024, 2, 29, tzinfo=UTC), "a year ago", D(2023, 1, 1), D(2024, 1, 1)),
    (datetime(2025, 1, 10, tzinfo=UTC), "29 February 2024", D(2024, 2, 29), D(2024, 3, 1)),
    # weeks start on Monday
    (datetime(2024, 3, 11, 8, tzinfo=UTC), "this week", D(2024, 3, 11), D(2024, 3, 18)),
    (datetime(2024, 3, 11, 8, tzinfo=UTC), "last week", D(2024, 3, 4), D(2024, 3, 11)),
    (datetime(2024, 3, 17, 22, tzinfo=UTC), "this week", D(2024, 3, 11), D(2024, 3, 18)),
    (datetime(2024, 3, 17, 22, tzinfo=UTC), "last weekend", D(2024, 3, 9), D(2024, 3, 11)),
    (datetime(2024, 3, 17, 22, tzinfo=UTC), "over the weekend", D(2024, 3, 16),
     D(2024, 3, 18)),
    (datetime(2024, 3, 15, tzinfo=UTC), "last Friday", D(2024, 3, 8), D(2024, 3, 9)),
    (datetime(2024, 3, 11, tzinfo=UTC), "last Monday", D(2024, 3, 4), D(2024, 3, 5)),
])
def test_reference_time_edges(now: datetime, query: str, start: date, end: date) -> None:
    assert days(query, now) == (start, end)


def test_days_follow_the_reference_times_zone() -> None:
    # 01:00 on 1 March in UTC-5 is 06:00 UTC: "yesterday" is 29 February there.
    eastern = timezone(timedelta(hours=-5))
    window = find_time_window("yesterday", datetime(2024, 3, 1, 1, tzinfo=eastern))
    assert window is not None
    assert window.start == datetime(2024, 2, 29, tzinfo=eastern)
    assert window.end == datetime(2024, 3, 1, tzinfo=eastern)
    assert window.time_from == "2024-02-29T05:00:00.000000+00:00"
    assert window.time_to == "2024-03-01T04:59:59.999999+00:00"
    # The same moment read in UTC is already 1 March, 06:00: yesterday is 29 February
    # (UTC); three hours earlier in UTC-5 it was still 29 February, so yesterday is 28.
    assert days("yesterday", datetime(2024, 3, 1, 6, tzinfo=UTC)) == (D(2024, 2, 29),
                                                                     D(2024, 3, 1))
    assert days("yesterday", datetime(2024, 2, 29, 22, tzinfo=eastern)) == (D(2024, 2, 28),
                                                                           D(2024, 2, 29))


def test_days_cross_daylight_saving_changes_at_local_midnight() -> None:
    new_york = ZoneInfo("America/New_York")   # clocks went forward on 10 March 2024
    window = find_time_window("last week", datetime(2024, 3, 12, 12, tzinfo=new_york))
    assert window is not None and window.start is not None and window.end is not None
    assert (window.start.hour, window.end.hour) == (0, 0)
    # Same-zone subtraction is wall-clock time; the week lost an hour in real time.
    assert window.end.astimezone(UTC) - window.start.astimezone(UTC) == timedelta(days=6,
                                                                                  hours=23)
    assert (window.time_from, window.time_to) == ("2024-03-04T05:00:00.000000+00:00",
                                                  "2024-03-11T03:59:59.999999+00:00")


def test_a_naive_reference_time_is_utc() -> None:
    window = find_time_window("yesterday", datetime(2024, 3, 1, 12))
    assert window is not None and window.start == datetime(2024, 2, 29, tzinfo=UTC)


def test_contains_is_half_open_and_reads_stored_timestamps() -> None:
    window = find_time_window("on 8 May 2023", THURSDAY)
    assert window is not None
    assert window.contains("2023-05-08T00:00:00.000000+00:00")
    assert window.contains(datetime(2023, 5, 8, 23, 59, tzinfo=UTC))
    assert not window.contains("2023-05-09T00:00:00.000000+00:00")
    assert not window.contains(datetime(2023, 5, 7, 23, 59, 59, tzinfo=UTC))
    opened = find_time_window("since May 2023", THURSDAY)
    assert opened is not None and opened.time_to is None
    assert opened.contains("2999-01-01T00:00:00+00:00")


def test_long_text_is_not_read() -> None:
    assert find_time_window("yesterday " + "word " * MAX_QUERY, THURSDAY) is None


@given(st.text(max_size=200), st.datetimes(min_value=datetime(1910, 1, 1),
                                           max_value=datetime(2090, 1, 1),
                                           timezones=st.sampled_from([UTC, timezone(
                                               timedelta(hours=9, minutes=30))])))
def test_any_text_gives_none_or_a_proper_window(text: str, now: datetime) -> None:
    window = find_time_window(text, now)
    if window is not None:
        assert isinstance(window, TimeWindow)
        assert window.start is not None or window.end is not None
        if window.start is not None and window.end is not None:
            assert window.start < window.end
        assert all(0 <= a < b <= len(text) for a, b in window.spans)


@given(st.lists(st.sampled_from(["yesterday", "last", "week", "May", "in", "2023", "8",
                                 "since", "and", "the", "before", "summer", "ago", "two",
                                 "days", "Friday", "until", "of", "—", ","]), max_size=12))
def test_word_salad_of_time_words_never_raises(words: list[str]) -> None:
    window = find_time_window(" ".join(words), THURSDAY)
    if window is not None and window.start is not None and window.end is not None:
        assert window.start < window.end
