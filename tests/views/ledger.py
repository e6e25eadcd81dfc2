"""Hand-built ledgers for the view tests: one event per minute, ids ``e1``, ``e2``…"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ledgermem.types import Event, Visibility

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def at(n: int) -> str:
    """The timestamp of event ``n``: ``n`` minutes after noon, 1 June 2026 (UTC)."""
    return (T0 + timedelta(minutes=n)).isoformat(timespec="microseconds")


def ev(n: int, kind: str, text: str | None = None, *, agent: str | None = None,
       user: str = "u1", visibility: Visibility = "private", **payload: Any) -> Event:
    """Event ``e{n}`` of ``user`` at minute ``n``; ``text`` goes to ``payload["text"]``."""
    body = dict(payload)
    if text is not None:
        body["text"] = text
    return Event(id=f"e{n}", ts=at(n), user_id=user, kind=kind, payload=body,
                 agent_id=agent, visibility=visibility)


def ids(events: list[Event]) -> list[str]:
    return [event.id for event in events]
