"""The five memory tools as an MCP server, on the official ``mcp`` SDK's ``MCPServer``.

The tools are the agent layer's (``agent.tools``): the same names, descriptions and
argument models, so a model sees the same JSON schemas over MCP as through
``openai_tools()``, and every call goes through ``MemoryTools.run`` (the same
validation, the same readable errors, nothing stored by a call that fails). What this
module adds is the protocol: each tool publishes an output schema (the pydantic models
below) and answers with structured content; a refused or failed call is an MCP tool
error (``isError``) whose text is the readable message, never a traceback.

Whose memory a call reaches is decided by a ``Binding`` (the transport's side: one
configured user on stdio, the API key's user over HTTP), never by an argument: no tool
takes a user, and an ``entity`` or ``context`` argument only narrows within the bound
user's memory.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from ..agent.tools import TOOLS, Category, MemoryTools, ToolSpec
from ..aio import AsyncMemory, AsyncUserMemory
from ..memory import Memory

__all__ = [
    "INSTRUCTIONS",
    "RESULTS",
    "Binding",
    "ConversationsResult",
    "ForgetResult",
    "MemoryResult",
    "RecallHit",
    "RecallResult",
    "RememberResult",
    "TurnHit",
    "as_async",
    "bound_to",
    "build_server",
    "run_stdio",
]

logger = logging.getLogger(__name__)

SERVER_NAME = "ledgermem"
INSTRUCTIONS = (
    "Long-term memory about the user you are talking with, kept across conversations. "
    "Call recall before answering anything that may depend on what you were told "
    "earlier; call remember, one fact at a time, whenever the user shares something "
    "worth knowing later; correct with update_memory and delete with forget (both take "
    "an id from remember or recall); search_past_conversations finds what was said.")
"""What the server tells a client about its tools as a whole (``instructions``)."""


# results: what each tool answers, published as its output schema ---------------------
# (a model's docstring is its schema's description: plain words, for a client to show)
class _Result(BaseModel):
    # Unknown keys are refused, so a field the tools start returning fails the tests
    # until it is described here, instead of leaving the published schema behind.
    model_config = ConfigDict(extra="forbid")


class MemoryResult(_Result):
    """One memory as a tool result shows it; optional fields appear only when set.
    update_memory answers with the memory as it is after the change."""

    id: str = Field(description="The memory's id (for update_memory and forget).")
    content: str = Field(description="The remembered text.")
    category: Category
    context: str = Field(description="Life area, e.g. 'global', 'work', 'personal'.")
    confidence: float = Field(ge=0, le=1, description="How sure the memory is, 0 to 1.")
    created_at: str = Field(description="When it was first remembered (ISO 8601).")
    updated_at: str = Field(description="When it last changed (ISO 8601).")
    entity: str | None = Field(None, description="Who or what it is about, 'type:name'.")
    domain: str | None = Field(None, description="Topic, e.g. 'health'.")
    due_at: str | None = Field(None, description="When a reminder is due (ISO 8601).")
    reminded_at: str | None = Field(None, description="When the user was last told of it.")
    sensitive: bool = Field(False, description="Kept out of the always-shown prompt.")


class RememberResult(MemoryResult):
    """What remember answers: the memory stored, and whether it is new."""

    written: Literal["added", "merged"] = Field(description=(
        "added: a new memory; merged: it restated a stored one, which was refreshed."))


class RecallHit(MemoryResult):
    """One recall match."""

    score: float = Field(description="Relevance; higher is better.")


class RecallResult(_Result):
    """What recall answers: the best matches, best first (none when nothing matches)."""

    results: list[RecallHit]


class ForgetResult(_Result):
    """What forget answers: the id of the memory deleted."""

    forgotten: str


class TurnHit(_Result):
    """One message of a past conversation."""

    id: str
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(description="The message, cut at 2,000 characters.")
    ts: str = Field(description="When it was said (ISO 8601).")
    session_id: str = Field(description="The conversation it belongs to.")
    truncated: bool = Field(False, description="The content was cut.")
    score: float = Field(description="Relevance; higher is better.")


class ConversationsResult(_Result):
    """What search_past_conversations answers: the messages found."""

    turns: list[TurnHit]


RESULTS: Mapping[str, type[BaseModel]] = {
    "remember": RememberResult, "recall": RecallResult, "update_memory": MemoryResult,
    "forget": ForgetResult, "search_past_conversations": ConversationsResult,
}
"""Each tool's result model, whose JSON schema is the tool's output schema."""

_TITLES = {"remember": "Remember a fact", "recall": "Recall memories",
           "update_memory": "Update a memory", "forget": "Forget a memory",
           "search_past_conversations": "Search past conversations"}
_ANNOTATIONS = {
    "remember": ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                idempotent_hint=False, open_world_hint=False),
    "recall": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "update_memory": ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                     idempotent_hint=True, open_world_hint=False),
    "forget": ToolAnnotations(read_only_hint=False, destructive_hint=True,
                              idempotent_hint=True, open_world_hint=False),
    "search_past_conversations": ToolAnnotations(read_only_hint=True, open_world_hint=False),
}


# binding: whose memory a call reaches ------------------------------------------------
Binding = Callable[[Context[Any, Any]], AsyncUserMemory]
"""Gives the memory handle a tool call works on, from the call's context (the
transport's request); it raises ``PermissionError`` when the request is bound to no
user. Never reads the tool's arguments."""


