"""OpenAI Agents SDK: a ``Session`` over ledgermem's durable, windowed sessions.

One line gives a ``Runner`` a memory that survives restarts::

    from ledgermem import Memory
    from ledgermem.adapters.openai_agents import LedgermemSession

    session = LedgermemSession(Memory.open("memory.db"), user="alice")
    result = await Runner.run(agent, "Hi again", session=session)

The session is ``session_key(user, channel)`` of the agent layer (``Sessions``): every
item the SDK adds is one turn of the user's ledger (its text, or a one-line summary of
a tool call or result, with the whole item as JSON in the turn's metadata; an item over
``MAX_JSON_CHARS`` of JSON is kept with its longest strings cut, and flagged), the model
is given the window (the last ``SessionOptions.window_turns`` user turns and everything
after them, among the turns not consolidated yet), and a session left idle for
``idle_consolidate_minutes`` is consolidated into long-term memory (with an LLM) and
starts empty. ``clear_session`` does that at once (``/reset``); ``pop_item`` takes the
last item out of the history and out of what consolidation and extraction learn from.

``memory_tools(handle)`` gives an agent ledgermem's five memory tools (``remember``,
``recall``, ``update_memory``, ``forget``, ``search_past_conversations``) as SDK
function tools, so the model can reach what a consolidated session left behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread

from ..agent.sessions import (
    CHANNEL_KEY,
    SessionOptions,
    SessionResult,
    Sessions,
    session_key,
)
from ..agent.tools import MemoryTools
from ..aio import AsyncMemory, AsyncUserMemory
from ..clock import iso
from ..domain.events import FORGOTTEN, Kind, new_event
from ..errors import InvalidInput
from ..memory import Memory
from ..types import Scope, Turn
from ..user_memory import UserMemory
from . import missing_extra
from .session_items import item_metadata

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
    from agents.tool import FunctionTool
    from agents.tool_context import ToolContext
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra(__name__, "openai-agents", "openai-agents", exc) from exc

__all__ = ["DEFAULT_CHANNEL", "LedgermemSession", "memory_tools"]

DEFAULT_CHANNEL = "openai-agents"
"""The channel of a ``LedgermemSession`` made without one."""
ITEM_KEY = "openai_item"
"""Turn metadata: the SDK's input item, as JSON."""
POPPED = "openai.item.popped"
"""The agent event that takes a turn out of a session's items (``pop_item``)."""
SUMMARY_CHARS = 500
"""Longest tool call arguments or output kept in a turn's text."""
_ROLES = {"user": "user", "assistant": "assistant", "system": "system",
          "developer": "system"}

R = TypeVar("R")


