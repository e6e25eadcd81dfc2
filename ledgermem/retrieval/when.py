"""Time expressions in queries: "last week", "in May 2023", "3 days ago" → a time window.

``find_time_window(query, now)`` finds the dates and relative expressions of a query,
resolves them against a reference time (the searcher's clock, or an ``as_of`` moment)
and returns the window they name, ``[start, end)``, with the spans of the query they
cover. Pure functions, no I/O.

What is understood (case-insensitive):

- days: ``today``, ``yesterday``, ``tonight``, ``this morning``, ``last night``,
  ``8 May 2023``, ``on May 8th, 2023``, ``the 8th of May``, ``2023-05-08``,
  ``3 days ago``, ``last Friday``, ``the day before yesterday``;
- weeks (Monday to Sunday): ``this week``, ``last week``, ``two weeks ago``,
  ``last weekend``, ``this weekend``, ``over the weekend``;
- months: ``May 2023``, ``in May`` (the latest May not after now), ``this month``,
  ``last month``, ``two months ago``;
- years: ``in 2022``, ``this year``, ``last year``, ``4 years ago``;
- seasons (meteorological, northern hemisphere; winter ``YEAR`` starts in December of
  ``YEAR``): ``last summer``, ``this winter``, ``summer 2021``, ``during the summer``;
- rolling spans ending today: ``the past week``, ``in the last 3 days``, ``past two
  months``;
- shifts of any of these: ``the week before 16 November 2023``, ``two days after
  May 8``, ``the Sunday before October 25, 2022``;
- a relation in front: ``since March`` and ``from May 2023`` (open end), ``before
  2022`` and ``after last week`` (open start or end), ``until June``, ``by 2023``,
  ``as of December 2023``;
- two expressions joined as a range: ``between August 11 and August 15 2023``, ``from
  May to July 2023``, ``since March until May``.

A bare month (``May``, ``June``, ``April`` are also words and names) or a bare year
(``2022`` may be a count) counts only after a preposition such as ``in``, ``during`` or
``since``. Anything else — two unrelated expressions, an impossible date (``31
February``), future expressions such as ``next week`` — gives ``None``: no window.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import pairwise

from dateutil.relativedelta import relativedelta

from ..clock import iso

__all__ = ["MAX_QUERY", "TimeWindow", "find_time_window"]

MAX_QUERY = 1000
"""Longer text is not read for time expressions (it is a document, not a question)."""


@dataclass(frozen=True)
class TimeWindow:
    """The time a query refers to: ``start <= t < end``; ``None`` is an open side.

    Attributes:
        start: first moment inside, aware (in the reference time's zone), or None.
        end: first moment after, aware, or None.
        spans: ``(begin, end)`` character offsets of the query's time expressions.
        rest: the query with those expressions taken out.
    """

    start: datetime | None
    end: datetime | None
    spans: tuple[tuple[int, int], ...]
    rest: str

    def contains(self, moment: datetime | str) -> bool:
        """Whether ``moment`` (an aware datetime or an ISO 8601 string) is inside."""
        when = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return (self.start is None or self.start <= when) and (
            self.end is None or when < self.end)

    @property
    def time_from(self) -> str | None:
        """``start`` as a stored timestamp (UTC ISO 8601): an inclusive lower bound."""
        return None if self.start is None else iso(self.start)

    @property
    def time_to(self) -> str | None:
        """The last microsecond before ``end`` as a stored timestamp: an inclusive upper
        bound, as the stores' ``time_to`` filters take it."""
        return None if self.end is None else iso(self.end - timedelta(microseconds=1))


# building blocks ------------------------------------------------------------------------
_MONTH_NAMES = {name.lower(): number for number, name in enumerate(calendar.month_name)
                if name}
_MONTH = (r"(?P<month>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?"
          r"|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b\.?")
_FULL_MONTH = r"(?P<month>" + "|".join(_MONTH_NAMES) + r")\b"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?\b"
_YEAR = r"(?P<year>(?:19|20)\d\d)\b"
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
            "a couple of": 2, "couple of": 2}
