"""Google ADK: ledgermem as an ADK memory service and session service.

One line gives a ``Runner`` both services over one ``Memory``::

    from ledgermem import Memory
    from ledgermem.adapters.adk import adk_services

    session_service, memory_service = adk_services(Memory.open("memory.db"))
    runner = Runner(agent=agent, app_name="shop", session_service=session_service,
                    memory_service=memory_service)

and ``register()`` (in an agents folder's ``services.py``) makes the ``ledgermem://``
URI scheme known to ``adk web`` and ``adk api_server``.

**Scoping.** ADK keys sessions, state and memory by ``(app_name, user_id)``; ledgermem
isolates users in the store. Each ADK pair is one ledgermem user,
``ledger_user(app_name, user_id)`` = ``"{app}/{user}"`` (the app name with ``%`` and
``/`` escaped, so two pairs never map to one id), so two apps, or two users of one
app, never see each other's sessions, state or memory, whatever the query. App-wide
state (``app:`` keys) lives in the ledger of ``"{app}/"``, which no ADK user maps to.

**What is stored.** An ADK session is a durable ledgermem session of that user on the
channel ``session_channel(session_id)``: every event ADK appends is one turn (the
event's text, or a one-line summary of a tool call, its result or a state change), with
the whole event as JSON in the turn's metadata so ``get_session`` returns it as it was
appended (an event over ``MAX_JSON_CHARS`` of JSON is kept with its longest strings
cut, and flagged: see ``session_items``). Creating and deleting a session and ``app:``
/ ``user:`` state changes are agent events of the user's ledger (kinds ``adk.*``);
session state is the session's initial state plus the state deltas of its events;
``temp:`` keys are never stored.

**Memory.** ``search_memory`` searches the user's knowledge items and the turns handed
to long-term memory (hybrid search, best first). A session is handed over when it goes
idle (``SessionOptions.idle_consolidate_minutes``: with an LLM its turns are distilled
into knowledge) or when ADK calls ``add_session_to_memory`` / ``add_events_to_memory``
(with an LLM: distilled; without one: the turns themselves become searchable memory).
Until then, a session's turns are its history only, so a preloaded memory never
repeats the conversation the model already sees.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ..agent.sessions import CHANNEL_KEY, SessionOptions, Sessions, session_key
from ..aio import AsyncMemory
from ..errors import InvalidInput, NotFound
from ..memory import Memory
from ..store.base import TurnQuery
from ..types import Event as LedgerEvent
from ..types import Hit, Item, Turn
from . import missing_extra
from .session_items import item_metadata

try:
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
    from google.genai import types
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra(__name__, "adk", "google-adk", exc) from exc

__all__ = [
    "SCHEME",
    "AdkLedger",
    "LedgermemMemoryService",
    "LedgermemSessionService",
    "adk_services",
    "app_ledger",
    "close_services",
    "ledger_user",
    "open_services",
    "register",
    "session_channel",
]

log = logging.getLogger("ledgermem.adapters.adk")

SCHEME = "ledgermem"
"""The URI scheme ``register`` adds: ``ledgermem://PATH``, ``ledgermem:///ABS/PATH``,
``ledgermem://postgresql://…``, or ``ledgermem://`` for the configured database."""

CREATED = "adk.session.created"
DELETED = "adk.session.deleted"
USER_STATE = "adk.state.user"
APP_STATE = "adk.state.app"
HIDDEN = "adk.memory.deleted"
EVENT_KEY = "adk_event"
"""Turn metadata: the ADK event, as JSON."""
INCARNATION_KEY = "adk_session"
"""Turn metadata: the id of the ``adk.session.created`` event of the session it belongs
to (a session deleted and created again under the same id starts empty)."""
SUMMARY_CHARS = 500
"""Longest JSON of a tool call's arguments or result kept in a turn's text."""
_WHOLE = frozenset({"actions"})
"""Fields of an event never cut to fit (``item_metadata``)."""

R = TypeVar("R")


# scoping ---------------------------------------------------------------------------------
def _escape(text: str, chars: str) -> str:
    for char in "%" + chars:
        text = text.replace(char, f"%{ord(char):02X}")
    return text


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{what} must be non-empty text, not {value!r:.60}")
    return value


