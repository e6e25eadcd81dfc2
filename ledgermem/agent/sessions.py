"""Durable short-term sessions: the conversation window, idle consolidation, ``/reset``,
and one person across channels.

A session is keyed ``{user}:{channel}`` (``session_key``) and is nothing but the turns
of that session in the store, both sides recorded: there is no separate buffer, so a
restart resumes the exact window and a crash loses nothing. The model sees
``window(user, channel)``: the last ``SessionOptions.window_turns`` user turns and their
replies among the turns not consolidated yet; the whole conversation stays on disk.

After each recorded turn an idle timer is (re)armed for
``SessionOptions.idle_consolidate_minutes``. When it fires, the whole session is
consolidated into long-term memory (one LLM call with the full conversation as
context, ``pipeline.consolidate.consolidate_session``) and cleared: its turns are
marked consolidated, so the next window starts empty. ``start()`` runs the start-up
sweep, which consolidates the sessions that went idle while the process was down and
arms timers for the remaining time of the others. There is no shutdown flush.

Idle consolidation is off when ``enabled`` (long-term memory at all) or
``auto_ingest`` is off. Without an LLM it is skipped, says so
(``Memory.report_skipped("consolidation", ...)``) and keeps the session.

``/reset`` (``Sessions.reset``) consolidates, then clears. The person asked for a clean
slate, so the window is cleared even when nothing could be distilled (no LLM, memory
off, a failed call, or turns consolidation leaves to extraction): the turns are then
marked with ``distilled: False`` and stay on disk, searchable with
``search_past_conversations``; the result says what happened.

The lock this layer takes per session holds only inside this process. Another process,
or ``maintain()`` beside it, may consolidate the same session at the same time: both
ask the model, and the store applies one answer (``consolidate_session`` reads the
turns again in the transaction that writes, and drops an answer for turns
consolidated meanwhile; the run that lost reports ``empty``).

``UserDirectory`` reads a users file (YAML) that maps ``(channel, sender)`` to one
canonical user id, so the same person shares one long-term memory on every channel
(each channel keeps its own session) and two senders on one channel stay apart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import yaml

from ..clock import iso
from ..domain.events import Kind, new_event
from ..errors import ConfigError, InvalidInput
from ..pipeline.consolidate import consolidate_session
from ..store.base import TurnQuery
from ..types import Scope, Turn

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = [
    "SessionOptions",
    "SessionResult",
    "Sessions",
    "Timer",
    "TimerFactory",
    "UserDirectory",
    "session_key",
]

log = logging.getLogger("ledgermem.sessions")

CHANNEL_KEY = "channel"
"""Turn metadata naming the channel: how the sweep tells this layer's sessions apart
from other sessions of the same user."""


def session_key(user: str, channel: str) -> str:
    """The durable session id of ``user`` on ``channel``: ``{user}:{channel}``.

    Raises:
        InvalidInput: an empty user or channel, or a channel holding ``:`` (the key
            must read back unambiguously; user ids may hold ``:``).
    """
    _check_name(user, "user")
    _check_name(channel, "channel")
    if ":" in channel:
        raise InvalidInput(f"a channel cannot contain ':' (got {channel!r:.60})")
    return f"{user}:{channel}"


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{what} must be a non-empty string, not {value!r:.60}")
    return value


@dataclass(frozen=True)
class SessionOptions:
    """Settings of the sessions layer (``sessions:`` and ``memory:`` blocks).

    Attributes:
        window_turns: user turns (with their replies) the model is given.
        idle_consolidate_minutes: quiet time after which a session is consolidated.
        enabled: long-term memory at all (``memory.enabled``); off = session only.
        auto_ingest: consolidate conversations when idle (``memory.auto_ingest``).
    """

    window_turns: int = 30
    idle_consolidate_minutes: float = 30
    enabled: bool = True
    auto_ingest: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.window_turns, bool) or not isinstance(self.window_turns, int) \
                or self.window_turns < 1:
            raise InvalidInput(f"window_turns must be a positive integer, not "
                               f"{self.window_turns!r}")
        minutes = self.idle_consolidate_minutes
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) \
                or not 0 < minutes < float("inf"):
            raise InvalidInput(f"idle_consolidate_minutes must be a positive number, not "
                               f"{minutes!r}")

    @property
    def consolidates_when_idle(self) -> bool:
        """Whether idle timers and the start-up sweep run."""
        return self.enabled and self.auto_ingest


Status = Literal["consolidated", "cleared", "skipped", "failed", "empty", "active"]


@dataclass(frozen=True)
class SessionResult:
    """What consolidating (or resetting) one session did.

    Attributes:
        session_id: the session (``{user}:{channel}``).
        status: ``consolidated`` (distilled and cleared), ``cleared`` (cleared without
            distilling: ``/reset`` when that was not possible), ``skipped`` (kept: no
            LLM, or memory off), ``failed`` (the LLM call failed; kept), ``empty``
            (nothing to consolidate) or ``active`` (a turn came in since; kept).
        turns: turns distilled or cleared.
        items: knowledge items written.
        why: why it was skipped, failed or only cleared.
    """

    session_id: str
    status: Status
    turns: int = 0
    items: int = 0
    why: str | None = None


class Timer(Protocol):
    """An idle timer: ``threading.Timer`` fits."""

    def start(self) -> None: ...

    def cancel(self) -> None: ...


TimerFactory = Callable[[float, Callable[[], None]], Timer]
"""Makes a timer (not started) that calls the function after that many seconds."""


def daemon_timer(seconds: float, function: Callable[[], None]) -> Timer:
    """The default ``TimerFactory``: a daemon ``threading.Timer`` (it never holds the
    process open; a session left pending is picked up by the next start-up sweep)."""
    timer = threading.Timer(seconds, function)
    timer.daemon = True
    return timer


class Sessions:
    """Durable ``{user}:{channel}`` sessions over one ``Memory``. Thread-safe.

    Args:
        memory: where turns and long-term memory live; its ``clock`` is the time source
            and its ``llm`` does the consolidation.
        options: window size, idle time and the on/off switches.
        timer_factory: makes the idle timers (inject one in tests).
        instructions: what consolidation keeps; defaults to the memory's
            ``extraction_instructions``.

    Example:
        >>> sessions = Sessions(memory)                   # doctest: +SKIP
        >>> sessions.start()                              # the start-up sweep
        >>> sessions.record("alice", "telegram", "user", "I'm vegetarian")
        >>> sessions.record("alice", "telegram", "assistant", "Noted!")
        >>> sessions.window("alice", "telegram")          # what the model is given
    """

    def __init__(self, memory: Memory, options: SessionOptions | None = None, *,
                 timer_factory: TimerFactory = daemon_timer,
                 instructions: str | None = None) -> None:
        self.memory = memory
        self.options = options or SessionOptions()
        self._timer_factory = timer_factory
        self._instructions = instructions if instructions is not None \
            else memory.extraction_instructions
        self._timers: dict[str, Timer] = {}
        self._lock = threading.Lock()
        self._session_locks: dict[str, threading.Lock] = {}
        self._closed = False

    # the conversation -------------------------------------------------------------
    def record(self, user: str, channel: str, role: str, content: str, *,
               metadata: Mapping[str, Any] | None = None) -> Turn:
        """Store one turn of ``user``'s session on ``channel`` and re-arm its idle timer.

        The caller records both sides: the person's clean message (without any block
        prepended for the model) and the reply. ``metadata`` (a JSON object) is kept
        with the turn, beside the channel.

        Raises:
            InvalidInput: a bad user, channel, role, content or metadata; nothing is
                stored then.
        """
        return self.record_turns(user, channel, [(role, content)], metadata=metadata)[0]

    def record_turns(self, user: str, channel: str, turns: Sequence[tuple[str, str]], *,
                     metadata: Mapping[str, Any] | None = None) -> list[Turn]:
        """Store several turns of the session, ``(role, content)`` in order, in one
        transaction, and re-arm its idle timer once. An exchange recorded this way
        lands whole or not at all: a refused reply never leaves its question alone in
        the window. ``metadata`` is kept with each turn.

        Raises:
            InvalidInput: a bad user, channel, role, content or metadata in any turn;
                nothing is stored then.
        """
        key = session_key(user, channel)
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidInput(f"metadata must be a JSON object, not "
                               f"{type(metadata).__name__}")
        kept = {**(metadata or {}), CHANNEL_KEY: channel}
        stored = self.memory.for_user(user).add_turns(
            [{"role": role, "content": content, "metadata": kept} for role, content in turns],
            session_id=key)
        if stored and self.options.consolidates_when_idle:
            self._arm(user, channel, stored[-1].id, self._idle_seconds)
        return stored

    def window(self, user: str, channel: str) -> list[Turn]:
        """What the model is given, oldest first: the last ``window_turns`` user turns
        and their replies, among the turns not consolidated yet (a session just
        consolidated or reset starts empty). Read from the store, so a restart resumes
        the exact window."""
        key = session_key(user, channel)
        store, wanted = self.memory.store, self.options.window_turns
        page = 4 * wanted + 4
        while True:
            newest = store.query_turns(user, TurnQuery(session_id=key), descending=True,
                                       limit=page)
            kept: list[Turn] = []
            users = 0
            for turn in newest:
                # Consolidation marks whole sessions, oldest first: what lies before a
                # consolidated turn was consolidated too.
                if turn.consolidated_at is not None or users == wanted:
                    return kept[::-1]
                users += turn.role == "user"
                kept.append(turn)
            if len(newest) < page:
                return kept[::-1]
            page *= 4

    def history(self, user: str, channel: str, limit: int | None = None) -> list[Turn]:
        """The whole conversation on disk (consolidated turns included), oldest first."""
        return self.memory.for_user(user).session_history(session_key(user, channel),
                                                          limit=limit)

    # consolidation ----------------------------------------------------------------
    def consolidate(self, user: str, channel: str) -> SessionResult:
        """Consolidate ``user``'s session on ``channel`` now and clear it. Kept (status
        ``skipped``) without an LLM or with memory off; kept (``failed``) when the call
        fails."""
        return self._consolidate(user, channel, clear_anyway=False)

    def reset(self, user: str, channel: str) -> SessionResult:
        """``/reset``: consolidate the session, then clear it, so the next window starts
        empty. Long-term memory is otherwise untouched.

        When nothing can be distilled (no LLM, memory off, or the call failed) the
        session is cleared all the same (status ``cleared``, ``why`` says why): its
        turns are marked but stay on disk and searchable.
        """
        self._cancel(session_key(user, channel))
        return self._consolidate(user, channel, clear_anyway=True)

    def discard(self, user: str, channel: str, why: str) -> SessionResult:
        """Clear the session without distilling anything (its owner deleted it): the
        idle timer is cancelled and the open turns are marked, with ``why``, so no
        later consolidation learns from them. They stay on disk, as every turn does."""
        key = session_key(user, channel)
        self._cancel(key)
        with self._lock:
            lock = self._session_locks.setdefault(key, threading.Lock())
        with lock:
            return SessionResult(key, "cleared", self._clear(user, key, why), why=why)

    def due(self) -> list[tuple[str, str]]:
        """``(user, channel)`` of the sessions idle for ``idle_consolidate_minutes`` or
        more (by the memory's clock) with turns not consolidated yet."""
        cutoff = iso(self.memory.clock() - self._idle)
        return [(user, channel) for user, channel, last_ts in self._pending()
                if last_ts <= cutoff]

    def consolidate_idle(self) -> list[SessionResult]:
        """Consolidate every session that is ``due()``; nothing when idle consolidation
        is off."""
        if not self.options.consolidates_when_idle:
            return []
        return [self._consolidate(user, channel, clear_anyway=False)
                for user, channel in self.due()]

    def sweep(self) -> list[SessionResult]:
        """The start-up sweep: consolidate the sessions that went idle while the process
        was down, and arm idle timers for the remaining time of the others."""
        if not self.options.consolidates_when_idle:
            return []
        now = self.memory.clock()
        results = []
        for user, channel, last_ts in self._pending():
            left = (self._idle - (now - datetime.fromisoformat(last_ts))).total_seconds()
            if left <= 0:
                results.append(self._consolidate(user, channel, clear_anyway=False))
            else:
                last = self._last_turn(user, session_key(user, channel))
                if last is not None:
                    self._arm(user, channel, last.id, left)
        return results

    def start(self) -> list[SessionResult]:
        """Start the layer: runs ``sweep()`` (it may call the LLM once per idle session;
        run it in a thread if start-up must not wait) and returns its results."""
        return self.sweep()

    def close(self) -> None:
        """Cancel the idle timers. Nothing is flushed: pending sessions stay in the
        store for the next idle timer or start-up sweep."""
        with self._lock:
            self._closed = True
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals --------------------------------------------------------------------
    @property
    def _idle(self) -> timedelta:
        return timedelta(minutes=self.options.idle_consolidate_minutes)

    @property
    def _idle_seconds(self) -> float:
        return self._idle.total_seconds()

    def _arm(self, user: str, channel: str, turn_id: str, seconds: float) -> None:
        key = session_key(user, channel)
        made: list[Timer] = []
        timer = self._timer_factory(seconds,
                                    lambda: self._fire(user, channel, turn_id, made[0]))
        made.append(timer)
        with self._lock:
            if self._closed:
                return
            old = self._timers.pop(key, None)
            self._timers[key] = timer
        if old is not None:
            old.cancel()
        timer.start()

    def _cancel(self, key: str) -> None:
        with self._lock:
            timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, user: str, channel: str, turn_id: str, timer: Timer) -> None:
        """The idle timer's callback: consolidate unless a turn came in since it was
        armed (a timer cancelled too late). Never raises: it runs on a timer thread."""
        key = session_key(user, channel)
        with self._lock:
            if self._timers.get(key) is timer:
                del self._timers[key]
        try:
            self._consolidate(user, channel, clear_anyway=False, armed_turn=turn_id)
        except Exception:
            log.exception("idle consolidation of session %s failed", key)

    def _consolidate(self, user: str, channel: str, *, clear_anyway: bool,
                     armed_turn: str | None = None) -> SessionResult:
        key = session_key(user, channel)
        with self._lock:
            lock = self._session_locks.setdefault(key, threading.Lock())
        with lock:
            last = self._last_turn(user, key)
            if armed_turn is not None and last is not None and last.id != armed_turn:
                return SessionResult(key, "active")
            if last is None or last.consolidated_at is not None:
                return SessionResult(key, "empty")
            why = self._cannot_distil()
            if why is None:
                assert self.memory.llm is not None
                counts = consolidate_session(self.memory.parts, Scope(user), key,
                                             self.memory.llm, instructions=self._instructions)
                if not counts["failed"]:
                    return self._settled(user, key, counts, clear_anyway)
                why = "the consolidation call failed"
                if not clear_anyway:
                    return SessionResult(key, "failed", why=why)
            elif not clear_anyway:
                return SessionResult(key, "skipped", why=why)
            return SessionResult(key, "cleared", self._clear(user, key, why), why=why)

    def _settled(self, user: str, key: str, counts: dict[str, int],
                 clear_anyway: bool) -> SessionResult:
        """The result of a consolidation that did not fail. Turns it leaves to
        extraction (queued with ``infer=True``) stay open; ``/reset`` clears them too,
        and extraction still learns them."""
        why = "its turns wait for extraction"
        left = self._clear(user, key, why) if clear_anyway else 0
        if counts["consolidated"]:
            return SessionResult(key, "consolidated", counts["turns"] + left,
                                 counts["extracted_items"])
        return SessionResult(key, "cleared", left, why=why) if left \
            else SessionResult(key, "empty")

    def _cannot_distil(self) -> str | None:
        """Why this session cannot be distilled now, reported once; None when it can."""
        if not self.options.enabled:
            return "long-term memory is off"
        if self.memory.llm is None:
            self.memory.report_skipped("consolidation", "no LLM configured")
            return "no LLM configured"
        return None

    def _clear(self, user: str, key: str, why: str) -> int:
        """Mark the session's open turns without distilling them (``/reset``). Read and
        marked in one transaction for the user, so a consolidation running beside this
        one (``maintain()``, another process) never marks a turn twice."""
        store = self.memory.store
        with store.writing_for(user):
            ids = [t.id for t in store.query_turns(user, TurnQuery(session_id=key))
                   if t.consolidated_at is None]
            if ids:
                store.append([new_event(Scope(user, None, key), iso(self.memory.clock()),
                                        Kind.TURN_CONSOLIDATED,
                                        {"ids": ids, "items": 0, "skipped": 0,
                                         "distilled": False, "reason": f"reset: {why}"})])
        if ids:
            log.info("session %s cleared without consolidating (%s)", key, why)
        return len(ids)

    def _last_turn(self, user: str, key: str) -> Turn | None:
        turns = self.memory.store.query_turns(user, TurnQuery(session_id=key),
                                              descending=True, limit=1)
        return turns[0] if turns else None

    def _pending(self) -> list[tuple[str, str, str]]:
        """``(user, channel, last_ts)`` of this layer's sessions with open turns."""
        store, found = self.memory.store, []
        for user in store.user_ids():
            for row in store.sessions(user):
                session_id: str = row["session_id"]
                prefix = f"{user}:"
                channel = session_id[len(prefix):]
                if not row["unconsolidated"] or not session_id.startswith(prefix) \
                        or not channel or ":" in channel:
                    continue
                last = self._last_turn(user, session_id)
                if last is not None and last.metadata.get(CHANNEL_KEY) == channel:
                    found.append((user, channel, str(row["last_ts"])))
        return found