class LedgermemSession:
    """The OpenAI Agents SDK's ``Session`` protocol over ledgermem's durable sessions.

    Args:
        memory: a ``Memory`` or ``AsyncMemory``, or a ``Sessions`` to share (one idle
            timer per session, however many ``LedgermemSession`` objects name it).
        user: the ledgermem user: the isolation boundary (one person, on every
            channel).
        channel: which conversation of the user (default ``openai-agents``); no ``:``.
        options: window size and idle consolidation (ignored when ``memory`` is a
            ``Sessions``).
        session_settings: the SDK's settings (``limit``: items ``get_items`` returns
            at most, within the window).
        threads: calls run in worker threads at once.

    Raises:
        InvalidInput: an empty user or channel, or a channel holding ``:``.
    """

    def __init__(self, memory: Memory | AsyncMemory | Sessions, user: str,
                 channel: str = DEFAULT_CHANNEL, *, options: SessionOptions | None = None,
                 session_settings: SessionSettings | None = None, threads: int = 8) -> None:
        if isinstance(memory, Sessions):
            self.sessions = memory
        else:
            sync = memory.sync if isinstance(memory, AsyncMemory) else memory
            if not isinstance(sync, Memory):
                raise InvalidInput(f"expected a Memory, AsyncMemory or Sessions, not "
                                   f"{type(memory).__name__}")
            self.sessions = Sessions(sync, options)
        self.session_id = session_key(user, channel)
        self.user, self.channel = user, channel
        # typed as the protocol declares it, so the session is an SDK ``Session``
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()
        self._limiter = anyio.CapacityLimiter(threads)

    @property
    def memory(self) -> Memory:
        """The ``Memory`` the session lives in."""
        return self.sessions.memory

    async def _run(self, call: Callable[[], R]) -> R:
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    # the Session protocol -----------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The window, oldest first: at most ``limit`` (or ``session_settings.limit``)
        of its latest items; all of them for None or a negative limit, none for 0, as
        the SDK's ``SQLiteSession``."""
        wanted = resolve_session_limit(limit, self.session_settings)
        items = await self._run(self._items)
        return _latest(items, wanted)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store the items as turns of the session, in one transaction, and re-arm its
        idle timer. An item over ``MAX_JSON_CHARS`` of JSON is kept with its longest
        strings cut, and its turn flagged (see ``item_metadata``).

        Raises:
            InvalidInput: an item that is not a JSON object; nothing is stored then.
        """
        limit, around = self.memory.limits.max_turn_chars, {CHANNEL_KEY: self.channel}
        rows = [(role, text, item_metadata(ITEM_KEY, data, around))
                for role, text, data in (_turn_of(item, limit) for item in items)]
        await self._run(lambda: self._add(rows))

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item out of the session (None when it has none): it leaves the
        window and is never consolidated or extracted; its turn stays in the ledger."""
        return await self._run(self._pop)

    async def clear_session(self) -> None:
        """``/reset``: consolidate the session into long-term memory (with an LLM), then
        clear it, so the next ``get_items`` starts empty (see ``Sessions.reset``)."""
        await self._run(lambda: self.sessions.reset(self.user, self.channel))

    # beyond the protocol ----------------------------------------------------------------
    async def consolidate(self) -> SessionResult:
        """Consolidate the session now without waiting for it to go idle."""
        return await self._run(lambda: self.sessions.consolidate(self.user, self.channel))

    async def history(self) -> list[TResponseInputItem]:
        """Every item the session ever held, consolidated ones included, oldest first."""
        return await self._run(lambda: self._items_of(
            self.sessions.history(self.user, self.channel)))

    # internals ----------------------------------------------------------------------
    def _items(self) -> list[TResponseInputItem]:
        return self._items_of(self.sessions.window(self.user, self.channel))

    def _items_of(self, turns: Sequence[Turn]) -> list[TResponseInputItem]:
        popped = self._popped()
        return [_item_of(t) for t in turns if t.id not in popped and _has_item(t)]

    def _popped(self) -> set[str]:
        handle = self.memory.for_user(self.user)
        return {str(e.payload.get("turn_id")) for e in handle.ledger_events(kinds=[POPPED])
                if e.session_id == self.session_id}

    def _add(self, rows: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        with self.memory.store.transaction():
            for role, text, metadata in rows:
                self.sessions.record(self.user, self.channel, role, text,
                                     metadata=metadata)

    def _pop(self) -> TResponseInputItem | None:
        with self.memory.store.writing_for(self.user):
            popped = self._popped()
            window = [t for t in self.sessions.window(self.user, self.channel)
                      if t.id not in popped and _has_item(t)]
            if not window:
                return None
            last = window[-1]
            handle = self.memory.for_user(self.user)
            handle.record(POPPED, {"turn_id": last.id}, session_id=self.session_id)
            # Extraction and consolidation skip forgotten turns: a retracted message is
            # not learnt.
            self.memory.store.append([new_event(
                Scope(self.user, None, self.session_id), iso(self.memory.clock()),
                Kind.TURNS_EXTRACTED, {"ids": [last.id], "outcome": FORGOTTEN,
                                       "reason": "popped from the session"})])
        return _item_of(last)


def _latest(items: list[TResponseInputItem], limit: int | None
            ) -> list[TResponseInputItem]:
    """The last ``limit`` items: all of them for None or a negative limit (SQLite's
    ``LIMIT -1``, which the SDK's ``SQLiteSession`` keeps), none for 0."""
    if limit is None or limit < 0:
        return items
    return items[-limit:] if limit else []


def _has_item(turn: Turn) -> bool:
    return ITEM_KEY in turn.metadata or turn.role in ("user", "assistant", "system")


def _item_of(turn: Turn) -> TResponseInputItem:
    """The SDK item a turn stores; a turn recorded by other code (``MemoryAgent`` on
    the same channel) reads as a plain message."""
    item: Any = turn.metadata.get(ITEM_KEY)
    if item is None:
        item = {"role": turn.role, "content": turn.content}
    return cast(TResponseInputItem, item)  # as given to add_items (or cut to fit)


def _summary(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "…"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text") or part.get("refusal") or "")
                         for part in content if isinstance(part, Mapping)).strip()
    return ""


def _turn_of(item: Any, limit: int) -> tuple[str, str, dict[str, Any]]:
    """``(role, text, item as JSON)`` of the turn that stores ``item``."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"a session item must be a JSON object, not "
                           f"{type(item).__name__}")
    data: dict[str, Any] = to_jsonable_python(dict(item), fallback=str)
    kind = data.get("type", "message")
    if kind == "function_call":
        role, text = "assistant", (f"[called {data.get('name')}("
                                   f"{_summary(data.get('arguments', ''))})]")
    elif kind == "function_call_output":
        role, text = "tool", f"[tool result: {_summary(data.get('output', ''))}]"
    elif "role" in data:
        role = _ROLES.get(str(data["role"]), "assistant")
        text = _text(data.get("content")) or f"[{data['role']} {kind}]"
    else:
        role, text = "assistant", f"[{kind}]"
    return role, text[:limit], data


# the memory tools -------------------------------------------------------------------------
def memory_tools(handle: UserMemory | AsyncUserMemory, *, long_term: bool = True,
                 threads: int = 4) -> list[FunctionTool]:
    """ledgermem's five memory tools for one user, as SDK function tools: give them to an
    ``Agent(tools=...)``. Each call runs ``MemoryTools.call`` in a worker thread and
    answers JSON; a bad call is a JSON error the model can read, never an exception."""
    sync = handle.sync if isinstance(handle, AsyncUserMemory) else handle
    tools = MemoryTools(sync, long_term=long_term)
    limiter = anyio.CapacityLimiter(threads)

    def make(spec: Mapping[str, Any]) -> FunctionTool:
        name = str(spec["name"])

        async def invoke(_: ToolContext[Any], arguments: str) -> str:
            return await anyio.to_thread.run_sync(tools.call, name, arguments,
                                                  limiter=limiter)

        return FunctionTool(name=name, description=str(spec.get("description", "")),
                            params_json_schema=dict(spec.get("parameters") or {}),
                            on_invoke_tool=invoke, strict_json_schema=False)

    return [make(tool["function"]) for tool in MemoryTools.openai_tools()]
