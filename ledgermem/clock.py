"""Time: the injectable clock, ISO 8601 formatting and parsing of user-given dates.

Every timestamp ledgermem stores is UTC ISO 8601 with an explicit offset
(``2026-11-23T10:53:17.123456+00:00``), so timestamps sort correctly as text on
every backend.
"""

from __future__ import annotations

import calendar
import os
import re
import secrets
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from time import time_ns
from typing import Any, Literal

from dateutil.relativedelta import relativedelta

from .errors import ConfigError, InvalidInput

__all__ = ["DATE_ORDERS", "FIRST_MOMENT", "LAST_MOMENT", "Clock", "DateOrder",
           "check_date_order", "iso", "later", "new_id", "parse_when", "system_clock"]

Clock = Callable[[], datetime]
"""A zero-argument callable returning an aware ``datetime`` (inject one in tests)."""


def system_clock() -> datetime:
    """The real time, in UTC."""
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """Format an aware datetime as UTC ISO 8601 with microseconds, sortable as text."""
    if moment.tzinfo is None:
        raise InvalidInput(f"datetime {moment!r} has no timezone")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


FIRST_MOMENT = datetime.min.replace(tzinfo=UTC)
"""The first moment a datetime can hold: ``later`` stops here before year 1."""
LAST_MOMENT = datetime.max.replace(tzinfo=UTC)
"""The last moment a datetime can hold: ``later`` stops here past year 9999. As text
(``iso``) it sorts after every timestamp a store holds."""


def later(moment: datetime, span: timedelta) -> datetime:
    """``moment + span`` in UTC, held at the calendar's ends: ``LAST_MOMENT`` when it
    lies past year 9999, ``FIRST_MOMENT`` before year 1. The span is added in
    ``moment``'s own zone, so whole days keep the time of day.

    Example:
        >>> later(datetime(9999, 12, 28, tzinfo=UTC), timedelta(days=7)) == LAST_MOMENT
        True

    Raises:
        InvalidInput: ``moment`` has no time zone.
    """
    if moment.tzinfo is None:
        raise InvalidInput(f"datetime {moment!r} has no timezone")
    try:
        end = moment + span
    except OverflowError:  # off the calendar in moment's own zone
        return LAST_MOMENT if span >= timedelta(0) else FIRST_MOMENT
    try:
        return end.astimezone(UTC)
    except OverflowError:  # on the calendar in its zone, hours off it in UTC
        return LAST_MOMENT if end.year == LAST_MOMENT.year else FIRST_MOMENT


DateOrder = Literal["DMY", "MDY", "YMD"]
"""How a numeric date such as ``5/12/2026`` is read: day first, month first or year
first. ``None`` (the default) reads only what cannot be taken two ways."""

DATE_ORDERS: tuple[DateOrder, ...] = ("DMY", "MDY", "YMD")


def check_date_order(value: object) -> DateOrder | None:
    """``value`` as a ``date_order`` setting: ``"DMY"``, ``"MDY"``, ``"YMD"`` or None.

    Raises:
        ConfigError: any other value.
    """
    if value is None:
        return None
    for order in DATE_ORDERS:
        if value == order:
            return order
    raise ConfigError(f"unknown date_order {value!r}; expected 'DMY', 'MDY', 'YMD' or None")


