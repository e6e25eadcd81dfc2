"""Time: the injectable clock, ISO 8601 formatting and parsing of user-given dates.

Every timestamp ledgermem stores is UTC ISO 8601 with an explicit offset
(``2026-11-23T10:53:17.123456+00:00``), so timestamps sort correctly as text on
every backend.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from dateutil import parser as date_parser

from .errors import InvalidInput

__all__ = ["Clock", "iso", "new_id", "parse_when", "system_clock"]

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


def parse_when(value: str | datetime | date, *, now: datetime | None = None) -> datetime:
    """Parse a date or time in any common form into an aware UTC datetime.

    Accepts datetimes (naive ones are taken as UTC), dates (midnight UTC), ISO 8601
    strings, common written forms ("8 May 2023", "2023-05-08 14:00", "May 8, 2023 2pm")
    and the relative words ``today``, ``tomorrow``, ``yesterday`` and ``in N days``.

    Raises:
        InvalidInput: the value cannot be understood as a point in time.
    """
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"cannot read a date from {value!r}")
    text = value.strip()
    base = now or system_clock()
    relative = _relative(text.lower(), base)
    if relative is not None:
        return relative
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", date_parser.UnknownTimezoneWarning)
            parsed = date_parser.parse(text, default=datetime(base.year, base.month, base.day))
    except date_parser.UnknownTimezoneWarning as exc:
        raise InvalidInput(f"unknown time zone in {value!r}; give an offset such as "
                           "-08:00 or +01:00") from exc
    except (ValueError, OverflowError) as exc:
        raise InvalidInput(f"cannot read a date from {value!r}") from exc
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


_IN_N = re.compile(r"^in (\d{1,4}) (minute|hour|day|week)s?$")


def _relative(text: str, now: datetime) -> datetime | None:
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    fixed = {"now": now, "today": midnight, "tomorrow": midnight + timedelta(days=1),
             "yesterday": midnight - timedelta(days=1)}
    if text in fixed:
        return fixed[text].astimezone(UTC)
    match = _IN_N.match(text)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        return (now + timedelta(**{unit + "s": amount})).astimezone(UTC)
    return None


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
        ms = time.time_ns() // 1_000_000
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