_NUM = r"(?P<n>\d{1,3}|a\s+couple\s+of|couple\s+of|an?|one|two|three|four|five|six|seven" \
       r"|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<unit>day|week|month|year)s?\b"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY = r"(?P<wd>" + "|".join(_WEEKDAYS) + r")\b"
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}

Period = tuple[datetime, datetime]


@dataclass(frozen=True)
class _Ref:
    """The reference time, with its local date and zone."""

    now: datetime
    today: date
    zone: tzinfo

    def at(self, day: date, hour: int = 0) -> datetime:
        return datetime.combine(day, time(hour), tzinfo=self.zone)

    def days(self, first: date, after: date) -> Period:
        return self.at(first), self.at(after)


def _number(text: str) -> int:
    words = " ".join(text.lower().split())
    return int(words) if words.isdigit() else _NUMBERS[words]


def _month(text: str) -> int:
    word = text.lower().rstrip(".")
    return next(n for name, n in _MONTH_NAMES.items() if name.startswith(word[:3]))


def _lower_may(match: re.Match[str]) -> bool:
    """"may" in lower case is the verb far more often than the month."""
    return match.group("month") == "may"


def _step(unit: str, count: int) -> relativedelta:
    """``count`` days, weeks, months or years."""
    if unit == "day":
        return relativedelta(days=count)
    if unit == "week":
        return relativedelta(weeks=count)
    if unit == "month":
        return relativedelta(months=count)
    return relativedelta(years=count)


def _week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _month_start(day: date) -> date:
    return day.replace(day=1)


def _latest(month: int, day: int | None, ref: _Ref) -> date | None:
    """The latest ``month``/``day`` (or month start) not after today, within 8 years."""
    for year in range(ref.today.year, ref.today.year - 9, -1):
        try:
            found = date(year, month, day or 1)
        except ValueError:
            continue  # 29 February of a common year
        if found <= ref.today:
            return found
    return None


# resolvers: (match, reference) -> (period, needs a preposition) or None ---------------------
Resolved = tuple[Period, bool] | None


def _full_date(match: re.Match[str], ref: _Ref) -> Resolved:
    month = int(match.group("mon")) if "mon" in match.groupdict() else _month(
        match.group("month"))
    day = date(int(match.group("year")), month, int(match.group("day")))
    return ref.days(day, day + timedelta(days=1)), False


def _day_month(match: re.Match[str], ref: _Ref) -> Resolved:
    day = _latest(_month(match.group("month")), int(match.group("day")), ref)
    if day is None:
        return None
    return ref.days(day, day + timedelta(days=1)), _lower_may(match)


def _month_year(match: re.Match[str], ref: _Ref) -> Resolved:
    first = date(int(match.group("year")), _month(match.group("month")), 1)
    return ref.days(first, first + relativedelta(months=1)), False


def _month_only(match: re.Match[str], ref: _Ref) -> Resolved:
    first = _latest(_month(match.group("month")), None, ref)
    if first is None:
        return None
    return ref.days(first, first + relativedelta(months=1)), True


def _year_only(match: re.Match[str], ref: _Ref) -> Resolved:
    year = int(match.group("year"))
    return ref.days(date(year, 1, 1), date(year + 1, 1, 1)), True


def _season_period(name: str, year: int, ref: _Ref) -> Period:
    first = date(year, _SEASONS[name], 1)
    return ref.days(first, first + relativedelta(months=3))


def _season(match: re.Match[str], ref: _Ref) -> Resolved:
    name, rel, year = match.group("season").lower(), match.group("rel"), match.group("year")
    if year is not None:
        return _season_period(name, int(year), ref), False
    today = ref.at(ref.today)
    years = range(ref.today.year, ref.today.year - 3, -1)
    if rel is None:  # "during the summer": the latest one that has begun
        return next(p for y in years if (p := _season_period(name, y, ref))[0] <= today), True
    if rel.lower() == "this":
        year = ref.today.year - (name == "winter" and ref.today.month <= 2)
        return _season_period(name, year, ref), False
    # last / past / previous: the latest one that is over
    return next(p for y in years if (p := _season_period(name, y, ref))[1] <= today), False


