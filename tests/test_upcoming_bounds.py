"""``upcoming`` at the calendar's end and with spans that are no span, on every surface:
a clock days before year 10000 still looks ahead (the horizon stops at the last moment
a date can hold), and a ``days`` that is negative, not finite, not a number or too
large is refused as bad input (Python: ``InvalidInput``; CLI: exit code 2 on one line;
REST: 422 with the JSON error body), never an OverflowError, a traceback or a 500."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledgermem import InvalidInput, Memory
from ledgermem.cli import main
from ledgermem.clock import FIRST_MOMENT, LAST_MOMENT, iso, later
from tests.server_support import app_over
from tests.support import FakeClock, assert_one_line

NEAR_THE_END = datetime(9999, 12, 27, 12, tzinfo=UTC)
"""Three days and a half before the last day ``parse_when`` takes (9999-12-30)."""
DUE = "9999-12-29T09:00:00+00:00"
BAD_DAYS: list[Any] = [-1, -0.5, float("nan"), float("inf"), -float("inf"), True, False,
                       100_001, 1e300, 10**400, "7", None]


@pytest.fixture
def end_clock(clock: FakeClock) -> FakeClock:
    clock.now = NEAR_THE_END
    return clock


def test_later_holds_at_the_calendars_ends() -> None:
    assert later(NEAR_THE_END, timedelta(days=1)) == NEAR_THE_END + timedelta(days=1)
    assert later(NEAR_THE_END, timedelta(days=7)) == LAST_MOMENT
    assert later(NEAR_THE_END, timedelta(days=-7)) == NEAR_THE_END - timedelta(days=7)
    assert later(datetime(1, 1, 3, tzinfo=UTC), timedelta(days=-7)) == FIRST_MOMENT
    assert iso(LAST_MOMENT) == "9999-12-31T23:59:59.999999+00:00"
    # On the calendar in its own zone, past its end in UTC.
    behind = datetime(9999, 12, 31, 20, tzinfo=timezone(timedelta(hours=-5)))
    assert later(behind, timedelta(0)) == LAST_MOMENT
    with pytest.raises(InvalidInput):
        later(datetime(2026, 1, 1), timedelta(days=1))  # no time zone


def test_upcoming_near_the_end_of_the_calendar(mem: Memory, end_clock: FakeClock) -> None:
    alice = mem.for_user("alice")
    due = alice.remember("Renew the passport", due_at=DUE)
    alice.remember("No date on this one")
    for days in (0, 1, 7, 100_000):
        found = [item.id for item in alice.upcoming(days)]
        assert found == ([due.id] if days >= 2 else []), days
    end_clock.now = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)  # later than any due date
    assert [item.id for item in alice.upcoming(7)] == [due.id]  # overdue


@pytest.mark.parametrize("days", BAD_DAYS, ids=repr)
def test_upcoming_refuses_days_that_are_no_span(mem: Memory, days: Any) -> None:
    with pytest.raises(InvalidInput, match="days must be a number"):
        mem.for_user("alice").upcoming(days)


# the CLI ----------------------------------------------------------------------------------
@pytest.fixture
def near_end_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store with one item due near the end of the calendar, opened by the CLI with
    its clock there too (the CLI reads the system clock: ``Memory``'s default)."""
    path = str(tmp_path / "m.db")
    with Memory.open(path, embedder=None, clock=FakeClock(NEAR_THE_END)) as memory:
        memory.for_user("local").remember("Renew the passport", due_at=DUE)
    defaults = Memory.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "clock", FakeClock(NEAR_THE_END))
    return path


@pytest.mark.sqlite_only  # the CLI's own database file; the library runs on both above
def test_the_cli_lists_upcoming_items_near_the_end_of_the_calendar(near_end_db: str) -> None:
    for days in ("7", "100000"):
        result = CliRunner().invoke(main, ["--db", near_end_db, "--json", "upcoming",
                                           "--days", days])
        assert result.exit_code == 0, result.output
        found = json.loads(result.stdout)
        assert [item["content"] for item in found] == ["Renew the passport"]
    table = CliRunner().invoke(main, ["--db", near_end_db, "upcoming"])
    assert table.exit_code == 0 and found[0]["id"] in table.stdout, table.output


@pytest.mark.sqlite_only
@pytest.mark.parametrize("days", ["-1", "nan", "inf", "-inf", "100001", "1e300", "seven",
                                  ""])
def test_the_cli_refuses_days_that_are_no_span(near_end_db: str, days: str) -> None:
    result = CliRunner().invoke(main, ["--db", near_end_db, "upcoming", "--days", days])
    assert result.exit_code == 2, result.output
    assert "days" in assert_one_line(result)


# REST -------------------------------------------------------------------------------------
def test_rest_upcoming_near_the_end_of_the_calendar(mem: Memory, end_clock: FakeClock) -> None:
    with app_over(mem) as api:
        item = api.ok("POST", "/v1/memories", api.alice, 201,
                      json={"content": "Renew the passport", "due_at": DUE})
        for days in ("7", "100000"):
            found = api.ok("GET", "/v1/memories/upcoming", api.alice, params={"days": days})
            assert [i["id"] for i in found] == [item["id"]]


@pytest.mark.sqlite_only  # request validation, before any store is reached
@pytest.mark.parametrize("days", ["-1", "nan", "inf", "-inf", "100001", "1e300", "true",
                                  "seven", ""])
def test_rest_refuses_days_that_are_no_span(mem: Memory, days: str) -> None:
    with app_over(mem) as api:
        response = api.call("GET", "/v1/memories/upcoming", api.alice, params={"days": days})
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "validation_error" and "days" in error["message"]
        if days.lstrip("-") in ("nan", "inf"):
            assert "finite number" in error["message"], error