def ledger_user(app_name: str, user_id: str) -> str:
    """The ledgermem user id of ADK's ``(app_name, user_id)``: ``"{app}/{user}"``, the
    app name with ``%`` and ``/`` percent-escaped so that the pair reads back one way.

    Raises:
        InvalidInput: an empty app name or user id.
    """
    return f"{_escape(_name(app_name, 'app_name'), '/')}/{_name(user_id, 'user_id')}"


def app_ledger(app_name: str) -> str:
    """The ledgermem user id holding ``app_name``'s ``app:`` state: ``"{app}/"``, which
    no ``ledger_user`` of an ADK user (never empty) equals."""
    return f"{_escape(_name(app_name, 'app_name'), '/')}/"


def session_channel(session_id: str) -> str:
    """The ledgermem channel of an ADK session id (``%`` and ``:`` escaped, since a
    channel never holds ``:``); the session is ``session_key(user, channel)``."""
    return _escape(_name(session_id, "session_id").strip(), ":")


# the sync core ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Live:
    """A session that exists: its creation event."""

    created: LedgerEvent

    @property
    def time(self) -> float:
        return float(self.created.payload.get("time", 0.0))

    @property
    def state(self) -> dict[str, Any]:
        return dict(self.created.payload.get("state") or {})


class AdkLedger:
    """What both services do, synchronously, over one ``Memory`` and its ``Sessions``.

    The async services run these methods in worker threads; use it directly from sync
    code or tests. Every method takes ADK's ``app_name`` and ``user_id`` and touches only
    that pair's ledgermem user (and, for ``app:`` state, the app's ledger).
    """

    def __init__(self, memory: Memory, sessions: Sessions | None = None) -> None:
        self.memory = memory
        self.sessions = sessions or Sessions(memory)

    # sessions ---------------------------------------------------------------------
    def create_session(self, app_name: str, user_id: str, state: Mapping[str, Any] | None,
                       session_id: str | None) -> Session:
        """ADK's ``create_session``; ``AlreadyExistsError`` for a live session id."""
        user = ledger_user(app_name, user_id)
        sid = (session_id or "").strip() or str(uuid.uuid4())
        app_delta, user_delta, own = _split_state(_json_state(state or {}))
        handle = self.memory.for_user(user)
        with self.memory.store.writing_for(user):
            if sid in self._live(user):
                raise AlreadyExistsError(f"Session with id {sid} already exists.")
            handle.record(CREATED, {"session_id": sid, "state": own, "time": time.time()})
            self._record_shared(app_name, user, app_delta, user_delta)
        session = self.get_session(app_name, user_id, sid, None)
        assert session is not None
        return session

    def get_session(self, app_name: str, user_id: str, session_id: str,
                    config: GetSessionConfig | None) -> Session | None:
        """ADK's ``get_session``: None when there is no such live session."""
        user = ledger_user(app_name, user_id)
        sid = _name(session_id, "session_id").strip()
        live = self._live(user).get(sid)
        if live is None:
            return None
        events = self._events(user, sid, live)
        state = live.state
        for event in events:
            state.update(_split_state(event.actions.state_delta or {})[2])
        last = events[-1].timestamp if events else live.time
        if config is not None and config.after_timestamp is not None:
            events = [e for e in events if e.timestamp >= config.after_timestamp]
        if config is not None and config.num_recent_events is not None:
            count = config.num_recent_events  # as InMemorySessionService: 0 is none
            events = events[-count:] if count else []
        return Session(id=sid, app_name=app_name, user_id=user_id,
                       state=self._merged(app_name, user, state), events=events,
                       last_update_time=last)

    def list_sessions(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        """ADK's ``list_sessions``: every live session of the user (of every user of the
        app when ``user_id`` is None), without events, oldest update first."""
        prefix = app_ledger(app_name)
        if user_id is not None:
            pairs = [(ledger_user(app_name, user_id), user_id)]
        else:
            pairs = [(u, u[len(prefix):]) for u in self.memory.store.user_ids()
                     if u.startswith(prefix) and len(u) > len(prefix)]
        found = []
        for user, adk_user in pairs:
            for sid in self._live(user):
                session = self.get_session(app_name, adk_user, sid, None)
                if session is not None:
                    found.append(session.model_copy(update={"events": []}))
        found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=found)

    def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """ADK's ``delete_session``: the session is gone for ADK, its open turns are never
        consolidated, and ``search_memory`` no longer returns any of its turns. The
        turns stay in the ledger, as every turn does (``forget_user`` erases them)."""
        user = ledger_user(app_name, user_id)
        sid = _name(session_id, "session_id").strip()
        with self.memory.store.writing_for(user):
            live = self._live(user).get(sid)
            if live is None:
                return
            self.memory.for_user(user).record(DELETED, {"session_id": sid,
                                                        "of": live.created.id})
        self.sessions.discard(user, session_channel(sid), "the ADK session was deleted")

    def append_event(self, session: Session, event: Event) -> None:
        """Store one (non-partial, temp-trimmed) event of a live session as a turn.

        Raises:
            SessionNotFoundError: no such live session.
            StaleSessionError: another writer appended since ``session`` was read.
            InvalidInput: an event whose state or content cannot be stored as JSON.
        """
        user = ledger_user(session.app_name, session.user_id)
        channel = session_channel(session.id)
        data = _event_data(event)
        role, text = _turn_text(event, self.memory.limits.max_turn_chars)
        app_delta, user_delta, _ = _split_state(_json_state(event.actions.state_delta or {}))
        with self.memory.store.writing_for(user):
            live = self._live(user).get(session.id)
            if live is None:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            if self._last_update(user, channel, live) > session.last_update_time:
                raise StaleSessionError(
                    "The last_update_time provided in the session object is earlier than "
                    "the update time in storage. Please check if it is a stale session.")
            self.sessions.record(user, channel, role, text, metadata=_event_metadata(
                data, {CHANNEL_KEY: channel, INCARNATION_KEY: live.created.id}))
            self._record_shared(session.app_name, user, app_delta, user_delta)

    def get_user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """ADK's ``get_user_state``: the ``user:`` state, keys without the prefix."""
        return _fold(self.memory.for_user(ledger_user(app_name, user_id)), USER_STATE)

    # memory -----------------------------------------------------------------------
    def add_session_to_memory(self, session: Session) -> None:
        """Hand a session over to long-term memory: its events not stored yet are added
        as turns (a session of another session service), then the session is
        consolidated (with an LLM) or its turns become memory verbatim (without)."""
        self._hand_over(session.app_name, session.user_id, session.id, session.events)

    def add_events_to_memory(self, app_name: str, user_id: str, events: Sequence[Event],
                             session_id: str | None) -> None:
        """Hand a delta over: ``events`` not stored yet are added as turns of the session
        (``session_id``, or a ``memory`` session), then as ``add_session_to_memory``."""
        self._hand_over(app_name, user_id, session_id or "memory", events)

    def add_memory(self, app_name: str, user_id: str, memories: Sequence[MemoryEntry],
                   custom_metadata: Mapping[str, object] | None) -> list[Item]:
        """Store explicit memories verbatim as knowledge items (category ``fact``, or the
        entry's ``custom_metadata["category"]``), in one transaction."""
        handle = self.memory.for_user(ledger_user(app_name, user_id))
        written = []
        with self.memory.store.transaction():
            for entry in memories:
                text = _text_of(entry.content)
                if not text:
                    continue
                extra = {**(custom_metadata or {}), **entry.custom_metadata}
                category = extra.pop("category", "fact")
                written.append(handle.remember(text, str(category), metadata={"adk": {
                    "id": entry.id, "author": entry.author, "timestamp": entry.timestamp,
                    "custom_metadata": to_jsonable_python(extra, fallback=str)}}))
        return written

    def delete_memory(self, app_name: str, user_id: str, memory_id: str | None) -> None:
        """Forget a knowledge item, or stop a turn from coming back from
        ``search_memory``. ``NotFound`` for an id this user's memory does not hold."""
        if memory_id is None:
            return
        handle = self.memory.for_user(ledger_user(app_name, user_id))
        try:
            handle.forget(memory_id)
            return
        except NotFound:
            pass
        turns = self.memory.store.query_turns(handle.user_id, TurnQuery(ids=(memory_id,)))
        if not turns:
            raise NotFound(f"no memory {memory_id!r}")
        handle.record(HIDDEN, {"turn_id": memory_id})

    def search_memory(self, app_name: str, user_id: str, query: str, limit: int | None
                      ) -> list[MemoryEntry]:
        """The user's knowledge items and handed-over turns that match ``query``, best
        first, at most ``limit`` (default: the memory's recall limit)."""
        if not isinstance(query, str) or not query.strip():
            return []
        handle = self.memory.for_user(ledger_user(app_name, user_id))
        limit = limit or self.memory.searcher.options.limit
        hits = handle.search_all(query, top_k=min(4 * limit, 200))
        hidden = {e.payload.get("turn_id") for e in handle.ledger_events(kinds=[HIDDEN])}
        hidden |= self._deleted_incarnations(handle.user_id)
        entries = []
        for hit in hits:
            entry = _entry(hit, hidden)
            if entry is not None:
                entries.append(entry)
            if len(entries) == limit:
                break
        return entries

    # internals --------------------------------------------------------------------
    def _live(self, user: str) -> dict[str, _Live]:
        live: dict[str, _Live] = {}
        for event in self.memory.for_user(user).ledger_events(kinds=[CREATED, DELETED]):
            sid = str(event.payload.get("session_id"))
            if event.kind == CREATED:
                live[sid] = _Live(event)
            else:
                live.pop(sid, None)
        return live

    def _deleted_incarnations(self, user: str) -> set[str]:
        return {str(e.payload.get("of"))
                for e in self.memory.for_user(user).ledger_events(kinds=[DELETED])}

    def _turns(self, user: str, channel: str) -> list[Turn]:
        return self.memory.store.query_turns(user, TurnQuery(
            session_id=session_key(user, channel)))

    def _events(self, user: str, sid: str, live: _Live) -> list[Event]:
        return [_event(turn) for turn in self._turns(user, session_channel(sid))
                if turn.metadata.get(INCARNATION_KEY) == live.created.id
                and EVENT_KEY in turn.metadata]

    def _last_update(self, user: str, channel: str, live: _Live) -> float:
        """When the session was last changed in storage (its last event's timestamp)."""
        last = self.memory.store.query_turns(user, TurnQuery(
            session_id=session_key(user, channel)), descending=True, limit=1)
        if last and last[0].metadata.get(INCARNATION_KEY) == live.created.id:
            return float(last[0].metadata[EVENT_KEY].get("timestamp", live.time))
        return live.time

    def _record_shared(self, app_name: str, user: str, app_delta: dict[str, Any],
                       user_delta: dict[str, Any]) -> None:
        if user_delta:
            self.memory.for_user(user).record(USER_STATE, {"delta": user_delta})
        if app_delta:
            self.memory.for_user(app_ledger(app_name)).record(APP_STATE, {"delta": app_delta})

    def _merged(self, app_name: str, user: str, state: dict[str, Any]) -> dict[str, Any]:
        merged = dict(state)
        for key, value in _fold(self.memory.for_user(app_ledger(app_name)),
                                APP_STATE).items():
            merged[State.APP_PREFIX + key] = value
        for key, value in _fold(self.memory.for_user(user), USER_STATE).items():
            merged[State.USER_PREFIX + key] = value
        return merged

    def _hand_over(self, app_name: str, user_id: str, session_id: str,
                   events: Iterable[Event]) -> None:
        user = ledger_user(app_name, user_id)
        channel = session_channel(session_id)
        key = session_key(user, channel)
        stored = {str(t.metadata.get(EVENT_KEY, {}).get("id"))
                  for t in self._turns(user, channel)}
        limit = self.memory.limits.max_turn_chars
        new = []
        for event in events:
            if event.partial or not event.content or not event.content.parts \
                    or event.id in stored:
                continue
            role, text = _turn_text(event, limit)
            new.append({"role": role, "content": text, "metadata": _event_metadata(
                _event_data(event), {CHANNEL_KEY: channel})})
            stored.add(event.id)
        if new:
            self.memory.for_user(user).add_turns(new, session_id=key)
        result = self.sessions.reset(user, channel)
        log.info("ADK session %s handed to memory: %s (%d turns, %d items)%s", key,
                 result.status, result.turns, result.items,
                 f": {result.why}" if result.why else "")


