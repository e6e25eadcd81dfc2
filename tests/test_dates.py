"""Dates people type: ``parse_when`` over natural phrases, the injected clock, time zones
and the ``date_order`` setting; and the setting threaded through ``Memory``."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ledgermem import Memory
from ledgermem.clock import DATE_ORDERS, DateOrder, check_date_order, iso, parse_when
from ledgermem.errors import ConfigError, InvalidInput
from tests.support import FakeClock

# Wednesday 12 March 2031, 10:00 UTC: years from the real date, so a phrase read against
# the system clock instead of the injected one gives a visibly wrong answer.
NOW = datetime(2031, 3, 12, 10, 0, tzinfo=UTC)


def when(text: str, now: datetime = NOW, date_order: DateOrder | None = None) -> str:
    return iso(parse_when(text, now=now, date_order=date_order))


@pytest.mark.parametrize(("text", "expected"), [
    # refused before this parser (each read as a due date)
    ("next tuesday", "2031-03-18T00:00:00.000000+00:00"),     # the first Tuesday after today
    ("tomorrow 9am", "2031-03-13T09:00:00.000000+00:00"),
    ("next week", "2031-03-17T00:00:00.000000+00:00"),        # Monday of next week
    ("noon", "2031-03-12T12:00:00.000000+00:00"),
    ("end of month", "2031-03-31T23:59:59.999999+00:00"),     # its last moment
    ("end of the month", "2031-03-31T23:59:59.999999+00:00"),
    ("next friday at 5pm", "2031-03-14T17:00:00.000000+00:00"),
    ("Dec 3", "2031-12-03T00:00:00.000000+00:00"),
    ("tonight", "2031-03-12T20:00:00.000000+00:00"),
    ("this weekend", "2031-03-15T00:00:00.000000+00:00"),     # its Saturday
    ("end of week", "2031-03-16T23:59:59.999999+00:00"),      # weeks end on Sunday
    ("friday", "2031-03-14T00:00:00.000000+00:00"),
    ("9am", "2031-03-13T09:00:00.000000+00:00"),              # today's 9am is over
    ("day after tomorrow", "2031-03-14T00:00:00.000000+00:00"),
    ("3 days ago", "2031-03-09T10:00:00.000000+00:00"),
    ("in two weeks", "2031-03-26T10:00:00.000000+00:00"),
    ("2 months from now", "2031-05-12T10:00:00.000000+00:00"),
    ("in 2 months and 3 days", "2031-05-15T10:00:00.000000+00:00"),
    ("eod", "2031-03-12T23:59:59.999999+00:00"),
    ("by end of next month", "2031-04-30T23:59:59.999999+00:00"),
    ("start of next month", "2031-04-01T00:00:00.000000+00:00"),
    ("last week", "2031-03-03T00:00:00.000000+00:00"),
    ("next weekend", "2031-03-22T00:00:00.000000+00:00"),
    ("May 2032", "2032-05-01T00:00:00.000000+00:00"),
    ("Mar 3", "2032-03-03T00:00:00.000000+00:00"),            # the next 3 March
    ("2026-12-01 5pm", "2026-12-01T17:00:00.000000+00:00"),
    ("13/5/2026", "2026-05-13T00:00:00.000000+00:00"),        # reads one way only
    ("5/13/2026", "2026-05-13T00:00:00.000000+00:00"),
    ("in 1.5 hours", "2031-03-12T11:30:00.000000+00:00"),     # "1.5" is no date
    # read before too, and still read the same way
    ("in 3 days", "2031-03-15T10:00:00.000000+00:00"),
    ("tomorrow", "2031-03-13T00:00:00.000000+00:00"),
    ("yesterday", "2031-03-11T00:00:00.000000+00:00"),
    ("in 2 hours", "2031-03-12T12:00:00.000000+00:00"),
    ("2026-12-01", "2026-12-01T00:00:00.000000+00:00"),
    ("2026-12-01T09:30:00-05:00", "2026-12-01T14:30:00.000000+00:00"),
    ("2026-12-01T14:00:00Z", "2026-12-01T14:00:00.000000+00:00"),
    ("3 Dec 2026 14:00", "2026-12-03T14:00:00.000000+00:00"),
    ("December 1, 2026 2pm", "2026-12-01T14:00:00.000000+00:00"),
    ("1 Dec 2026 14:00 PST", "2026-12-01T22:00:00.000000+00:00"),
    ("  Tomorrow   9AM ", "2031-03-13T09:00:00.000000+00:00"),
])
def test_phrases_resolve_against_the_injected_clock(text: str, expected: str) -> None:
    assert when(text) == expected


def test_another_clock_gives_another_answer() -> None:
    later = datetime(2032, 4, 17, 10, 0, tzinfo=UTC)  # a Saturday
    assert when("next tuesday", later) == "2032-04-20T00:00:00.000000+00:00"
    assert when("end of month", later) == "2032-04-30T23:59:59.999999+00:00"
    assert when("tomorrow 9am", later) == "2032-04-18T09:00:00.000000+00:00"
    assert when("this weekend", later) == "2032-04-17T00:00:00.000000+00:00"


@pytest.mark.parametrize("text", [
    "banana", "when pigs fly", "someday maybe", "next blursday", "42", "2031",
    "99999999999999999999", "2026-13-45", "31/31/2026", "29/2/2031", "in 9999 years", "",
])
def test_what_is_no_date_is_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput, match="cannot read a date"):
        parse_when(text, now=NOW)


def test_an_unknown_zone_name_is_refused_with_a_hint() -> None:
    with pytest.raises(InvalidInput, match="give an offset"):
        parse_when("1 Dec 2026 14:00 XYZ", now=NOW)


# date order -----------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["5/12/2026", "5-12-2026", "5.12.2026", "5 12 2026", "5/12",
                                  "5/12/2026 14:00", "on 5/12/26 at noon"])
def test_a_numeric_date_that_reads_two_ways_is_refused_without_date_order(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"ambiguous: 5 Dec or 12 May\? set date_order"):
        parse_when(text, now=NOW)


@pytest.mark.parametrize(("text", "order", "expected"), [
    ("5/12/2026", "DMY", "2026-12-05T00:00:00.000000+00:00"),
    ("5/12/2026", "MDY", "2026-05-12T00:00:00.000000+00:00"),
    ("5.12.2026", "DMY", "2026-12-05T00:00:00.000000+00:00"),
    ("05-12-26", "DMY", "2026-12-05T00:00:00.000000+00:00"),
    ("5/12/2026 14:00", "DMY", "2026-12-05T14:00:00.000000+00:00"),
    ("on 5/12/2026 at 5pm", "MDY", "2026-05-12T17:00:00.000000+00:00"),
    ("5/12", "DMY", "2031-12-05T00:00:00.000000+00:00"),      # the next 5 December
    ("5/12", "MDY", "2031-05-12T00:00:00.000000+00:00"),
    ("26/12/05", "YMD", "2026-12-05T00:00:00.000000+00:00"),  # a two-digit year first
    ("5/5/2026", None, "2026-05-05T00:00:00.000000+00:00"),   # both readings agree
    ("5/13/2026", "DMY", "2026-05-13T00:00:00.000000+00:00"),  # only one reading is a day
    ("26/12/05", None, "2005-12-26T00:00:00.000000+00:00"),
])
def test_date_order_reads_numeric_dates(text: str, order: DateOrder | None,
                                        expected: str) -> None:
    assert when(text, date_order=order) == expected


@pytest.mark.parametrize("order", [None, *DATE_ORDERS])
def test_a_four_digit_year_first_is_always_year_month_day(order: DateOrder | None) -> None:
    assert when("2026/12/5", date_order=order) == "2026-12-05T00:00:00.000000+00:00"
    assert when("2026-12-05", date_order=order) == "2026-12-05T00:00:00.000000+00:00"


def test_year_first_order_does_not_pick_between_day_and_month() -> None:
    with pytest.raises(InvalidInput, match=r"ambiguous: 5 Dec or 12 May\?"):
        parse_when("5/12/2026", now=NOW, date_order="YMD")
    with pytest.raises(InvalidInput, match="ambiguous"):
        parse_when("10/11/12", now=NOW)


@pytest.mark.parametrize("order", ["dmy", "DDMMYY", "", 1])
def test_an_unknown_date_order_is_a_config_error(order: object) -> None:
    with pytest.raises(ConfigError, match="date_order"):
        check_date_order(order)
    with pytest.raises(ConfigError, match="date_order"):
        parse_when("tomorrow", now=NOW, date_order=order)  # type: ignore[arg-type]


# time zones -----------------------------------------------------------------------------
def test_phrases_are_read_in_the_clocks_time_zone() -> None:
    eastern = NOW.astimezone(timezone(timedelta(hours=-5)))  # 05:00 at UTC-5
    assert when("tomorrow 9am", eastern) == "2031-03-13T14:00:00.000000+00:00"
    assert when("tomorrow", eastern) == "2031-03-13T05:00:00.000000+00:00"
    assert when("end of day", eastern) == "2031-03-13T04:59:59.999999+00:00"
    assert when("3 Dec 2026 14:00", eastern) == "2026-12-03T19:00:00.000000+00:00"
    assert when("2026-12-01T14:00", eastern) == "2026-12-01T19:00:00.000000+00:00"
    # an explicit offset or zone name wins over the clock's zone
    assert when("2026-12-01T14:00+00:00", eastern) == "2026-12-01T14:00:00.000000+00:00"
    assert when("1 Dec 2026 14:00 PST", eastern) == "2026-12-01T22:00:00.000000+00:00"


def test_days_follow_the_wall_clock_and_hours_the_elapsed_time_across_dst() -> None:
    new_york = ZoneInfo("America/New_York")  # clocks go forward at 02:00 on 9 March 2031
    saturday_night = datetime(2031, 3, 8, 22, 0, tzinfo=new_york)  # 03:00 UTC
    assert when("tomorrow 9am", saturday_night) == "2031-03-09T13:00:00.000000+00:00"
    assert when("in 1 day", saturday_night) == "2031-03-10T02:00:00.000000+00:00"
    assert when("in 24 hours", saturday_night) == "2031-03-10T03:00:00.000000+00:00"


def test_the_system_time_zone_plays_no_part() -> None:
    code = ("from datetime import datetime, UTC\n"
            "from ledgermem.clock import iso, parse_when\n"
            "now = datetime(2031, 3, 12, 10, 0, tzinfo=UTC)\n"
            "print([iso(parse_when(t, now=now)) for t in ('tomorrow 9am', 'friday', "
            "'in 2 months and 3 days', 'noon')])\n")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, env={**os.environ, "TZ": zone}).stdout
               for zone in ("UTC", "Asia/Tokyo", "America/Los_Angeles")}
    assert outputs == {"['2031-03-13T09:00:00.000000+00:00', '2031-03-14T00:00:00.000000"
                       "+00:00', '2031-05-15T10:00:00.000000+00:00', "
                       "'2031-03-12T12:00:00.000000+00:00']\n"}


def test_common_forms_do_not_load_the_natural_language_parser() -> None:
    # It costs ~0.2 s to import and ~0.4 s on first use; ISO dates and the phrases read
    # without it must not pay that.
    code = ("import sys\nfrom datetime import datetime, UTC\n"
            "from ledgermem.clock import parse_when\nimport ledgermem\n"
            "now = datetime(2031, 3, 12, 10, 0, tzinfo=UTC)\n"
            "for t in ('2026-12-01', '2026-12-01T14:00:00Z', 'tomorrow', 'in 3 days', "
            "'end of month', 'next week', 'this weekend', '13/5/2026'):\n"
            "    parse_when(t, now=now)\n"
            "print('dateparser' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout == "False\n"


# through Memory ---------------------------------------------------------------------------
def test_memory_date_order_reaches_due_dates_and_filters(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    with Memory.open(tmp_path / "dmy.db", embedder=None, clock=clock,
                     date_order="DMY") as mem:
        alice = mem.for_user("alice")
        item = alice.remember("Renew the passport", "reminder", due_at="5/12/2026")
        assert item.due_at == "2026-12-05T00:00:00.000000+00:00"
        updated = alice.update(item.id, due_at="next friday at 5pm")
        assert updated.due_at == "2031-03-14T17:00:00.000000+00:00"
        assert [hit.id for hit in alice.search("passport", time_from="1/3/2031")] == [
            item.id]
        assert alice.search("passport", time_from="1/4/2031") == []


def test_memory_without_date_order_refuses_an_ambiguous_due_date(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "none.db", embedder=None, clock=FakeClock(NOW)) as mem:
        alice = mem.for_user("alice")
        with pytest.raises(InvalidInput, match=r"ambiguous: 5 Dec or 12 May\?"):
            alice.remember("Renew the passport", "reminder", due_at="5/12/2026")
        assert alice.remember("Renew the passport", "reminder",
                              due_at="13/5/2026").due_at == "2026-05-13T00:00:00.000000+00:00"


def test_memory_refuses_an_unknown_date_order(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="date_order"):
        Memory.open(tmp_path / "bad.db", embedder=None, date_order="DD/MM")
