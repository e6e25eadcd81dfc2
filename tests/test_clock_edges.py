"""``parse_when`` refuses what it would otherwise store as another date: an ISO 8601 form
that is no real date (once read with day and month swapped), a time of day that is none
or that the parser skipped (once silently midnight), and a moment within a day of year 1
or 9999, which some time zones cannot show (once an OverflowError on every turn)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgermem.clock import EARLIEST, LATEST, iso, parse_when
from ledgermem.errors import InvalidInput

NOW = datetime(2031, 3, 12, 10, 0, tzinfo=UTC)  # a Wednesday, as in test_dates.py
EAST = NOW.astimezone(timezone(timedelta(hours=-5)))
WIDEST = (timezone(timedelta(hours=-23, minutes=-59)), timezone(timedelta(hours=23,
                                                                          minutes=59)))
"""The farthest offsets from UTC that a zone can have."""


@pytest.mark.parametrize(("text", "why"), [
    ("2026-13-01T00:00:00", "month must be in 1..12"),        # was 13 January
    ("2026-14-02T10:00:00Z", "month must be in 1..12"),       # was 14 February
    ("2026-13-01 09:00:00+01:00", "month must be in 1..12"),
    ("2026-02-30T10:00", "day is out of range for month"),
    ("2026-12-01T25:00", "hour must be in 0..23"),
    ("2026-12-01T14:0", "not ISO 8601"),
])
def test_an_iso_form_that_is_no_date_is_refused(text: str, why: str) -> None:
    for now in (NOW, EAST):
        with pytest.raises(InvalidInput,
                           match=re.escape(f"cannot read a date from '{text}': {why}")):
            parse_when(text, now=now)


@pytest.mark.parametrize(("text", "time"), [
    ("25:00 tomorrow", "25:00"),
    ("tomorrow at 13pm", "13pm"),
    ("tomorrow 24:00", "24:00"),
    ("tomorrow at 9:75", "9:75"),
    ("tomorrow 23:59:60", "23:59:60"),
    ("tomorrow at 0am", "0am"),
    ("in 3 days at 25:00", "25:00"),   # was 3 days from now, the time dropped
    ("tomorrow at 99", "at 99"),
    ("tomorrow at 5", "at 5"),         # was midnight: the parser skips a bare hour
    ("tonight at 9", "at 9"),          # was now
    ("friday at 3", "at 3"),           # was 12 March next year
])
def test_a_time_of_day_that_is_none_or_unread_is_refused(text: str, time: str) -> None:
    for now in (NOW, EAST):
        with pytest.raises(InvalidInput, match=re.escape(
                f"cannot read a date from '{text}': '{time}' is no time of day")):
            parse_when(text, now=now)


@pytest.mark.parametrize(("text", "expected"), [
    ("tomorrow at 12am", "2031-03-13T00:00:00.000000+00:00"),
    ("tomorrow at 12pm", "2031-03-13T12:00:00.000000+00:00"),
    ("tomorrow 00:30", "2031-03-13T00:30:00.000000+00:00"),
    ("tomorrow 23:59:59", "2031-03-13T23:59:59.000000+00:00"),
    ("tomorrow at 5 p.m.", "2031-03-13T17:00:00.000000+00:00"),
    ("tomorrow at 5:30 PM", "2031-03-13T17:30:00.000000+00:00"),
    ("in 3 days at 5pm", "2031-03-15T17:00:00.000000+00:00"),
    ("8:15am monday", "2031-03-17T08:15:00.000000+00:00"),
    ("tonight at 9pm", "2031-03-12T21:00:00.000000+00:00"),
    ("tomorrow", "2031-03-13T00:00:00.000000+00:00"),
    ("in 1.5 hours", "2031-03-12T11:30:00.000000+00:00"),
    ("2026-12-01 5pm", "2026-12-01T17:00:00.000000+00:00"),   # ISO date, English time
    ("2026-12-01 noon", "2026-12-01T12:00:00.000000+00:00"),
    ("2026-12-01T14:00 PST", "2026-12-01T22:00:00.000000+00:00"),
    ("2026-12-01 14:00 -08:00", "2026-12-01T22:00:00.000000+00:00"),
    ("1 Dec 2026 14:00 +05:30", "2026-12-01T08:30:00.000000+00:00"),
    ("2026-12-01T09:00:00,5Z", "2026-12-01T09:00:00.500000+00:00"),
    ("2026-12-01T14", "2026-12-01T14:00:00.000000+00:00"),
    ("at 12 December 2026", "2026-12-12T00:00:00.000000+00:00"),  # "at 12" is the day
    ("at 3rd of May", "2031-05-03T00:00:00.000000+00:00"),
])
def test_valid_times_near_those_still_read(text: str, expected: str) -> None:
    assert iso(parse_when(text, now=NOW)) == expected


@pytest.mark.parametrize("value", [
    "0001-01-01", "0001-01-01T23:59:59+00:00", "0001-01-02T01:00+02:00", "9999-12-31",
    "9999-12-30T23:00-05:00", date(1, 1, 1), datetime(9999, 12, 31),
    datetime(9999, 12, 31, tzinfo=UTC), datetime(1, 1, 1, 12, tzinfo=UTC),
])
def test_a_moment_within_a_day_of_the_calendars_ends_is_refused(
        value: str | date) -> None:
    with pytest.raises(InvalidInput, match=r"within a day of the calendar's ends .* give a "
                                           "date from 0001-01-02 to 9999-12-30"):
        parse_when(value, now=EAST)


@pytest.mark.parametrize(("value", "expected"), [
    ("0001-01-02", EARLIEST), ("9999-12-30T23:59:59.999999", LATEST),
    (date(9999, 12, 30), datetime(9999, 12, 30, tzinfo=UTC)),
])
def test_the_last_moments_every_zone_can_show_are_read(value: str | date,
                                                        expected: datetime) -> None:
    assert parse_when(value, now=NOW) == expected


@given(st.datetimes(timezones=st.sampled_from([UTC, *WIDEST])))
def test_whatever_is_read_every_zone_can_show(moment: datetime) -> None:
    for value in (moment, moment.isoformat(), moment.date()):
        try:
            read = parse_when(value, now=NOW)
        except InvalidInput:
            continue
        for zone in WIDEST:
            read.astimezone(zone)  # never OverflowError