def _day_word(match: re.Match[str], ref: _Ref) -> Resolved:
    word = " ".join(match.group(0).lower().split())
    today = ref.today
    if word == "yesterday":
        return ref.days(today - timedelta(days=1), today), False
    if word == "last night":
        return (ref.at(today - timedelta(days=1), 12), ref.at(today, 6)), False
    return ref.days(today, today + timedelta(days=1)), False


def _weekend(week_start: date, ref: _Ref) -> Period:
    return ref.days(week_start + timedelta(days=5), week_start + timedelta(days=7))


def _this_or_last(match: re.Match[str], ref: _Ref) -> Resolved:
    rel = " ".join(match.group("rel").lower().split())
    unit, today = match.group("unit").lower(), ref.today
    week = _week_start(today)
    if unit == "weekend":
        return _weekend(week if rel in ("this", "current") else week - timedelta(days=7),
                        ref), False
    if rel in ("past", "this past"):
        return _rolling(1, unit, ref), False
    back = 0 if rel in ("this", "current") else 1
    if unit == "week":
        first = week - timedelta(weeks=back)
        return ref.days(first, first + timedelta(weeks=1)), False
    if unit == "month":
        first = _month_start(today) - relativedelta(months=back)
        return ref.days(first, first + relativedelta(months=1)), False
    year = today.year - back
    return ref.days(date(year, 1, 1), date(year + 1, 1, 1)), False


def _the_weekend(match: re.Match[str], ref: _Ref) -> Resolved:
    week = _week_start(ref.today)
    started = ref.today.weekday() >= 5
    return _weekend(week if started else week - timedelta(days=7), ref), True


def _rolling(count: int, unit: str, ref: _Ref) -> Period:
    """``count`` units ending with today."""
    after = ref.today + timedelta(days=1)
    return ref.days(after - _step(unit, count), after)


def _past_n(match: re.Match[str], ref: _Ref) -> Resolved:
    unit = match.group("unit").lower()
    count = _number(match.group("n")) if match.group("n") else 1
    return _rolling(count, unit, ref), False


def _ago(match: re.Match[str], ref: _Ref) -> Resolved:
    count, unit = _number(match.group("n")), match.group("unit").lower()
    then = ref.today - _step(unit, count)
    if unit == "day":
        return ref.days(then, then + timedelta(days=1)), False
    if unit == "week":
        first = _week_start(then)
        return ref.days(first, first + timedelta(weeks=1)), False
    if unit == "month":
        first = _month_start(then)
        return ref.days(first, first + relativedelta(months=1)), False
    return ref.days(date(then.year, 1, 1), date(then.year + 1, 1, 1)), False


def _last_weekday(match: re.Match[str], ref: _Ref) -> Resolved:
    wanted = _WEEKDAYS.index(match.group("wd").lower())
    day = ref.today - timedelta(days=(ref.today.weekday() - wanted) % 7 or 7)
    return ref.days(day, day + timedelta(days=1)), False


_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str], _Ref], Resolved]], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), resolve) for pattern, resolve in (
        (rf"\b(?:the\s+)?{_DAY}(?:\s+of)?\s+{_MONTH},?\s*{_YEAR}", _full_date),
        (rf"\b{_MONTH}\s+(?:the\s+)?{_DAY},?\s*{_YEAR}", _full_date),
        (r"\b(?P<year>(?:19|20)\d\d)(?P<sep>[-/])(?P<mon>[01]\d)(?P=sep)(?P<day>[0-3]\d)\b",
         _full_date),
        (rf"\b(?:the\s+)?{_DAY}(?:\s+of)?\s+{_MONTH}", _day_month),
        (rf"\b{_MONTH}\s+(?:the\s+)?{_DAY}", _day_month),
        (rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}", _month_year),
        (rf"\b{_FULL_MONTH}", _month_only),
        (rf"\b(?:the\s+year\s+)?{_YEAR}", _year_only),
        (r"\b(?:(?P<rel>this\s+past|last|this|past|previous)\s+)?(?:the\s+)?"
         r"(?P<season>spring|summer|autumn|fall|winter)\b(?:\s+(?:of\s+)?"
         r"(?P<year>(?:19|20)\d\d)\b)?", _season),
        (r"\b(?:(?:earlier|later)\s+)?today\b|\byesterday\b|\btonight\b"
         r"|\bthis\s+(?:morning|afternoon|evening)\b|\blast\s+night\b", _day_word),
        (r"\b(?:(?:earlier|later)\s+)?(?P<rel>this\s+past|this|last|past|previous|current)"
         r"\s+(?P<unit>week|month|year|weekend)\b", _this_or_last),
        (r"\bthe\s+weekend\b", _the_weekend),
        (rf"\b(?:the\s+)?(?:last|past|previous)\s+(?:{_NUM}\s+)?{_UNIT}", _past_n),
        (rf"\b{_NUM}\s+{_UNIT}\s+ago\b", _ago),
        (rf"\b(?:last|this\s+past|past)\s+{_WEEKDAY}", _last_weekday),
    ))