def parse_when(value: str | datetime | date, *, now: datetime | None = None,
               date_order: DateOrder | None = None) -> datetime:
    """Parse a date or time as people write it into an aware UTC datetime.

    Accepts datetimes (naive ones are taken as UTC), dates (midnight UTC), ISO 8601
    strings, and English text, with relative phrases resolved against ``now``:

    - dates and times: ``2026-12-01``, ``3 Dec 2026 14:00``, ``Dec 3``, ``May 8, 2023
      2pm``, ``1 Dec 2026 14:00 PST``, ``noon``, ``5pm``, ``tonight``;
    - days: ``today``, ``tomorrow 9am``, ``friday``, ``next tuesday``, ``next friday at
      5pm``, ``the day after tomorrow``;
    - counts from now (the time of day is kept): ``in 3 days``, ``in two weeks``, ``2
      hours from now``, ``3 days ago``;
    - periods, weeks running Monday to Sunday: ``this week``, ``next week``, ``next
      month`` and ``last year`` mean the period's first moment, ``end of week``, ``end
      of the month`` and ``eod`` its last; ``this weekend`` is its Saturday;
    - numeric dates (``5/12/2026``, ``12.5.2026``, ``5-12``) in the order ``date_order``
      names; with None, one that reads two ways is refused rather than guessed
      (``13/5/2026`` reads one way only). A four-digit year first is always Y-M-D.

    A day without a year, a weekday or a time of day means the next one after ``now``;
    a phrase that names a day but no time means midnight. Text without an offset or a
    zone name is read in ``now``'s time zone.

    Args:
        value: what to read.
        now: the reference time for relative phrases (the injected clock); an aware
            datetime. Defaults to the system clock.
        date_order: how numeric dates are read (``DateOrder``); None refuses ambiguous ones.

    Nothing is guessed: an ISO 8601 form that is no real date (``2026-13-01T00:00``) and
    a time of day that is none or cannot be read (``tomorrow at 13pm``, ``25:00``) are
    refused, not read as another date or as midnight. So is a moment within a day of
    year 1 or 9999 (``EARLIEST``, ``LATEST``), which some time zones cannot show.

    Raises:
        InvalidInput: the value cannot be understood as a point in time, or it is a
            numeric date that reads two ways and ``date_order`` does not say which,
            or it lies outside ``EARLIEST`` … ``LATEST``.
        ConfigError: ``date_order`` is not one of ``DATE_ORDERS`` or None.
    """
    order = check_date_order(date_order)
    return _shown_everywhere(_parse(value, now, order), value)


EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
"""The first moment ``parse_when`` gives: every UTC offset (under a day) can show it."""
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
"""The last moment ``parse_when`` gives: every UTC offset (under a day) can show it."""


def _shown_everywhere(moment: datetime, value: str | datetime | date) -> datetime:
    """``moment``, refused when a time zone could not show it: within a day of year 1
    or 9999 an offset moves it off the calendar, and showing it (a reminder in the
    user's zone) would raise OverflowError on every turn."""
    if EARLIEST <= moment <= LATEST:
        return moment
    where = f"cannot read a date from {value!r}" if isinstance(value, str) \
        else value.isoformat()
    raise InvalidInput(f"{where}: within a day of the calendar's ends (years 1 and 9999) "
                       "some time zones cannot show it; give a date from "
                       f"{EARLIEST.date().isoformat()} to {LATEST.date().isoformat()} (UTC)")


def _parse(value: str | datetime | date, now: datetime | None,
           order: DateOrder | None) -> datetime:
    if isinstance(value, datetime):
        try:
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError as exc:  # an offset that moves it past year 1 or 9999
            raise InvalidInput(f"{value.isoformat()} is outside the years 1–9999 in UTC"
                               ) from exc
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"cannot read a date from {value!r}")
    base = now or system_clock()
    if base.tzinfo is None:
        base = base.replace(tzinfo=UTC)
    try:
        return _read(" ".join(value.split()), base, order).astimezone(UTC)
    except InvalidInput:
        raise
    except (ValueError, OverflowError) as exc:  # a date past year 9999, a bad field
        raise InvalidInput(f"cannot read a date from {value!r}") from exc


_ISO = re.compile(r"\d{4}-\d\d-\d\d")
_ISO_FORM = re.compile(r"\d{4}-\d\d-\d\d(?:[Tt ]\d\d[\d:.,]*(?:[Zz]|[+-]\d\d[\d:.,]*)?)?")
"""A date, time and offset written the ISO 8601 way: only ``fromisoformat`` reads it.
The natural-language parser would swap a month past 12 with the day."""