# one person across channels -------------------------------------------------------------
class UserDirectory:
    """Maps ``(channel, sender)`` to a canonical user id, from a users file.

    The file (YAML)::

        users:
          alice:
            - {channel: telegram, sender: "12345"}
            - {channel: slack, sender: U01}

    A sender not in the file gets ``{channel}:{sender}``: stable, and apart from
    everyone else. Configured ids cannot contain ``:``, so they never collide with
    those.
    """

    def __init__(self, users: Mapping[tuple[str, str], str] | None = None) -> None:
        self._users = dict(users or {})

    @classmethod
    def from_file(cls, path: str | Path) -> UserDirectory:
        """Read a users file.

        Raises:
            ConfigError: the file is missing, unreadable, not YAML, or malformed (the
                message says where).
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the users file {path}: {exc}") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"the users file {path} is not valid YAML: {exc}") from exc
        return cls.from_mapping(data, where=str(path))

    @classmethod
    def from_mapping(cls, data: Any, *, where: str = "the users file") -> UserDirectory:
        """Build from parsed YAML (``{"users": {id: [{channel, sender}, ...]}}``; an
        empty file or ``users:`` with nothing under it is an empty directory).

        Raises:
            ConfigError: anything malformed, or one sender mapped to two users.
        """
        if data is None:
            return cls()
        if not isinstance(data, dict) or set(data) - {"users"}:
            raise ConfigError(f"{where}: expected a mapping with one key, 'users'")
        users = data.get("users") or {}
        if not isinstance(users, dict):
            raise ConfigError(f"{where}: 'users' must map user ids to lists of "
                              "{channel, sender}")
        found: dict[tuple[str, str], str] = {}
        for user, senders in users.items():
            if not isinstance(user, str) or not user.strip() or ":" in user:
                raise ConfigError(f"{where}: user id {user!r} must be a non-empty string "
                                  "without ':'")
            if not isinstance(senders, list):
                raise ConfigError(f"{where}: users.{user} must be a list of "
                                  "{channel, sender}")
            for n, entry in enumerate(senders):
                at = f"{where}: users.{user}[{n}]"
                if not isinstance(entry, dict) or set(entry) != {"channel", "sender"}:
                    raise ConfigError(f"{at} must have exactly 'channel' and 'sender'")
                channel, sender = (_config_name(entry[k], f"{at}.{k}")
                                   for k in ("channel", "sender"))
                if ":" in channel:
                    raise ConfigError(f"{at}.channel cannot contain ':'")
                other = found.setdefault((channel, sender), user)
                if other != user:
                    raise ConfigError(f"{at}: sender {sender!r} on {channel} is already "
                                      f"mapped to {other!r}")
        return cls(found)

    def resolve(self, channel: str, sender: str) -> str:
        """The canonical user id of ``sender`` on ``channel``; ``{channel}:{sender}``
        for a sender the file does not name.

        Raises:
            InvalidInput: an empty channel or sender, or a channel holding ``:``.
        """
        _check_name(channel, "channel")
        _check_name(sender, "sender")
        if ":" in channel:
            raise InvalidInput(f"a channel cannot contain ':' (got {channel!r:.60})")
        return self._users.get((channel, sender), f"{channel}:{sender}")

    def senders(self, user: str) -> list[tuple[str, str]]:
        """The ``(channel, sender)`` pairs mapped to ``user``."""
        return sorted(key for key, value in self._users.items() if value == user)


def _config_name(value: object, where: str) -> str:
    # YAML reads an unquoted numeric sender (a phone number, a chat id) as an int.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a non-empty string, not {value!r:.60}")
    return value