# What may stand in front of an expression, read backwards from its first character.
_SHIFT = re.compile(
    rf"(?:\bthe\s+)?(?:\b{_NUM}\s+)?\b(?P<unit>day|week|month|year|weekend)s?\s+"
    r"(?P<dir>before|after)\s+$|(?:\bthe\s+)?\b" + _WEEKDAY + r"\s+(?P<wddir>before|after)\s+$",
    re.IGNORECASE)
_RELATION = re.compile(
    r"\b(?P<prep>in|during|throughout|over|within|between|on|at|since|from|after|before"
    r"|until|till|by|through|prior\s+to|as\s+of)\s+$", re.IGNORECASE)
_WEAK = frozenset({"on", "at"})
"""Prepositions that do not make a bare month or year a date ("on May", "at 2022")."""
_OPEN_END = {"since": "start", "from": "start", "after": "end"}
_OPEN_START = {"before": "start", "prior to": "start", "until": "end", "till": "end",
               "by": "end", "through": "end", "as of": "end"}
_CONNECTORS = frozenset({"", "and", "to", "until", "till", "through", "thru", "or", "-", "–",
                         "—"})


@dataclass(frozen=True)
class _Found:
    begin: int
    end: int
    period: Period
    prep: str | None


def find_time_window(query: str, now: datetime) -> TimeWindow | None:
    """The time window ``query`` names, resolved against ``now``; None when it names none,
    or names it ambiguously.

    Days start at midnight and weeks on Monday in ``now``'s time zone (naive ``now`` is
    taken as UTC).

    >>> from datetime import datetime, UTC
    >>> w = find_time_window("what did I do last week?", datetime(2024, 3, 14, tzinfo=UTC))
    >>> w.start.date(), w.end.date(), w.rest
    (datetime.date(2024, 3, 4), datetime.date(2024, 3, 11), 'what did I do?')
    """
    if not query or len(query) > MAX_QUERY:
        return None
    zone = now.tzinfo or UTC
    now = now.replace(tzinfo=zone)
    expressions = _expressions(query, _Ref(now=now, today=now.date(), zone=zone))
    found = _extend(query, expressions or [])
    if not found:
        return None
    window = _window(query, found)
    if window is None:
        return None
    start, end, spans = window
    return TimeWindow(start=start, end=end, spans=spans, rest=_without(query, spans))


def _expressions(text: str, ref: _Ref) -> list[tuple[int, int, Period, bool]] | None:
    """Non-overlapping expressions, longest first, then in text order; None when the
    text holds an impossible date ("31 February 2023"), which no shorter reading of the
    same words may replace."""
    candidates: list[tuple[int, int, Period | None, bool]] = []
    for pattern, resolve in _PATTERNS:
        for match in pattern.finditer(text):
            try:
                resolved = resolve(match, ref)
            except (ValueError, OverflowError, StopIteration):
                resolved = None  # an impossible date, or one out of datetime's range
            period, needs_relation = resolved if resolved is not None else (None, False)
            candidates.append((match.start(), match.end(), period, needs_relation))
    candidates.sort(key=lambda c: (c[0] - c[1], c[0]))
    chosen: list[tuple[int, int, Period, bool]] = []
    for begin, end, period, needs_relation in candidates:
        if all(end <= c[0] or c[1] <= begin for c in chosen):
            if period is None:
                return None
            chosen.append((begin, end, period, needs_relation))
    return sorted(chosen, key=lambda c: c[0])


