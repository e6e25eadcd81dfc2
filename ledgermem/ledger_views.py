"""Agent events and the views over them: the ``UserLedger`` layer of ``UserMemory``.

For worlds of several agents serving one user (a village of characters and a judge, a
team of tools), memory is a view over the user's append-only ledger, computed fresh on
each call by the pure functions of ``ledgermem.views``:

- ``record`` appends an event of the application's own kind (``world.observed``,
  ``agent.spoke``…) with a JSON payload; ``ledger_events`` lists and filters them.
- ``episodic``, ``salient``, ``reflection_due``, ``reflect`` and ``beliefs`` are the
  views, each readable at a past position (``as_of`` an event id or a time).

The views read the *agent events*: every event of the user's ledger except the kinds
ledgermem writes itself (``memory.*``, ``turn.*``, ``turns.*``, ``llm.*``, ``tool.*``:
knowledge items, conversations and bookkeeping, which have their own API). ``record``
refuses those kinds, since appending them would change knowledge items or
conversations behind the API's back; ``agent.reflected`` is an agent event.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence, Sized
from dataclasses import replace
from datetime import datetime
from typing import Any

from . import views
from .domain.events import Kind, new_event
from .errors import InvalidInput, NotFound, ProviderError
from .handle import UserHandle
from .ledger_index import HybridEventIndex
from .pipeline.calls import ask, llm_events
from .types import Event, Visibility
from .validation import (
    check_choice,
    check_id,
    check_optional_limit,
    check_optional_name,
    check_query,
    json_chars,
    json_object,
)
from .views.reflection import PURPOSE

__all__ = ["MAX_KIND_CHARS", "RESERVED_PREFIXES", "UserLedger", "check_kind",
           "check_memory_index", "check_view_config", "is_reserved"]

RESERVED_PREFIXES = ("memory.", "turn.", "turns.", "llm.", "tool.")
"""Kinds ledgermem writes itself: ``record`` refuses them, and the views do not read them."""

MAX_KIND_CHARS = 100
"""Longest event kind ``record`` accepts."""

VISIBILITIES: tuple[Visibility, ...] = ("private", "global")

_KIND = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z0-9_-]+)+")
_OWN_KINDS = frozenset(kind.value for kind in Kind)
_EVENT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_reserved(kind: str) -> bool:
    """Whether ledgermem writes events of ``kind`` itself (a ``Kind``, or a reserved
    prefix)."""
    return kind in _OWN_KINDS or kind.startswith(RESERVED_PREFIXES)


def check_kind(kind: Any) -> str:
    """An agent event's kind: lower-case words (letters, digits, ``_``, ``-``) joined by
    dots, such as ``world.observed``, at most ``MAX_KIND_CHARS``, and not reserved.

    Raises:
        InvalidInput: anything else.
    """
    if not isinstance(kind, str) or not kind:
        raise InvalidInput(f"an event kind must be non-empty text, not {kind!r}")
    if len(kind) > MAX_KIND_CHARS:
        raise InvalidInput(f"an event kind is at most {MAX_KIND_CHARS} characters; this "
                           f"one has {len(kind):,}")
    if not _KIND.fullmatch(kind):
        raise InvalidInput(f"an event kind is lower-case words joined by dots, such as "
                           f"'world.observed', not {kind!r}")
    if is_reserved(kind):
        raise InvalidInput(f"{kind!r} is a kind ledgermem writes itself (memory.*, turn.*, "
                           "turns.*, llm.*, tool.*); use remember, add_turns or "
                           "log_tool_call, or a kind of your own")
    return kind


def check_view_config(value: Any) -> views.ViewConfig:
    """``Memory(views=…)``: a ``ViewConfig``, or None for the defaults."""
    if value is None:
        return views.ViewConfig()
    if not isinstance(value, views.ViewConfig):
        raise InvalidInput(f"views must be a ViewConfig, not {type(value).__name__}")
    return value


def check_memory_index(value: Any) -> views.MemoryIndex | None:
    """``Memory(memory_index=…)``: a ``MemoryIndex`` (``index`` and ``search``) or None."""
    if value is not None and not isinstance(value, views.MemoryIndex):
        raise InvalidInput(f"memory_index must have index(events) and search(query, k), "
                           f"not be a {type(value).__name__}")
    return value


class _AmongVisible:
    """The memory index as one agent's salience view uses it: indexing passes through,
    and a search ranks only the events the agent sees, so neither another agent's
    private events nor another user's can crowd them out of the hits."""

    def __init__(self, index: views.MemoryIndex, visible: Collection[str]) -> None:
        self._index = index
        self._visible = visible

    def index(self, events: Sequence[Event]) -> None:
        self._index.index(events)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        if isinstance(self._index, HybridEventIndex):
            return self._index.search(query, k, among=self._visible)
        # Another index cannot be told which events count: ask it for everything it
        # holds when it says how much that is (the view drops the rest).
        wanted = max(k, len(self._index)) if isinstance(self._index, Sized) else k
        return self._index.search(query, wanted)