def _read(text: str, now: datetime, order: DateOrder | None) -> datetime:
    if _ISO.match(text):
        try:
            return _in_zone(datetime.fromisoformat(text), now)
        except ValueError as exc:
            if _ISO_FORM.fullmatch(text):  # "2026-13-01T00:00", not "2026-12-01 5pm"
                why = str(exc) if "isoformat" not in str(exc) else "not ISO 8601"
                raise InvalidInput(f"cannot read a date from {text!r}: {why}") from exc
    if text.isdigit():
        raise InvalidInput(f"cannot read a date from {text!r}: a bare number is not a date")
    phrase = _phrase(text.lower(), now)
    if phrase is not None:
        return phrase
    whole = _NUMERIC.fullmatch(text)
    if whole and whole.group("c"):
        day = _numeric_date(whole, text, order)
        if isinstance(day, date):
            return datetime.combine(day, time(), tzinfo=now.tzinfo)
    return _natural(_NUMERIC.sub(lambda m: _numeric_text(m, text, order), text), text, now,
                    order)


def _in_zone(moment: datetime, now: datetime) -> datetime:
    """A naive wall time is in ``now``'s zone."""
    return moment.replace(tzinfo=now.tzinfo) if moment.tzinfo is None else moment


# phrases read here, without the natural-language parser -------------------------------
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
                 "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
                 "twelve": 12}
_N = r"(?P<n>\d{1,4}|" + "|".join(_NUMBER_WORDS) + ")"
_UNIT = r"(?P<unit>minute|hour|day|week|month|year)s?"
_COUNT = re.compile(rf"^(?P<in>in )?{_N} {_UNIT}(?: (?P<dir>from now|from today|later|ago))?$")
_PERIOD = re.compile(r"^(?:(?:the )?(?P<edge>start|beginning|end) of (?:the )?)?"
                     r"(?:(?P<which>this|next|last) )?(?P<unit>day|week|month|year)$")
_ABBREVIATIONS = {"eod": "end of day", "eow": "end of week", "eom": "end of month",
                  "eoy": "end of year"}
_WEEKEND = re.compile(r"^(?:(?P<which>this|next|last|the) )?weekend$")
_DAYS = {"today": 0, "tomorrow": 1, "yesterday": -1}
_SHIFTS = {None: 0, "this": 0, "the": 0, "next": 1, "last": -1}


def _phrase(text: str, now: datetime) -> datetime | None:
    """The phrases whose meaning is ledgermem's to choose, or that the parser gets wrong."""
    text = text.removeprefix("by ")  # "by friday" is when it is due
    text = _ABBREVIATIONS.get(text, text)
    if text == "now":
        return now
    if text in _DAYS:
        return _first_moment(now, "day", _DAYS[text])
    match = _COUNT.match(text)
    if match and (match.group("in") is None) != (match.group("dir") is None):
        n = match.group("n") or ""
        amount = int(n) if n.isdigit() else _NUMBER_WORDS[n]
        if match.group("dir") == "ago":
            amount = -amount
        unit = match.group("unit")
        if unit in ("minute", "hour"):  # elapsed time: across a DST change too
            return now.astimezone(UTC) + timedelta(**{unit + "s": amount})
        if unit in ("month", "year"):  # the same day of the month and time of day
            return now + relativedelta(months=amount * (12 if unit == "year" else 1))
        return now + timedelta(days=amount * (7 if unit == "week" else 1))
    match = _PERIOD.match(text)
    if match and (match.group("edge") or match.group("which")):
        unit, shift = match.group("unit"), _SHIFTS[match.group("which")]
        if match.group("edge") == "end":
            return _first_moment(now, unit, shift + 1) - timedelta(microseconds=1)
        return _first_moment(now, unit, shift)
    match = _WEEKEND.match(text)
    if match:
        return _first_moment(now, "week", _SHIFTS[match.group("which")]) + timedelta(days=5)
    return None


def _first_moment(now: datetime, unit: str, shift: int) -> datetime:
    """Midnight starting the day, week (Monday), month or year ``shift`` units from now's."""
    today = now.date()
    if unit == "day":
        first = today + timedelta(days=shift)
    elif unit == "week":
        first = today - timedelta(days=today.weekday()) + timedelta(weeks=shift)
    elif unit == "month":
        first = today.replace(day=1) + relativedelta(months=shift)
    else:
        first = date(today.year + shift, 1, 1)
    return datetime.combine(first, time(), tzinfo=now.tzinfo)