def _extend(text: str, expressions: list[tuple[int, int, Period, bool]]) -> list[_Found]:
    """Take in the shift ("the week before") and relation ("since") in front of each
    expression; drop bare months and years that have no relation in front."""
    found: list[_Found] = []
    for begin, end, period, needs_relation in expressions:
        floor = found[-1].end if found else 0
        shifted = False
        shift = _SHIFT.search(text, floor, begin)
        if shift is not None:
            try:
                period = _shift(shift, period)
            except (ValueError, OverflowError):
                continue
            begin, shifted = shift.start(), True
        relation = _RELATION.search(text, floor, begin)
        prep = None
        if relation is not None:
            prep = " ".join(relation.group("prep").lower().split())
            begin = relation.start()
        joined = bool(found) and text[floor:begin].strip(" \t\n,").lower() in _CONNECTORS - {""}
        if needs_relation and not shifted and not joined and (prep is None or prep in _WEAK):
            continue  # "May" and "2022" alone are words and numbers, not dates
        found.append(_Found(begin=begin, end=end, period=period, prep=prep))
    return found


def _shift(match: re.Match[str], period: Period) -> Period:
    start, end = period
    if match.group("wd") is not None:
        wanted = _WEEKDAYS.index(match.group("wd").lower())
        if match.group("wddir").lower() == "before":
            day = start - timedelta(days=(start.weekday() - wanted) % 7 or 7)
        else:
            day = end + timedelta(days=(wanted - end.weekday()) % 7)
        return day, day + timedelta(days=1)
    count = _number(match.group("n")) if match.group("n") else 1
    unit = match.group("unit").lower()
    if unit == "weekend":  # the latest whole Saturday–Sunday before, or the first after
        if match.group("dir").lower() == "before":
            saturday = start - timedelta(days=(start.weekday() - 5) % 7 or 7)
            if saturday + timedelta(days=2) > start:
                saturday -= timedelta(weeks=1)
        else:
            saturday = end + timedelta(days=(5 - end.weekday()) % 7)
        saturday += timedelta(weeks=(count - 1) * (1 if match.group("dir").lower() == "after"
                                                   else -1))
        return saturday, saturday + timedelta(days=2)
    step = _step(unit, 1)
    if match.group("dir").lower() == "before":
        return start - step * count, start - step * (count - 1)
    return end + step * (count - 1), end + step * count


def _window(text: str, found: list[_Found]
            ) -> tuple[datetime | None, datetime | None, tuple[tuple[int, int], ...]] | None:
    """One expression: its window. Several: the range they span when each is joined to
    the next ("between X and Y", "since X until Y") and they run forwards in time, or the
    window they all agree on; else None."""
    if len(found) == 1:
        return (*_related(found[0]), ((found[0].begin, found[0].end),))
    for before, after in pairwise(found):
        gap = text[before.end:after.begin].strip(" \t\n,").lower()
        ranged = gap in _CONNECTORS and (
            gap != "" or (before.prep in ("since", "from", "between", "after")
                          and after.prep in ("until", "till", "through", "by", "before")))
        backwards = gap not in ("and", "or") and after.period[1] <= before.period[0]
        if not ranged or backwards:
            windows = {_related(f) for f in found}
            spans = tuple((f.begin, f.end) for f in found)
            return (*windows.pop(), spans) if len(windows) == 1 else None
    return (min(f.period[0] for f in found), max(f.period[1] for f in found),
            ((found[0].begin, found[-1].end),))


def _related(found: _Found) -> tuple[datetime | None, datetime | None]:
    start, end = found.period
    if found.prep in _OPEN_END:
        return (start if _OPEN_END[found.prep] == "start" else end), None
    if found.prep in _OPEN_START:
        return None, (start if _OPEN_START[found.prep] == "start" else end)
    return start, end


def _without(text: str, spans: tuple[tuple[int, int], ...]) -> str:
    parts, last = [], 0
    for begin, end in spans:
        parts.append(text[last:begin])
        last = end
    parts.append(text[last:])
    joined = " ".join(" ".join(parts).split())
    return re.sub(r"\s+([?.!,;:])", r"\1", joined)
