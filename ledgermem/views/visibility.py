"""Who sees what: the visibility filter, the episodic window, and past positions.

Every view starts from ``visible``: an agent sees its own events of any kind, plus the
events every agent of the user sees (a kind in ``ViewConfig.global_kinds``, or an event
written with ``visibility="global"``). A view is computed over one user's ledger only;
events of two users in one list are refused rather than filtered, since a caller that
mixes them has already made a mistake.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..errors import InvalidInput, NotFound
from ..types import Event
from .config import ViewConfig, check_count

__all__ = ["check_agent", "check_one_user", "episodic", "is_visible", "parse_moment", "until",
           "visible"]

DEFAULT_CONFIG = ViewConfig()


def check_one_user(events: Sequence[Event]) -> str | None:
    """The one user the events belong to (None for no events).

    Raises:
        InvalidInput: the events belong to more than one user.
    """
    users = {event.user_id for event in events}
    if len(users) > 1:
        raise InvalidInput(f"a view reads one user's ledger, and these events belong to "
                           f"{len(users)} users")
    return next(iter(users), None)


def check_agent(agent_id: str) -> None:
    """Raise ``InvalidInput`` unless ``agent_id`` is a non-empty string."""
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidInput(f"agent_id must be a non-empty string, not {agent_id!r}")


def is_visible(event: Event, agent_id: str, config: ViewConfig = DEFAULT_CONFIG) -> bool:
    """Whether ``agent_id`` may see ``event`` (users are not checked here)."""
    return (event.agent_id == agent_id or event.visibility == "global"
            or event.kind in config.global_kinds)


def visible(events: Sequence[Event], agent_id: str,
            config: ViewConfig = DEFAULT_CONFIG) -> list[Event]:
    """The events ``agent_id`` sees, in ledger order.

    Args:
        events: one user's ledger (or a prefix of it, see ``until``), in append order.
        agent_id: the agent whose view this is.
        config: which kinds are globally visible.

    Raises:
        InvalidInput: the events belong to more than one user, or ``agent_id`` is empty.
    """
    check_agent(agent_id)
    check_one_user(events)
    return [event for event in events if is_visible(event, agent_id, config)]


def episodic(events: Sequence[Event], agent_id: str, config: ViewConfig = DEFAULT_CONFIG,
             n: int | None = None) -> list[Event]:
    """The ``n`` most recent events ``agent_id`` sees (``config.episodic_n`` by default),
    oldest first.

    Raises:
        InvalidInput: as ``visible``, or ``n`` below 0.
    """
    count = config.episodic_n if n is None else check_count("n", n)
    seen = visible(events, agent_id, config)
    return seen[max(0, len(seen) - count):]


def until(events: Sequence[Event], *, event_id: str | None = None,
          time: str | datetime | None = None) -> list[Event]:
    """The ledger as it stood at a past position, to compute any view "as of" then.

    Args:
        events: a ledger in append order.
        event_id: keep the events up to and including this one.
        time: keep the events whose timestamp is at or before this moment (an aware
            ``datetime`` or an ISO 8601 string with an offset). With ``event_id`` too,
            both limits apply.

    Raises:
        InvalidInput: neither limit given, a naive or unreadable time, or an event
            whose timestamp cannot be read.
        NotFound: no event has ``event_id``.
    """
    if event_id is None and time is None:
        raise InvalidInput("until needs an event_id or a time")
    kept = list(events)
    if event_id is not None:
        at = next((i for i, event in enumerate(kept) if event.id == event_id), None)
        if at is None:
            raise NotFound(f"no event {event_id!r} in these events")
        kept = kept[:at + 1]
    if time is not None:
        limit = parse_moment(time, "time")
        kept = [event for event in kept if parse_moment(event.ts, f"event {event.id}") <= limit]
    return kept


def parse_moment(value: str | datetime, what: str) -> datetime:
    """``value`` as an aware datetime (``what`` names it in the error).

    Raises:
        InvalidInput: a naive time, or a string that is not ISO 8601.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidInput(f"{what}: {value!r} is not an ISO 8601 time") from exc
    if value.tzinfo is None:
        raise InvalidInput(f"{what}: {value.isoformat()} has no timezone offset")
    return value