# numeric dates --------------------------------------------------------------------------
_NUMERIC = re.compile(r"(?<![\w/.:-])(?P<a>\d{1,4})(?P<sep>[/.\- ])(?P<b>\d{1,2})"
                      r"(?:(?P=sep)(?P<c>\d{1,4}))?(?![\w/:-]|\.\d)")


def _numeric_text(match: re.Match[str], text: str, order: DateOrder | None) -> str:
    """A numeric date in ``text`` written out ("12 May 2026"), or left as it is."""
    day = _numeric_date(match, text, order)
    if day is None:
        return match.group(0)
    if isinstance(day, date):
        return f"{day.day} {calendar.month_name[day.month]} {day.year}"
    return f"{day[1]} {calendar.month_name[day[0]]}"


def _numeric_date(match: re.Match[str], text: str,
                  order: DateOrder | None) -> date | tuple[int, int] | None:
    """The date a numeric form names: a date, (month, day) when it has no year, or None
    when the form is not a date this reads (``2026/12``, ``1.5`` inside a phrase).

    Raises:
        InvalidInput: no reading is a real date, or two are and ``order`` picks none.
    """
    a, sep, b, c = match.group("a", "sep", "b", "c")
    if sep in ". " and c is None and match.group(0) != text:
        return None  # "in 1.5 hours"
    if sep == " " and c is not None and len(c) != 4:
        return None
    readings = _readings(a, b, c, order)
    if not readings:
        return None
    valid = {name: reading for name, reading in readings.items() if _is_date(reading)}
    if not valid:
        raise InvalidInput(f"cannot read a date from {text!r}: {match.group(0)!r} is no "
                           "day and month in any order")
    chosen = valid.get(order) if order else None
    if chosen is None:
        if len(set(valid.values())) > 1:
            raise InvalidInput(_ambiguous(text, valid))
        chosen = next(iter(valid.values()))
    year, month, day = chosen
    return (month, day) if year is None else date(year, month, day)


def _readings(a: str, b: str, c: str | None,
              order: DateOrder | None) -> dict[str, tuple[int | None, int, int]]:
    """Each order's (year, month, day) for the parts ``a``, ``b`` and ``c``."""
    if len(a) == 4:  # a four-digit year first is always Y-M-D
        return {"YMD": (int(a), int(b), int(c))} if c is not None and len(c) <= 2 else {}
    readings: dict[str, tuple[int | None, int, int]] = {}
    if len(a) <= 2 and (c is None or len(c) in (2, 4)):
        year = None if c is None else _full_year(c)
        readings["DMY"] = (year, int(b), int(a))
        readings["MDY"] = (year, int(a), int(b))
    if len(a) <= 2 and c is not None and len(c) <= 2 and order == "YMD":
        readings["YMD"] = (_full_year(a), int(b), int(c))  # "26/12/05"
    return readings


def _full_year(digits: str) -> int:
    """A two-digit year as POSIX reads it: 69-99 are 1969-1999, 00-68 are 2000-2068."""
    year = int(digits)
    if len(digits) > 2:
        return year
    return year + (1900 if year >= 69 else 2000)


def _is_date(reading: tuple[int | None, int, int]) -> bool:
    year, month, day = reading
    try:
        date(2000 if year is None else year, month, day)  # 2000: 29 Feb is a day
    except ValueError:
        return False
    return True


def _ambiguous(text: str, valid: dict[str, tuple[int | None, int, int]]) -> str:
    years = {year for year, _, _ in valid.values()}
    names = []
    for year, month, day in valid.values():
        name = f"{day} {calendar.month_abbr[month]}"
        names.append(name if len(years) == 1 else f"{name} {year}")
    orders = " or ".join(f"'{name}'" for name in valid)
    return (f"ambiguous: {' or '.join(names)}? set date_order ({orders}), or write the "
            f"date as YYYY-MM-DD (in {text!r})")