class UserLedger(UserHandle):
    """Agent events and the views over them (the ledger layer of ``UserMemory``).

    Every call reads or writes ``scope.user_id``'s ledger only. The views read agent
    events (the kinds ledgermem does not write itself, see ``RESERVED_PREFIXES``)
    with the ``Memory``'s ``views`` config (``ViewConfig``) and ``memory_index``.
    ``agent_id`` names the agent whose view it is; agents are not an access boundary
    within one user (users are), so any agent's view can be read through the handle.
    """

    # events -----------------------------------------------------------------------
    def record(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        agent_id: str | None = None,
        visibility: Visibility = "private",
        session_id: str | None = None,
    ) -> Event:
        """Append one agent event to the user's ledger.

        Args:
            kind: the event's kind: lower-case words joined by dots, at most 100
                characters (``world.observed``, ``agent.spoke``, ``clue.found``); not
                one ledgermem writes itself (``memory.*``, ``turn.*``, ``turns.*``,
                ``llm.*``, ``tool.*``).
            payload: a JSON object; its ``text`` (or ``content``, ``belief``) is what
                salience and prompts read. Its JSON is at most
                ``Limits.max_turn_chars`` long.
            agent_id: who did or saw it (the handle's agent by default). An event
                without an agent is seen only when its kind or visibility is global.
            visibility: ``private`` (its agent sees it, plus everyone when its kind is
                in ``ViewConfig.global_kinds``) or ``global`` (every agent sees it).
            session_id: the session (the handle's by default).

        Returns:
            The event as stored.

        Raises:
            InvalidInput: a bad or reserved kind, a payload that is not a JSON object
                or is too long, an unknown visibility, a bad agent or session id.
                Nothing is stored then.
        """
        check_kind(kind)
        body = json_object(payload, "payload", max_chars=None)  # Limits.max_turn_chars
        size = json_chars(body)
        limit = self._memory.limits.max_turn_chars
        if size > limit:
            raise InvalidInput(f"the payload is {size:,} characters of JSON; the limit is "
                               f"{limit} (Limits.max_turn_chars)")
        check_choice("visibility", visibility, VISIBILITIES)
        agent = check_optional_name(agent_id, "agent_id")
        session = check_optional_name(session_id, "session_id")
        scope = self.scope if agent is None else replace(self.scope, agent_id=agent)
        event = new_event(scope, self._now(), kind, body, session_id=session,
                          visibility=visibility)
        self._store.append([event])
        return event

    def ledger_events(
        self,
        *,
        kinds: Sequence[str] | None = None,
        agent_id: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        limit: int | None = None,
        after_event: str | None = None,
    ) -> list[Event]:
        """The user's agent events (what the views read), oldest first.

        Args:
            kinds: only these kinds (agent kinds; a reserved one is refused).
            agent_id: only the events this agent wrote (not what it sees: that is
                ``episodic``).
            since: only events at or after this time (ISO 8601 or English, as ``at``).
            until: only events at or before this time.
            limit: at most this many (1 to 10,000): the newest, or with
                ``after_event`` the first ones after it, so a reader pages forward by
                passing back the id of the last event it got.
            after_event: only events appended after this agent event.

        Raises:
            InvalidInput: a bad kind, time, limit or id.
            NotFound: ``after_event`` is not an agent event of this user.
        """
        wanted = self._kinds(kinds)
        agent = check_optional_name(agent_id, "agent_id")
        start, end = self._when(since), self._when(until)
        count = check_optional_limit(limit)
        if after_event is not None:
            anchor = check_id(after_event, "after_event")
            found = self._agent_events()
            at = next((i for i, e in enumerate(found) if e.id == anchor), None)
            if at is None:
                raise NotFound(f"no event {anchor!r}")
            found = [e for e in found[at + 1:] if wanted is None or e.kind in wanted]
            found = [e for e in found if (start is None or e.ts >= start)
                     and (end is None or e.ts <= end)]
        else:
            found = self._agent_events(wanted, since=start, until=end,
                                       limit=count if agent is None else None)
        if agent is not None:
            found = [e for e in found if e.agent_id == agent]
        if count is not None:
            found = found[:count] if after_event is not None else found[-count:]
        return found

    # views ------------------------------------------------------------------------
    def episodic(self, agent_id: str, *, n: int | None = None,
                 as_of: str | datetime | None = None) -> list[Event]:
        """The ``n`` most recent events ``agent_id`` sees (``ViewConfig.episodic_n``
        by default), oldest first (``views.episodic``).

        Args:
            agent_id: the agent whose view this is.
            n: how many.
            as_of: the view right after this event (an event id), or at this time.

        Raises:
            InvalidInput: an empty agent id, ``n`` below 0, a bad ``as_of``.
            NotFound: ``as_of`` looks like an event id that is not an agent event of
                this user.
        """
        return views.episodic(self._as_of(as_of), agent_id, self._memory.views, n)

    def salient(self, agent_id: str, query: str, *, k: int | None = None,
                as_of: str | datetime | None = None) -> list[Event]:
        """The ``k`` most salient events ``agent_id`` sees for ``query``
        (``ViewConfig.salience_k`` by default), in chronological order
        (``views.salient``).

        Relevance is keyword Jaccard, or the ``Memory``'s ``memory_index`` score when
        one is attached: the events the agent sees are indexed first (idempotent, so
        cheap on repeat) and only they are searched, so a hit is always an event of
        the ledger that the agent may see.

        Raises:
            InvalidInput: as ``episodic``; a query that is not text or is longer than
                ``Limits.max_query_chars``; ``k`` below 0.
            NotFound: as ``episodic``.
        """
        text = check_query(query, self._memory.limits)
        events = self._as_of(as_of)
        config = self._memory.views
        index = self._memory.memory_index
        lens = None
        if index is not None:
            lens = _AmongVisible(index, {e.id for e in views.visible(events, agent_id,
                                                                       config)})
        return views.salient(events, agent_id, text, config, k, lens)

    def reflection_due(self, agent_id: str, *, as_of: str | datetime | None = None
                       ) -> bool:
        """Whether ``agent_id`` has seen ``ViewConfig.reflect_every`` events since it
        last reflected (``views.reflection_due``). Needs no LLM.

        Raises:
            InvalidInput, NotFound: as ``episodic``.
        """
        return views.reflection_due(self._as_of(as_of), agent_id, self._memory.views)

    def reflect(self, agent_id: str) -> Event | None:
        """When ``agent_id`` is due to reflect, ask the ``Memory``'s LLM for one belief
        and append it as a globally visible ``agent.reflected`` event with
        ``{belief, based_on, supersedes?}`` (``views.reflection_event``: it cites only
        events the agent sees, and supersedes only one of its current beliefs).

        The call's cost is recorded (``llm_usage``). The model is asked outside any
        transaction; the belief is written inside one, after checking that the agent
        did not reflect meanwhile.

        Returns:
            The new event; None when no reflection is due, when another call
            reflected for this agent first, or when no LLM is configured (reported
            once in the log: ``reflection skipped``; ``reflection_due`` still works).

        Raises:
            InvalidInput: an empty agent id.
            ProviderError: the model gave no valid belief (its cost is recorded).
        """
        config = self._memory.views
        seen = self._agent_events()
        if not views.reflection_due(seen, agent_id, config):
            return None
        llm = self._memory.llm
        if llm is None:
            self._memory.report_skipped("reflection", "no LLM configured")
            return None
        answer = ask(llm, views.reflection_request(seen, agent_id, config), views.Belief,
                     purpose=PURPOSE)
        scope = replace(self.scope, agent_id=agent_id)
        event = None
        with self._store.writing_for(self.user_id):
            now = self._now()
            written = llm_events(scope, now, answer.calls)
            current = self._agent_events()
            if (answer.value is not None and _last_reflection(current, agent_id)
                    == _last_reflection(seen, agent_id)
                    and views.reflection_due(current, agent_id, config)):
                event = views.reflection_event(current, agent_id, answer.value, config,
                                               scope=scope, now=now)
                written.append(event)
            self._store.append(written)
        if answer.value is None:
            raise ProviderError(f"reflection failed: {answer.error}")
        return event

    def beliefs(self, agent_id: str, *, as_of: str | datetime | None = None
                ) -> list[Event]:
        """``agent_id``'s belief state: its ``agent.reflected`` events that no later
        one of its own superseded, oldest first (``views.beliefs``).

        Raises:
            InvalidInput, NotFound: as ``episodic``.
        """
        return views.beliefs(self._as_of(as_of), agent_id)

    # plumbing ---------------------------------------------------------------------
    def _kinds(self, kinds: Sequence[str] | None) -> frozenset[str] | None:
        if kinds is None:
            return None
        if isinstance(kinds, str | bytes) or not isinstance(kinds, Sequence):
            raise InvalidInput(f"kinds must be a list of event kinds, not {kinds!r}")
        return frozenset(check_kind(kind) for kind in kinds)

    def _agent_events(self, kinds: Collection[str] | None = None, *,
                      since: str | None = None, until: str | None = None,
                      limit: int | None = None) -> list[Event]:
        """The user's agent events (of ``kinds``), in append order."""
        if kinds is None:
            # The kinds the ledger holds, from an aggregate: the store then reads the
            # agent events alone, never the payloads of every knowledge change and turn.
            kinds = {kind for _, kind, _ in self._store.activity(self.user_id, "")
                     if not is_reserved(kind)}
        if not kinds:
            return []
        return self._store.events(self.user_id, kinds=sorted(kinds), since=since,
                                  until=until, limit=limit)

    def _as_of(self, as_of: str | datetime | None) -> list[Event]:
        """The agent events as they stood at ``as_of`` (all of them for None)."""
        events = self._agent_events()
        if as_of is None:
            return events
        if not isinstance(as_of, str | datetime):
            raise InvalidInput(f"as_of must be an event id or a time, not {as_of!r}")
        if isinstance(as_of, str):
            if any(event.id == as_of for event in events):
                return views.until(events, event_id=as_of)
            if _EVENT_ID.fullmatch(as_of):
                raise NotFound(f"no event {as_of!r}")
        moment = self._when(as_of)
        assert moment is not None
        return views.until(events, time=moment)


def _last_reflection(events: Sequence[Event], agent_id: str) -> str | None:
    return next((e.id for e in reversed(events)
                 if e.kind == views.REFLECTED and e.agent_id == agent_id), None)