def as_async(memory: Memory | AsyncMemory) -> AsyncMemory:
    """``memory`` as an ``AsyncMemory`` (a ``Memory`` is wrapped, not copied)."""
    return memory if isinstance(memory, AsyncMemory) else AsyncMemory.from_sync(memory)


class _AnyArguments(ArgModelBase):
    """Hands the arguments to the tool as they came: ``MemoryTools.run`` validates them
    against the tool's own model, so the errors read the same as everywhere else (and
    "5" is not coerced to 5, as pydantic's lax mode and the SDK's JSON pre-parsing
    would)."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def _tool(spec: ToolSpec, bind: Binding, *, long_term: bool) -> Tool:
    """``spec`` as an ``MCPServer`` tool whose calls run ``MemoryTools.run`` for the
    handle ``bind`` gives, in one of the memory's worker threads."""

    async def call(arguments: dict[str, Any], ctx: Context[Any, Any]) -> CallToolResult:
        try:
            handle = bind(ctx)
        except PermissionError as exc:
            return _failed(str(exc))
        tools = MemoryTools(handle.sync, long_term=long_term)
        # The memory's own worker threads: a call never blocks the event loop, and MCP
        # calls share the memory's thread limit with every other async caller.
        result = await handle._run(functools.partial(tools.run, spec.name, arguments))
        if "error" in result:
            return _failed(str(result["error"]))
        text = json.dumps(result, ensure_ascii=False)  # for clients that read text only
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=result)

    call.__name__ = spec.name
    return Tool(
        fn=call, name=spec.name, title=_TITLES[spec.name], description=spec.description,
        parameters=spec.parameters(), is_async=True, context_kwarg="ctx",
        fn_metadata=FuncMetadata(arg_model=_AnyArguments, output_model=RESULTS[spec.name]),
        annotations=_ANNOTATIONS[spec.name])


def _failed(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def build_server(bind: Binding, *, long_term: bool = True) -> MCPServer[Any]:
    """An ``MCPServer`` offering the five memory tools, each call on the memory ``bind``
    gives for it.

    Args:
        bind: whose memory a call reaches (see ``Binding``).
        long_term: False when long-term memory is off (``memory.enabled: false``): every
            call answers that it is off and touches nothing.
    """
    tools = [_tool(spec, bind, long_term=long_term) for spec in TOOLS.values()]
    with _root_logging_untouched():
        return MCPServer(SERVER_NAME, title="ledgermem", instructions=INSTRUCTIONS,
                         version=_version(), tools=tools)


def bound_to(handle: AsyncUserMemory) -> Binding:
    """The binding of a server that serves one user's memory (stdio)."""
    return lambda ctx: handle


async def run_stdio(memory: Memory | AsyncMemory, user: str, *, agent: str | None = None,
                    long_term: bool = True) -> None:
    """Serve ``user``'s memory (as ``agent``, when given) over stdin and stdout until
    the client closes the connection. The user is fixed here: no call can change it.

    Raises:
        InvalidInput: ``user`` (or ``agent``) is not a valid name.
    """
    handle = as_async(memory).for_user(user, agent)
    await build_server(bound_to(handle), long_term=long_term).run_stdio_async()


@contextmanager
def _root_logging_untouched() -> Iterator[None]:
    """``MCPServer()`` calls ``logging.basicConfig``, which gives the root logger a
    handler when it has none; a library must leave the root logger to the application,
    so it has one (a ``NullHandler``) while the server is built."""
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        yield
    finally:
        root.removeHandler(guard)


def _version() -> str:
    try:
        return version("ledgermem")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return ""