# everything else: a natural-language date parser ------------------------------------------
_COUNTED = re.compile(r"^in\b|\bago\b|\bfrom (?:now|today)\b|\blater\b|\bhence\b")
_ZONE_NAME = re.compile(r"\b[A-Z]{2,5}$")


def _natural(text: str, original: str, now: datetime, order: DateOrder | None) -> datetime:
    # Imported here: it takes ~0.2 s to import and ~0.4 s to load its English data on
    # first use, which most programs (ISO dates, "tomorrow", "in 3 days") never need.
    from dateparser.date import DateDataParser

    settings: dict[str, Any] = {
        "RELATIVE_BASE": now.replace(tzinfo=None),  # wall time in now's zone
        "TIMEZONE": "UTC",  # never the machine's zone: naive stays naive, read below
        "PREFER_DATES_FROM": "future", "PREFER_DAY_OF_MONTH": "first",
        "RETURN_TIME_AS_PERIOD": True, "PARSERS": ["relative-time", "absolute-time"]}
    if order:
        settings["DATE_ORDER"] = order
    data = DateDataParser(languages=["en"], settings=settings).get_date_data(text)
    if data.date_obj is None:
        hint = ("; for a time zone give an offset such as -08:00 or +01:00"
                if _ZONE_NAME.search(original) else "")
        raise InvalidInput(f"cannot read a date from {original!r}{hint}")
    _check_times_of_day(text, original, data.period)
    moment = data.date_obj
    if data.period in ("day", "week", "month", "year") and not _COUNTED.search(text.lower()):
        moment = moment.replace(hour=0, minute=0, second=0, microsecond=0)  # a day: midnight
    return _in_zone(moment, now)


def _check_times_of_day(text: str, original: str, period: str | None) -> None:
    """Refuse a time of day that is no time (``13pm``, ``25:00``) or that the parser
    left out: it skips words it cannot read, so ``tomorrow at 13pm`` would silently be
    tomorrow at midnight.

    Raises:
        InvalidInput: such a time, in the message's usual words.
    """
    for match in _TIME_OF_DAY.finditer(text):
        if period != "time" or not _is_time_of_day(match):
            raise InvalidInput(f"cannot read a date from {original!r}: "
                               f"{match.group(0).strip()!r} is no time of day it can read "
                               "(write 5pm, 17:00 or 17:30)")


_TIME_OF_DAY = re.compile(
    r"(?<![\w:.+-])(?:(?P<h>\d{1,3}):(?P<m>\d{1,3})(?::(?P<s>\d{1,3}))?(?:[.,]\d+)?"
    r"|(?P<dot_h>\d{1,3})\.(?P<dot_m>\d\d)(?=\s*[ap]\.?m\b)"
    r"|(?P<half_h>\d{1,3})(?=\s*[ap]\.?m\b)|\bat (?P<at_h>\d{1,3})\b(?![:.]\d)"
    r"(?!(?:st|nd|rd|th)\b|\s+(?:of\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov"
    r"|dec)))(?:\s*(?P<half>[ap])\.?m\b\.?)?", re.IGNORECASE)
"""A time of day as people write it: ``17:30``, ``5pm``, ``9.30am``, ``at 5`` (not the
day in ``at 3 May``)."""


def _is_time_of_day(match: re.Match[str]) -> bool:
    hour = int(match.group("h") or match.group("dot_h") or match.group("half_h")
               or match.group("at_h"))
    minute = int(match.group("m") or match.group("dot_m") or 0)
    second = int(match.group("s") or 0)
    hours = range(1, 13) if match.group("half") else range(24)
    return hour in hours and minute < 60 and second < 60


_id_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_id() -> str:
    """A UUIDv7: time-ordered, unique across processes, monotonic within this process.

    The 12-bit ``rand_a`` field is a counter within one millisecond, so ids made in
    the same millisecond by one process still sort in creation order.
    """
    global _last_ms, _counter
    with _id_lock:
        ms = time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = secrets.randbelow(0x400)
        rand_a = _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))
