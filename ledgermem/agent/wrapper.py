"""Memory for any agent loop: ``MemoryAgent`` (sync), ``AsyncMemoryAgent`` and
``MemoryMixin`` for class-based agents.

One ``MemoryAgent`` serves one conversation, ``user`` on ``channel``, and hooks the
three points of an agent loop:

1. Before the model call, ``prepare(user_text)``: a slash command (``/remember``,
   ``/memory``, ``/forget``, ``/reset``, ``/help``) is run there and answered
   (``PreparedTurn.slash``) with no messages: it never reaches the model and is not
   stored as a turn. Any other text gives the messages to send: the frozen system
   prefix, the session's window (``Sessions.window``) and the user's message with the
   per-turn block before it; ``tools()`` (``anthropic_tools()``) gives the memory
   tools' schemas to offer with them.
2. Around tool calls: ``call_tool(name, arguments)`` runs a memory tool and answers
   with the JSON the model reads; ``run_tool(name, fn, *args, **kwargs)`` runs one of
   the host's own tools, logs it to tool history with its duration, and on failure
   re-raises after logging (the failure also becomes an ``error`` item, which later
   prefixes list under "Known errors", so the model avoids repeating it).
3. After the reply, ``finish(user_text, reply)``: both turns are recorded together
   through ``Sessions.record_turns`` (the user's clean text, never the message with
   the block), or neither when one is refused.

The prefix is frozen per session: it is built, with the session-start profile, at the
first ``prepare`` of a session and reused byte for byte until the session ends, so an
inference server can reuse its KV cache. A session ends when its turns are
consolidated (the idle timer, the start-up sweep, ``/reset``); the next ``prepare``
starts a new one. Memories written during a session (the ``remember`` tool,
``/remember``) show in the next session's prefix, not this one's: the model saw them
in the live conversation. Three things rebuild the prefix mid-session, each a new
cache key (``PreparedTurn.new_prefix``): ``set_context`` (what the prefix shows
depends on the active context), ``/forget`` (what was forgotten must leave every later
prompt), and a restart (a new ``MemoryAgent`` rebuilds it from what is stored then,
and resumes the window from the store).

Learning: ``finish`` does not queue per-turn extraction. The session is consolidated
when it goes idle (``Sessions``' timer: one LLM call with the whole conversation as
context, then the window is cleared) or on ``/reset``; queueing extraction too would
distil the same turns twice. Without an LLM the turns wait on disk (consolidation is
skipped and reported) and the model's ``remember`` tool still writes memories.
``/forget`` erases the user's long-term memory and keeps the sessions (their windows
still replay), but what was said before it is never distilled again
(``UserMemory.forget_all``).

Long-term memory off (``SessionOptions(enabled=False)``, ``memory.enabled: false``):
the agent is session only (``long_term``). No tools are offered, the prefix says memory
is off and shows nothing stored, the turn block gives the time only, memory tool calls
and ``/remember``, ``/memory``, ``/forget`` answer that memory is off, a failed host
tool is logged without becoming an ``error`` item, and the conversation is kept and
replayed but never consolidated.

Example:
    >>> agent = MemoryAgent(memory, user="alice", channel="telegram")   # doctest: +SKIP
    >>> turn = agent.prepare(text)
    >>> if turn.slash:
    ...     send(turn.slash.reply)
    ... else:
    ...     reply = run_model(turn.messages, tools=agent.tools(), on_tool=agent.call_tool)
    ...     agent.finish(text, reply)
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import anyio.to_thread

from ..aio import AsyncMemory, _InThread, _Offloading
from ..errors import InvalidInput, LedgermemError
from ..providers.llm import LLM
from ..store.base import TurnQuery
from ..types import Turn
from ..user_memory import UserMemory
from .prompt import (
    DEFAULTS,
    Profile,
    PromptOptions,
    profile,
    session_only_prefix,
    system_prefix,
    turn_block,
    with_turn_block,
)
from .sessions import SessionResult, Sessions, session_key
from .tools import MemoryTools, SlashCommands, SlashResult, anthropic_tools, openai_tools

if TYPE_CHECKING:
    from ..memory import Memory

__all__ = ["AsyncMemoryAgent", "MemoryAgent", "MemoryMixin", "PreparedTurn"]

log = logging.getLogger("ledgermem.agent")

P = ParamSpec("P")
R = TypeVar("R")

MAX_LOGGED_ARGUMENTS = 10_000
"""Longest JSON text of a host tool call's arguments kept in tool history; longer
arguments are kept as ``{"truncated": <the first characters>}``."""
MAX_LOGGED_ERROR = 2_000
"""Longest error message of a failed host tool call kept in tool history."""

_RESET_REPLIES = {
    "consolidated": "Started a fresh conversation; {items} memories were saved from it.",
    "cleared": "Started a fresh conversation. Nothing could be saved to memory from the "
               "last one ({why}); it stays searchable.",
}


@dataclass(frozen=True)
class PreparedTurn:
    """What ``prepare`` made of the user's text.

    Attributes:
        messages: the chat messages to send the model (``{"role", "content"}``): the
            frozen prefix as ``system``, the window's turns, then the user's message
            with the turn block. Empty for a slash command.
        slash: the slash command run instead (its ``reply`` goes to the person, not
            the model); ``None`` for an ordinary message.
        session_id: the session, ``{user}:{channel}``.
        prefix: the frozen prefix in use (``None`` for a slash command).
        new_prefix: the prefix was (re)built by this call: a new session, a context
            switch, ``/forget`` or a restart. A new prefix is a new cache key.
        reset: what ``/reset`` did to the session; ``None`` otherwise.
    """

    messages: list[dict[str, str]]
    slash: SlashResult | None
    session_id: str
    prefix: str | None = None
    new_prefix: bool = False
    reset: SessionResult | None = None

    @property
    def handled(self) -> bool:
        """The text was a slash command, answered without the model."""
        return self.slash is not None


class MemoryAgent:
    """Long-term memory for one conversation of any agent loop (see the module's doc).

    Args:
        memory: the ``Memory`` the user's knowledge, turns and tool history live in.
        user: the canonical user id (``UserDirectory.resolve`` maps a channel's sender
            to it, so one person shares one memory on every channel).
        channel: where the conversation happens; the session is ``{user}:{channel}``.
        sessions: the sessions layer (one per process, shared by its agents, started
            once with ``Sessions.start()``); default: a new ``Sessions(memory)``,
            owned and closed by this agent, not swept.
        options: what the profile and the prefix show.
        context: the active context (``work``, ``personal``); ``global`` items show in
            every context.
        llm: the model that distils the profile (default: the memory's LLM).

    Use one agent from one thread at a time, for one conversation.

    Raises:
        InvalidInput: a bad user, channel or context, or ``sessions`` over another
            ``Memory``.
    """

    def __init__(self, memory: Memory, *, user: str, channel: str,
                 sessions: Sessions | None = None, options: PromptOptions | None = None,
                 context: str = "global", llm: LLM | None = None) -> None:
        self.session_id = session_key(user, channel)
        if sessions is not None and sessions.memory is not memory:
            raise InvalidInput("sessions must belong to the same Memory as the agent")
        self.memory = memory
        self.user = user
        self.channel = channel
        self.options = options if options is not None else DEFAULTS
        self.llm = llm
        self._owns_sessions = sessions is None
        self.sessions = sessions if sessions is not None else Sessions(memory)
        self._lock = threading.RLock()
        self._prefix: str | None = None
        self._profile: Profile | None = None
        self._anchor: str | None = None  # a turn of the session the prefix was built for
        self._bind(context)

    # state --------------------------------------------------------------------------
    @property
    def context(self) -> str:
        """The active context."""
        return self.handle.scope.context

    @property
    def profile(self) -> Profile | None:
        """The profile of the current prefix (``None`` before the first ``prepare``)."""
        return self._profile

    def _bind(self, context: str) -> None:
        if not isinstance(context, str) or not context.strip():
            raise InvalidInput(f"context must be a non-empty name, not {context!r:.60}")
        self.handle: UserMemory = self.memory.for_user(
            self.user, context=context.strip(), session_id=self.session_id)
        self.memory_tools = MemoryTools(self.handle, long_term=self.long_term)
        self.slash_commands = SlashCommands(self.handle, long_term=self.long_term)

    @property
    def long_term(self) -> bool:
        """Whether long-term memory is on (the sessions' ``enabled``, from
        ``memory.enabled``). Off, the agent is session only: no tools are offered, the
        prefix shows no memories, the turn block only the time, memory tool calls and
        ``/remember``, ``/memory``, ``/forget`` answer that memory is off, and nothing
        is learnt from the conversation (which is still kept and replayed)."""
        return self.sessions.options.enabled

    def set_context(self, context: str) -> None:
        """Switch the active context: the next ``prepare`` rebuilds the profile and the
        prefix for it (a new cache key), and the memory tools write to it by default.
        The session and its window are kept."""
        with self._lock:
            self._bind(context)
            self._prefix = None

    def reconfigure(self, options: PromptOptions) -> None:
        """New prompt settings (a configuration file that changed): the next
        ``prepare`` rebuilds the profile and the prefix with them (a new cache key);
        the session and its window are kept."""
        if not isinstance(options, PromptOptions):
            raise InvalidInput("options must be PromptOptions")
        with self._lock:
            self.options = options
            self._prefix = None

    # 1. before the model call -----------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        """The memory tools' schemas in the OpenAI function-calling format; none with
        long-term memory off (leave ``tools`` out of the request when empty)."""
        return openai_tools() if self.long_term else []

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """The memory tools' schemas in the Anthropic tool format; none with long-term
        memory off."""
        return anthropic_tools() if self.long_term else []

    def prepare(self, user_text: str) -> PreparedTurn:
        """Run a slash command, or build the messages for the model.

        Raises:
            InvalidInput: ``user_text`` is not text.
        """
        if not isinstance(user_text, str):
            raise InvalidInput(f"user_text must be text, not {type(user_text).__name__}")
        with self._lock:
            slash = self.slash_commands.handle(user_text)
            if slash is not None:
                return self._slash(slash)
            window = self.sessions.window(self.user, self.channel)
            prefix, new = self._session_prefix(window)
            block = turn_block(self.handle, context=self.context, reminders=self.long_term)
            messages = [{"role": "system", "content": prefix}]
            messages.extend({"role": turn.role, "content": turn.content} for turn in window
                            if turn.role in ("user", "assistant"))
            messages.append({"role": "user", "content": with_turn_block(block, user_text)})
            return PreparedTurn(messages, None, self.session_id, prefix, new)

    def _slash(self, slash: SlashResult) -> PreparedTurn:
        outcome = None
        if slash.reset:
            outcome = self.sessions.reset(self.user, self.channel)
            reply = _RESET_REPLIES.get(outcome.status, "Started a fresh conversation.")
            slash = replace(slash, reply=reply.format(items=outcome.items, why=outcome.why),
                            data={"status": outcome.status, "turns": outcome.turns,
                                  "items": outcome.items})
            self._prefix = None
        elif slash.command == "forget" and slash.data.get("forgotten"):
            self._prefix = None  # what was forgotten must leave every later prompt
        return PreparedTurn([], slash, self.session_id, reset=outcome)

    def _session_prefix(self, window: Sequence[Turn]) -> tuple[str, bool]:
        """The session's frozen prefix, built at its first turn; True when built now."""
        if self._prefix is not None and self._same_session(window):
            return self._prefix, False
        if not self.long_term:
            self._profile = Profile((), "off")
            self._prefix = session_only_prefix(self.options)
            self._anchor = window[0].id if window else None
            return self._prefix, True
        self._profile = profile(self.handle, self.options, self.llm, context=self.context)
        self._prefix = system_prefix(self.handle, self.options, context=self.context,
                                     profile=self._profile)
        self._anchor = window[0].id if window else None
        return self._prefix, True

    def _same_session(self, window: Sequence[Turn]) -> bool:
        """Whether the session the prefix was built for is still open: its anchor turn
        (the window's first turn then, or the first turn recorded since) is not
        consolidated. The window slides, so the anchor may have left it."""
        if self._anchor is None:
            return not window  # built before any turn: open until one is recorded
        if any(turn.id == self._anchor for turn in window):
            return True
        found = self.memory.store.query_turns(self.user, TurnQuery(ids=(self._anchor,)))
        return bool(found) and found[0].consolidated_at is None

    # 2. around tool calls ---------------------------------------------------------
    def call_tool(self, name: str, arguments: str | dict[str, Any] | None = None) -> str:
        """Run a memory tool call as the model sent it; the JSON the model reads back
        (an ``{"error", "code", "tool"}`` object when refused or failed, never an
        exception). Not logged to tool history: only the host's tools are."""
        return self.memory_tools.call(name, arguments)

    def is_memory_tool(self, name: str) -> bool:
        """Whether ``name`` goes to ``call_tool`` rather than ``run_tool``."""
        return self.memory_tools.is_memory_tool(name)

    def run_tool(self, name: str, fn: Callable[P, R], /, *args: P.args,
                 **kwargs: P.kwargs) -> R:
        """Run the host's tool ``fn(*args, **kwargs)`` and log the call to tool history
        (arguments, success, duration in ms, error). A failure is logged, becomes an
        ``error`` item (``Tool {name} failed: …``, source ``error_auto``), and is
        re-raised. A failure to log is itself logged and never hides the tool's
        outcome.

        Raises:
            InvalidInput: an empty ``name`` (before ``fn`` runs).
            Exception: whatever ``fn`` raised.
        """
        _check_tool_name(name)
        started = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self._record_call(name, args, kwargs, _elapsed_ms(started), exc)
            raise
        self._record_call(name, args, kwargs, _elapsed_ms(started), None)
        return result

    def _record_call(self, name: str, args: Sequence[Any], kwargs: dict[str, Any],
                     duration_ms: float, exc: BaseException | None) -> None:
        error = None if exc is None else _error_text(exc)
        try:
            self.handle.log_tool_call(name, _loggable(args, kwargs), success=exc is None,
                                      duration_ms=duration_ms, error=error,
                                      session_id=self.session_id,
                                      learn_error=self.long_term)
        except LedgermemError:
            log.exception("could not log the call of tool %r to tool history", name)

    # 3. after the reply -----------------------------------------------------------
    def finish(self, user_text: str, reply: str) -> tuple[Turn, Turn]:
        """Record the user's clean text (never the message with the turn block) and the
        reply as the session's next two turns, in one transaction, re-arming its idle
        timer. Learning is left to idle consolidation (see the module's doc): nothing
        is queued here.

        Raises:
            InvalidInput: either text is empty, overlong or holds what no store keeps
                (NUL); nothing is stored then, so a retry does not repeat the question.
        """
        with self._lock:
            said, answered = self.sessions.record_turns(
                self.user, self.channel, [("user", user_text), ("assistant", reply)])
            if self._prefix is not None and self._anchor is None:
                self._anchor = said.id
            return said, answered

    def close(self) -> None:
        """Cancel the idle timers of the sessions layer this agent made (nothing when
        it was given one). Pending sessions are picked up by the next sweep."""
        if self._owns_sessions:
            self.sessions.close()

    def __enter__(self) -> MemoryAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_tool_name(name: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"a tool's name must be a non-empty string, not {name!r:.60}")


def _elapsed_ms(started: float) -> float:
    return max(0.0, (time.perf_counter() - started) * 1000)


def _printable(text: str) -> str:
    """``text`` as every store keeps it: no NUL, no lone surrogate."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def _error_text(exc: BaseException) -> str:
    text = _printable(f"{type(exc).__name__}: {exc}".strip())
    return text if len(text) <= MAX_LOGGED_ERROR else text[:MAX_LOGGED_ERROR - 3] + "..."


def _json_value(value: Any) -> Any:
    """A value JSON and both stores keep: text for what JSON cannot say (objects,
    NaN, infinities)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return _printable(value)
    if isinstance(value, dict):
        return {_printable(str(key)): _json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return _printable(repr(value))


def _loggable(args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A host tool call's arguments as a JSON object: the keyword arguments, and the
    positional ones under ``*args``."""
    shown: dict[str, Any] = dict(kwargs)
    if args:
        shown["*args"] = list(args)
    try:
        value = _json_value(shown)
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):
        return {"unloggable": True}
    if len(text) > MAX_LOGGED_ARGUMENTS:
        return {"truncated": text[:MAX_LOGGED_ARGUMENTS]}
    result: dict[str, Any] = value
    return result


# async ----------------------------------------------------------------------------
class AsyncMemoryAgent(_Offloading[MemoryAgent]):
    """``MemoryAgent`` for asyncio and trio: the same methods, awaited, each run in one
    of the ``AsyncMemory``'s worker threads (its ``CapacityLimiter``); ``tools()`` and
    ``anthropic_tools()`` do no I/O and are not awaited. Takes ``MemoryAgent``'s
    arguments, with an ``AsyncMemory``.

    ``run_tool`` awaits a coroutine function in the event loop and runs a plain
    function in a worker thread, timing either and logging the call like the sync one.
    """

    def __init__(self, memory: AsyncMemory, *, user: str, channel: str,
                 sessions: Sessions | None = None, options: PromptOptions | None = None,
                 context: str = "global", llm: LLM | None = None) -> None:
        self._memory = memory
        self._agent = MemoryAgent(memory.sync, user=user, channel=channel,
                                  sessions=sessions, options=options, context=context,
                                  llm=llm)

    @property
    def sync(self) -> MemoryAgent:
        """The ``MemoryAgent`` underneath."""
        return self._agent

    @property
    def memory(self) -> AsyncMemory:
        return self._memory

    @property
    def session_id(self) -> str:
        return self._agent.session_id

    @property
    def context(self) -> str:
        return self._agent.context

    @property
    def profile(self) -> Profile | None:
        return self._agent.profile

    async def _run(self, call: Callable[[], R]) -> R:
        return await self._memory._run(call)

    def tools(self) -> list[dict[str, Any]]:
        """See ``MemoryAgent.tools`` (no I/O, not awaited)."""
        return self._agent.tools()

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """See ``MemoryAgent.anthropic_tools`` (no I/O, not awaited)."""
        return self._agent.anthropic_tools()

    def is_memory_tool(self, name: str) -> bool:
        """Whether ``name`` goes to ``call_tool`` rather than ``run_tool``."""
        return self._agent.is_memory_tool(name)

    set_context = _InThread(MemoryAgent.set_context)
    reconfigure = _InThread(MemoryAgent.reconfigure)
    prepare = _InThread(MemoryAgent.prepare)
    call_tool = _InThread(MemoryAgent.call_tool)
    finish = _InThread(MemoryAgent.finish)
    close = _InThread(MemoryAgent.close)

    async def run_tool(self, name: str, fn: Callable[..., Any], /, *args: Any,
                       **kwargs: Any) -> Any:
        """See ``MemoryAgent.run_tool``; ``fn`` may be a coroutine function."""
        _check_tool_name(name)
        started = time.perf_counter()
        try:
            if inspect.iscoroutinefunction(fn):
                result = await fn(*args, **kwargs)
            else:
                result = await anyio.to_thread.run_sync(functools.partial(fn, *args,
                                                                          **kwargs))
        except Exception as exc:
            await self._run(functools.partial(self._agent._record_call, name, args, kwargs,
                                              _elapsed_ms(started), exc))
            raise
        await self._run(functools.partial(self._agent._record_call, name, args, kwargs,
                                          _elapsed_ms(started), None))
        return result

    async def __aenter__(self) -> AsyncMemoryAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


# the mixin ------------------------------------------------------------------------
_ORDER = ("{cls} lists MemoryMixin after {base}, which defines __init__: "
          "MemoryMixin.__init__ may never run and memory would silently be off. Put "
          "MemoryMixin first: class {cls}(MemoryMixin, {base}).")


class MemoryMixin:
    """Memory for class-based agents: ``class MyAgent(MemoryMixin, Agent)``.

    ``MemoryMixin.__init__`` takes the keyword arguments ``memory``, ``user`` and
    ``channel`` (and optionally ``memory_sessions``, ``memory_options``,
    ``memory_context``, ``memory_llm``: ``MemoryAgent``'s ``sessions``, ``options``,
    ``context`` and ``llm``), sets ``self.memory_agent`` (a ``MemoryAgent``) and passes
    every other argument on to the next class's ``__init__``. The agent calls
    ``self.memory_agent.prepare`` / ``call_tool`` / ``run_tool`` / ``finish`` at the
    three hook points of its loop.

    A mixin that never runs must not fail silently. Defining a class that lists
    MemoryMixin after a base defining ``__init__`` raises ``TypeError`` (that base
    may not call ``super().__init__``); and constructing an instance whose
    ``__init__`` chain skipped ``MemoryMixin.__init__`` (an ``__init__`` that does not
    call ``super().__init__``) raises ``TypeError`` too.
    """

    memory_agent: MemoryAgent

    def __init__(self, *args: Any, memory: Memory, user: str, channel: str,
                 memory_sessions: Sessions | None = None,
                 memory_options: PromptOptions | None = None,
                 memory_context: str = "global", memory_llm: LLM | None = None,
                 **kwargs: Any) -> None:
        self.memory_agent = MemoryAgent(memory, user=user, channel=channel,
                                        sessions=memory_sessions, options=memory_options,
                                        context=memory_context, llm=memory_llm)
        super().__init__(*args, **kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mro = cls.__mro__
        mixin = mro.index(MemoryMixin)
        for base in mro[1:mixin]:
            if "__init__" in vars(base) and not issubclass(base, MemoryMixin):
                raise TypeError(_ORDER.format(cls=cls.__name__, base=base.__name__))
        if "__init__" in vars(cls):
            cls.__init__ = _checked_init(cls.__init__)  # type: ignore[method-assign]


def _checked_init(init: Callable[..., None]) -> Callable[..., None]:
    """``init``, then a check that ``MemoryMixin.__init__`` ran."""

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if not isinstance(vars(self).get("memory_agent"), MemoryAgent):
            raise TypeError(
                f"{type(self).__name__}.__init__ finished without running "
                "MemoryMixin.__init__: call super().__init__(memory=..., user=..., "
                "channel=..., ...) from it, or memory would silently be off.")

    return checked