def _fold(handle: Any, kind: str) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for event in handle.ledger_events(kinds=[kind]):
        state.update(event.payload.get("delta") or {})
    return state


def _json_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """State as JSON data (datetimes, models…, as ADK's persistent services store
    them); InvalidInput for what has no JSON form."""
    try:
        data = to_jsonable_python(dict(state), inf_nan_mode="null")
    except Exception as exc:
        raise InvalidInput(f"session state must be JSON-serialisable: {exc}") from exc
    return dict(data)


def _split_state(state: Mapping[str, Any]
                 ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` parts of a state or delta, prefixes removed from the
    first two; ``temp:`` keys dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return app, user, own


def _text_of(content: types.Content | None) -> str:
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text and not p.thought).strip()


def _summary(value: Any) -> str:
    text = json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "…"


def _turn_text(event: Event, limit: int) -> tuple[str, str]:
    """The role and text of the turn that stores ``event``: its text, else one line per
    tool call or result, else a note of what the event changed."""
    parts = (event.content.parts or []) if event.content else []
    lines = [_text_of(event.content)] if _text_of(event.content) else []
    lines += [f"[called {p.function_call.name}({_summary(p.function_call.args or {})})]"
              for p in parts if p.function_call]
    results = [p.function_response for p in parts if p.function_response]
    lines += [f"[{r.name} returned {_summary(r.response)}]" for r in results]
    if not lines:
        changed = sorted((event.actions.state_delta or {}).keys())
        lines = [f"[{event.author or 'adk'}: state {', '.join(changed)}]" if changed
                 else f"[{event.author or 'adk'} event]"]
    role = ("tool" if results else "user" if event.author == "user"
            else "assistant" if parts else "system")
    return role, "\n".join(lines)[:limit]


def _event(turn: Turn) -> Event:
    return Event.model_validate_json(json.dumps(turn.metadata[EVENT_KEY]))


def _event_data(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(event.model_dump_json(exclude_none=True))
    return data


def _event_metadata(data: dict[str, Any], around: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of the turn that stores an event: the event whole, or cut to fit
    and flagged (``item_metadata``), always one ``Event`` reads back. Its ``actions``
    are never cut: the session state is rebuilt from their state deltas."""
    return item_metadata(EVENT_KEY, data, around, keep_whole=_WHOLE, valid=_is_event)


def _is_event(data: dict[str, Any]) -> bool:
    try:
        Event.model_validate_json(json.dumps(data))
    except ValueError:  # pydantic's ValidationError
        return False
    return True


def _entry(hit: Hit, hidden: set[str | None]) -> MemoryEntry | None:
    """The ``MemoryEntry`` of a search hit, or None for a turn not in memory."""
    if hit.item is not None:
        item = hit.item
        return MemoryEntry(
            id=item.id, content=types.Content(role="user", parts=[types.Part(text=item.content)]),
            timestamp=item.valid_from or item.created_at,
            custom_metadata={"kind": "knowledge", "category": item.category,
                             "confidence": item.confidence, "score": hit.score})
    turn = hit.turn
    assert turn is not None
    if turn.consolidated_at is None or turn.id in hidden \
            or turn.metadata.get(INCARNATION_KEY) in hidden:
        return None
    role: str | None
    if EVENT_KEY not in turn.metadata:  # a turn written through ledgermem's own API
        role, author, text = turn.role, turn.role, turn.content
    else:
        event = _event(turn)
        text = _text_of(event.content)
        role, author = (event.content.role if event.content else None), event.author
    if not text:
        return None
    return MemoryEntry(
        id=turn.id, author=author, timestamp=turn.ts,
        content=types.Content(role="user" if role == "user" else "model",
                              parts=[types.Part(text=text)]),
        custom_metadata={"kind": "conversation", "session_id": turn.session_id,
                         "score": hit.score})


# the async services ----------------------------------------------------------------------
class _Offloaded:
    """Runs the sync core in worker threads, at most ``threads`` calls at once."""

    def __init__(self, ledger: AdkLedger, threads: int) -> None:
        self.ledger = ledger
        self._limiter = anyio.CapacityLimiter(threads)

    async def _run(self, call: Callable[[], R]) -> R:
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)


def _ledger(memory: Memory | AsyncMemory | AdkLedger, options: SessionOptions | None
            ) -> AdkLedger:
    if isinstance(memory, AdkLedger):
        return memory
    sync = memory.sync if isinstance(memory, AsyncMemory) else memory
    if not isinstance(sync, Memory):
        raise InvalidInput(f"expected a Memory or AsyncMemory, not {type(memory).__name__}")
    return AdkLedger(sync, Sessions(sync, options))


class LedgermemSessionService(_Offloaded, BaseSessionService):
    """ADK's ``BaseSessionService`` over ledgermem's durable sessions.

    Args:
        memory: a ``Memory`` (or ``AsyncMemory``), or an ``AdkLedger`` to share with a
            ``LedgermemMemoryService`` (``adk_services`` does that).
        options: the sessions layer's settings (idle consolidation); ignored when an
            ``AdkLedger`` is given.
        threads: calls run in worker threads at once.
    """

    def __init__(self, memory: Memory | AsyncMemory | AdkLedger, *,
                 options: SessionOptions | None = None, threads: int = 8) -> None:
        super().__init__(_ledger(memory, options), threads)

    async def start(self) -> int:
        """The start-up sweep: consolidate the sessions that went idle while the process
        was down and arm the idle timers of the others; returns sessions handled."""
        return len(await self._run(self.ledger.sessions.start))

    async def close(self) -> None:
        """Cancel the idle timers (pending sessions wait for the next sweep)."""
        self.ledger.sessions.close()

    async def create_session(self, *, app_name: str, user_id: str,
                             state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        return await self._run(lambda: self.ledger.create_session(
            app_name, user_id, state, session_id))

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> Session | None:
        return await self._run(lambda: self.ledger.get_session(
            app_name, user_id, session_id, config))

    async def list_sessions(self, *, app_name: str, user_id: str | None = None
                            ) -> ListSessionsResponse:
        return await self._run(lambda: self.ledger.list_sessions(app_name, user_id))

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._run(lambda: self.ledger.delete_session(app_name, user_id, session_id))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._run(lambda: self.ledger.get_user_state(app_name, user_id))

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await self._run(lambda: self.ledger.append_event(session, event))
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)


class LedgermemMemoryService(_Offloaded, BaseMemoryService):
    """ADK's ``BaseMemoryService`` over ledgermem's long-term memory.

    Args:
        memory: a ``Memory`` (or ``AsyncMemory``), or the ``AdkLedger`` of a
            ``LedgermemSessionService`` (``adk_services`` does that).
        top_k: memories a search returns (default: the memory's recall limit).
        threads: calls run in worker threads at once.
    """

    def __init__(self, memory: Memory | AsyncMemory | AdkLedger, *,
                 top_k: int | None = None, threads: int = 8) -> None:
        super().__init__(_ledger(memory, None), threads)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                                  or top_k < 1):
            raise InvalidInput(f"top_k must be a positive integer, not {top_k!r}")
        self.top_k = top_k

    async def add_session_to_memory(self, session: Session) -> None:
        await self._run(lambda: self.ledger.add_session_to_memory(session))

    async def add_events_to_memory(
        self, *, app_name: str, user_id: str, events: Sequence[Event],
        session_id: str | None = None, custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        await self._run(lambda: self.ledger.add_events_to_memory(
            app_name, user_id, events, session_id))

    async def add_memory(self, *, app_name: str, user_id: str,
                         memories: Sequence[MemoryEntry],
                         custom_metadata: Mapping[str, object] | None = None) -> None:
        await self._run(lambda: self.ledger.add_memory(app_name, user_id, memories,
                                                       custom_metadata))

    async def delete_memory(self, *, app_name: str, user_id: str,
                            memory_id: str | None = None) -> None:
        await self._run(lambda: self.ledger.delete_memory(app_name, user_id, memory_id))

    async def search_memory(self, *, app_name: str, user_id: str, query: str
                            ) -> SearchMemoryResponse:
        found = await self._run(lambda: self.ledger.search_memory(
            app_name, user_id, query, self.top_k))
        return SearchMemoryResponse(memories=found)


def adk_services(memory: Memory | AsyncMemory, *, options: SessionOptions | None = None,
                 top_k: int | None = None
                 ) -> tuple[LedgermemSessionService, LedgermemMemoryService]:
    """Both services over one ``Memory``, sharing one sessions layer (one idle timer per
    session): ``session_service, memory_service = adk_services(memory)``."""
    ledger = _ledger(memory, options)
    return LedgermemSessionService(ledger), LedgermemMemoryService(ledger, top_k=top_k)


# the URI scheme --------------------------------------------------------------------------
_opened: dict[str, tuple[AdkLedger, threading.Thread]] = {}
_opened_lock = threading.Lock()


def open_services(uri: str, environ: Mapping[str, str] | None = None
                  ) -> tuple[LedgermemSessionService, LedgermemMemoryService]:
    """Both services for a ``ledgermem://`` URI, configured as the CLI is: the config
    file (``LEDGERMEM_CONFIG``) and ``LEDGERMEM_*`` variables choose the embedder, the
    LLM (``LEDGERMEM_LLM_BASE_URL`` / ``_MODEL`` / ``_API_KEY``) and the sessions
    settings, and the URI the database (``ledgermem://`` alone: the configured one).

    One database is opened once per process: the session and memory services of
    ``adk web`` share it. The start-up sweep runs in a background thread.

    Raises:
        ConfigError: a bad configuration. InvalidInput: not a ``ledgermem://`` URI.
    """
    from ..cli import build_embedder, recorded_embedder
    from ..config import find_config_path, load_settings, memory_options, session_options
    from ..memory import open_store

    if not isinstance(uri, str) or not uri.startswith(f"{SCHEME}://"):
        raise InvalidInput(f"expected a {SCHEME}:// URI, not {uri!r:.80}")
    env = os.environ if environ is None else environ
    settings = load_settings(find_config_path(None, env), env)
    target = uri[len(SCHEME) + 3:] or settings.database.url or ""
    with _opened_lock:
        ledger = _opened[target][0] if target in _opened else None
        if ledger is None:
            store = open_store(target or None)
            try:
                embedder = (build_embedder(settings.embedder.name) if settings.embedder.name
                            else recorded_embedder(store))
                memory = Memory(store, embedder=embedder, **memory_options(settings))
            except BaseException:
                store.close()
                raise
            ledger = AdkLedger(memory, Sessions(memory, session_options(settings)))
            sweep = threading.Thread(target=_sweep, args=(ledger,), daemon=True,
                                     name="ledgermem-adk-sweep")
            sweep.start()
            _opened[target] = (ledger, sweep)
    return LedgermemSessionService(ledger), LedgermemMemoryService(ledger)


def close_services() -> None:
    """Close every database ``open_services`` opened, after its start-up sweep, and
    cancel its idle timers; a later ``open_services`` opens it again."""
    with _opened_lock:
        opened = list(_opened.values())
        _opened.clear()
    for ledger, sweep in opened:
        sweep.join()
        ledger.sessions.close()
        ledger.memory.close()


def _sweep(ledger: AdkLedger) -> None:
    try:
        ledger.sessions.start()
    except Exception:
        log.exception("the start-up sweep of ledgermem's ADK sessions failed")


def register(registry: Any = None) -> None:
    """Make ``ledgermem://`` a session and memory service URI of ADK's service registry
    (the global one by default), for ``adk web`` / ``adk api_server``: call it from
    the agents folder's ``services.py``, then pass ``--session_service_uri
    ledgermem://memory.db --memory_service_uri ledgermem://memory.db``."""
    if registry is None:
        from google.adk.cli.service_registry import get_service_registry

        registry = get_service_registry()
    registry.register_session_service(SCHEME, _session_factory)
    registry.register_memory_service(SCHEME, _memory_factory)


def _session_factory(uri: str, **_: Any) -> LedgermemSessionService:
    return open_services(uri)[0]


def _memory_factory(uri: str, **_: Any) -> LedgermemMemoryService:
    return open_services(uri)[1]
