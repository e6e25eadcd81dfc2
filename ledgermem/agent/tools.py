"""The five memory tools a model can call, their dispatcher, and the slash commands.

Each tool's arguments are one pydantic model (``RememberArguments``…): its JSON schema
is what the model is shown (``openai_tools()``, ``anthropic_tools()``) and it validates
what the model sends. ``MemoryTools(handle).call(name, arguments)`` runs a call for one
user and always answers with a JSON string: the result with ids, or
``{"error", "code", "tool"}`` the model can read and act on. A call that fails changes
nothing stored.

``SlashCommands(handle).handle(text)`` runs ``/remember``, ``/memory``, ``/forget``,
``/reset`` and ``/help`` out of band, before the model: what it answers goes back to
the person, never to the model.

Example:
    >>> tools = MemoryTools(mem.for_user("alice"))                     # doctest: +SKIP
    >>> client.chat.completions.create(..., tools=openai_tools())      # doctest: +SKIP
    >>> tools.call(call.function.name, call.function.arguments)        # doctest: +SKIP
    '{"id": "…", "content": "Prefers green tea", "written": "added", …}'
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from ..errors import InvalidInput, LedgermemError, NotFound, StorageError
from ..types import CATEGORIES, MAX_CONTENT, Item, Turn
from ..user_memory import UserMemory
from ..validation import MAX_NAME_CHARS

__all__ = [
    "MEMORY_OFF_REPLY",
    "MEMORY_OFF_TOOL",
    "TOOLS",
    "TOOL_NAMES",
    "ForgetArguments",
    "MemoryTools",
    "RecallArguments",
    "RememberArguments",
    "SearchConversationsArguments",
    "SlashCommands",
    "SlashResult",
    "ToolSpec",
    "UpdateMemoryArguments",
    "anthropic_tools",
    "is_memory_tool",
    "openai_tools",
]

logger = logging.getLogger(__name__)

MAX_RESULTS = 50
"""Most hits one ``recall`` or ``search_past_conversations`` call returns."""
MAX_TURN_SHOWN = 2_000
"""Longest turn text put in a tool result; longer turns are cut and say ``truncated``."""
MAX_ERROR_CHARS = 1_000
"""Longest error message put in a tool result."""

Category = Literal["fact", "preference", "error", "skill", "note", "reminder"]
"""``types.CATEGORIES`` as a type (a test checks they match)."""

Content = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                           max_length=MAX_CONTENT)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1,
                                        max_length=MAX_NAME_CHARS)]
EntityText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3,
                                              max_length=2 * MAX_NAME_CHARS + 1)]
When = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Query = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Limit = Annotated[int, Field(ge=1, le=MAX_RESULTS)]
Confidence = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]

_ID = "The memory's id, as returned by remember or recall."
_WHEN = ("ISO 8601 ('2026-06-03T09:00:00+01:00') or plain English ('tomorrow 9am', "
         "'next friday at 5pm', 'in 3 days').")
_ENTITY = "Who or what it is about, as 'type:name', e.g. 'person:sarah_chen', 'place:lisbon'."
_CONTEXT = "Life area, e.g. 'work' or 'personal'."


# arguments --------------------------------------------------------------------------
class _Arguments(BaseModel):
    """What every tool's arguments share: unknown names are refused, types are not
    coerced ("5" is not 5), and an optional argument sent as null or "" counts as not
    given (models often send every parameter)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _absent_when_empty(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        optional = {name for name, info in cls.model_fields.items() if not info.is_required()}
        return {key: value for key, value in data.items()
                if not (key in optional and (value is None or
                                             (isinstance(value, str) and not value.strip())))}


class RememberArguments(_Arguments):
    """``remember``: store one durable fact verbatim."""

    content: Content = Field(description=(
        "The fact, written so it makes sense on its own later, e.g. 'Alice prefers "
        f"green tea over coffee'. At most {MAX_CONTENT} characters."))
    category: Category = Field("fact", description=(
        "fact (about the user or the world), preference (likes, dislikes, how they want "
        "things done), error (something that went wrong, to avoid), skill (how to do "
        "something), note, or reminder (give due_at)."))
    domain: Name | SkipJsonSchema[None] = Field(None, description=(
        "Optional topic, e.g. 'health', 'travel', 'python'."))
    due_at: When | SkipJsonSchema[None] = Field(None, description=(
        f"For reminders and deadlines: when it is due. {_WHEN}"))
    context: Name | SkipJsonSchema[None] = Field(None, description=(
        f"{_CONTEXT} Default: the current context."))
    sensitive: bool = Field(False, description=(
        "True for health, money, credentials, intimate or legal matters: kept out of "
        "the prompt the model always sees, returned only when recalled."))
    entity: EntityText | SkipJsonSchema[None] = Field(None, description=_ENTITY)


class RecallArguments(_Arguments):
    """``recall``: search long-term memory."""

    query: Query = Field(description=(
        "What to look for, in words or a question; words and meaning both count, and a "
        "time phrase ('last week') narrows it."))
    category: Category | SkipJsonSchema[None] = Field(None, description="Only this category.")
    context: Name | SkipJsonSchema[None] = Field(None, description=f"Only this context. {_CONTEXT}")
    entity: EntityText | SkipJsonSchema[None] = Field(
        None, description=f"Only items about it. {_ENTITY}")
    time_from: When | SkipJsonSchema[None] = Field(None, description=(
        f"Only memories written at or after this time. {_WHEN}"))
    time_to: When | SkipJsonSchema[None] = Field(None, description=(
        f"Only memories written at or before this time. {_WHEN}"))
    limit: Limit | SkipJsonSchema[None] = Field(None, description=(
        f"Most results to return (1-{MAX_RESULTS}); default: the configured recall "
        "limit (5)."))


class UpdateMemoryArguments(_Arguments):
    """``update_memory``: change fields of one memory by id."""

    id: Name = Field(description=_ID)
    content: Content | SkipJsonSchema[None] = Field(None, description=(
        f"The corrected text, replacing the old. At most {MAX_CONTENT} characters."))
    category: Category | SkipJsonSchema[None] = Field(None, description="The new category.")
    confidence: Confidence | SkipJsonSchema[None] = Field(None, description=(
        "How sure you are it is true, 0 to 1."))
    context: Name | SkipJsonSchema[None] = Field(None, description=_CONTEXT)
    entity: EntityText | SkipJsonSchema[None] = Field(None, description=_ENTITY)
    sensitive: bool | SkipJsonSchema[None] = Field(None, description=(
        "Mark as sensitive (true) or not (false)."))
    due_at: When | SkipJsonSchema[None] = Field(None, description=(
        f"A new due time; it will be mentioned again when due. {_WHEN}"))
    reminded_at: Literal["now"] | SkipJsonSchema[None] = Field(None, description=(
        "Send 'now' once you have told the user about a due or upcoming item, so it is "
        "not brought up again until it falls due."))

    @model_validator(mode="after")
    def _changes_something(self) -> UpdateMemoryArguments:
        if not self.model_fields_set - {"id"}:
            raise ValueError("give at least one field to change besides id (content, "
                             "category, confidence, context, entity, sensitive, due_at, "
                             "or reminded_at='now')")
        return self


class ForgetArguments(_Arguments):
    """``forget``: delete one memory by id."""

    id: Name = Field(description=_ID)


class SearchConversationsArguments(_Arguments):
    """``search_past_conversations``: find past messages by words and/or time."""

    query: Query | SkipJsonSchema[None] = Field(None, description=(
        "Words or a question about what was said. Leave out to list the messages of a "
        "time range, newest first."))
    time_from: When | SkipJsonSchema[None] = Field(None, description=(
        f"Only messages at or after this time. {_WHEN}"))
    time_to: When | SkipJsonSchema[None] = Field(None, description=(
        f"Only messages at or before this time. {_WHEN}"))
    session_id: Name | SkipJsonSchema[None] = Field(None, description=(
        "Only this conversation (a session_id from an earlier result)."))
    limit: Limit = Field(10, description=f"Most messages to return (1-{MAX_RESULTS}).")

    @model_validator(mode="after")
    def _has_a_question(self) -> SearchConversationsArguments:
        if self.query is None and self.time_from is None and self.time_to is None:
            raise ValueError("give a query, a time range (time_from / time_to), or both")
        return self


# the tools --------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what the model is told about it, and its arguments' model."""

    name: str
    description: str
    arguments: type[_Arguments]

    def parameters(self) -> dict[str, Any]:
        """The arguments' JSON schema (an object; unknown properties refused)."""
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        schema.pop("description", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
            if "default" in prop and prop["default"] is None:
                del prop["default"]
            if "const" in prop:  # not every function-calling API reads "const"
                prop["enum"] = [prop.pop("const")]
        schema.setdefault("required", [])
        return schema

    def openai(self) -> dict[str, Any]:
        """The OpenAI function-calling format (Chat Completions ``tools``)."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": self.parameters()}}

    def anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages API tool format."""
        return {"name": self.name, "description": self.description,
                "input_schema": self.parameters()}


TOOLS: Mapping[str, ToolSpec] = {spec.name: spec for spec in (
    ToolSpec("remember", (
        "Save one durable fact to long-term memory, verbatim, for future conversations. "
        "Use it proactively, without being asked, whenever the user shares something "
        "worth knowing later: who they are, people in their life, preferences, goals, "
        "commitments and deadlines (category 'reminder' with due_at), or a lesson from "
        "something that went wrong. One fact per call. Restating a stored fact refreshes "
        "it instead of duplicating it. Returns the memory's id."), RememberArguments),
    ToolSpec("recall", (
        "Search long-term memory for what you know about the user or a topic. Use it "
        "before answering anything that may depend on earlier conversations or personal "
        "details you do not see in your prompt, and to find the id of a memory to update "
        "or forget. Returns the best matches with ids and scores, best first."),
     RecallArguments),
    ToolSpec("update_memory", (
        "Change a stored memory by id (from recall or remember): correct its text when "
        "the user says something changed, re-categorise it, or adjust confidence. Only "
        "the fields you give change. After telling the user about a due or upcoming "
        "item, call it with reminded_at='now' so it is not repeated."),
     UpdateMemoryArguments),
    ToolSpec("forget", (
        "Delete one memory by id (from recall), for good: when the user asks you to "
        "forget it, or it is plainly wrong and cannot be corrected with update_memory."),
     ForgetArguments),
    ToolSpec("search_past_conversations", (
        "Search the user's earlier conversations (their messages and your replies), by "
        "words, by time range, or both: for what was said rather than the facts kept, "
        "e.g. 'what did we discuss last Tuesday?' or the exact words of an earlier "
        "exchange. Returns messages with role, time and session_id, best first (newest "
        "first without a query)."), SearchConversationsArguments),
)}
"""The five memory tools by name, in the order they are offered to a model."""

TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)


def openai_tools() -> list[dict[str, Any]]:
    """The five tools in the OpenAI function-calling format (a fresh list per call)."""
    return [spec.openai() for spec in TOOLS.values()]


def anthropic_tools() -> list[dict[str, Any]]:
    """The five tools in the Anthropic tool format (a fresh list per call)."""
    return [spec.anthropic() for spec in TOOLS.values()]


def is_memory_tool(name: str) -> bool:
    """Whether ``name`` is one of the five memory tools (a host agent does not log
    these as its own tool calls)."""
    return name in TOOLS


class _Refused(Exception):
    """A call the dispatcher refused before reaching the memory; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class MemoryTools:
    """Runs the five memory tools for one user.

    ``call`` never raises for anything a model can send: the answer is always a JSON
    string, and a refused or failed call is ``{"error", "code", "tool"}`` with
    ``code`` one of ``unknown_tool``, ``memory_off`` (long-term memory is off:
    ``long_term=False``), ``invalid_arguments``, ``not_found``,
    ``invalid_input``, ``storage_error``, ``failed`` (``internal_error`` for a bug, logged
    with its traceback here, never shown to the model). Nothing is stored by a call that
    fails.
    """

    names: tuple[str, ...] = TOOL_NAMES

    def __init__(self, handle: UserMemory, *, long_term: bool = True) -> None:
        self.user_memory = handle
        self.long_term = long_term
        self._run: dict[str, Callable[[Any], dict[str, Any]]] = {
            "remember": self._remember, "recall": self._recall,
            "update_memory": self._update, "forget": self._forget,
            "search_past_conversations": self._conversations,
        }

    @staticmethod
    def is_memory_tool(name: str) -> bool:
        """See the module-level ``is_memory_tool``."""
        return is_memory_tool(name)

    @staticmethod
    def openai_tools() -> list[dict[str, Any]]:
        """See the module-level ``openai_tools``."""
        return openai_tools()

    @staticmethod
    def anthropic_tools() -> list[dict[str, Any]]:
        """See the module-level ``anthropic_tools``."""
        return anthropic_tools()

    def call(self, name: str, arguments: str | Mapping[str, Any] | None = None) -> str:
        """Run one tool call as the model sent it and answer with a JSON string.

        Args:
            name: the tool's name.
            arguments: a JSON object as text (OpenAI's ``function.arguments``) or
                already decoded (Anthropic's ``input``); ``None`` or ``""`` is ``{}``.
        """
        result = self.run(name, arguments)
        text = json.dumps(result, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in an echoed tool name
            text = json.dumps(result)
        return text

    def run(self, name: str, arguments: str | Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
        """``call``, answering with the result as a dict instead of JSON text."""
        try:
            spec = TOOLS.get(name) if isinstance(name, str) else None
            if spec is None:
                raise _Refused("unknown_tool", f"unknown tool {_show(name)}; the memory "
                                f"tools are {', '.join(TOOL_NAMES)}")
            if not self.long_term:
                raise _Refused("memory_off", MEMORY_OFF_TOOL)
            return self._run[spec.name](_validate(spec, _decode(arguments)))
        except _Refused as exc:
            return _error(name, exc.code, str(exc))
        except NotFound as exc:
            return _error(name, "not_found", str(exc))
        except InvalidInput as exc:
            return _error(name, "invalid_input", str(exc))
        except StorageError:
            logger.exception("memory tool %r: storage failed", name)
            return _error(name, "storage_error", "the memory store failed; try again later")
        except LedgermemError as exc:
            return _error(name, "failed", str(exc))
        except Exception:  # a bug must not end the agent's turn
            logger.exception("memory tool %r failed", name)
            return _error(name, "internal_error", "the memory tool failed unexpectedly")

    # the five tools ---------------------------------------------------------------
    def _remember(self, args: RememberArguments) -> dict[str, Any]:
        item = self.user_memory.remember(
            args.content, args.category, domain=args.domain, due_at=args.due_at,
            context=args.context, sensitive=args.sensitive, entity=args.entity,
            source="tool")
        return {**_item(item), "written": item.written}

    def _recall(self, args: RecallArguments) -> dict[str, Any]:
        hits = self.user_memory.search(
            args.query, category=args.category, context=args.context, entity=args.entity,
            time_from=args.time_from, time_to=args.time_to, top_k=args.limit)
        return {"results": [{**_item(hit.item), "score": round(hit.score, 4)}
                            for hit in hits if hit.item is not None]}

    def _update(self, args: UpdateMemoryArguments) -> dict[str, Any]:
        changes = {key: getattr(args, key) for key in args.model_fields_set
                   if key not in ("id", "reminded_at")}
        # Both writes or neither: a reminder noted on an item whose update was refused
        # would be a change from a failed call.
        with self.user_memory.memory.store.transaction():
            item = self.user_memory.update(args.id, **changes) if changes else None
            if args.reminded_at == "now":
                item = self.user_memory.mark_reminded(args.id)
        assert item is not None  # the arguments' model asks for one change at least
        return _item(item)

    def _forget(self, args: ForgetArguments) -> dict[str, Any]:
        self.user_memory.forget(args.id)
        return {"forgotten": args.id}

    def _conversations(self, args: SearchConversationsArguments) -> dict[str, Any]:
        hits = self.user_memory.search_conversations(
            args.query, time_from=args.time_from, time_to=args.time_to,
            session_id=args.session_id, limit=args.limit)
        return {"turns": [{**_turn(hit.turn), "score": round(hit.score, 4)}
                          for hit in hits if hit.turn is not None]}


def _decode(arguments: str | Mapping[str, Any] | None) -> Mapping[str, Any]:
    if arguments is None:
        return {}
    if isinstance(arguments, str | bytes | bytearray):
        if not arguments.strip():
            return {}
        try:
            decoded = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise _Refused("invalid_arguments",
                            f"arguments are not valid JSON: {_cut(str(exc), 200)}") from None
        arguments = decoded
    if not isinstance(arguments, Mapping):
        raise _Refused("invalid_arguments", "arguments must be a JSON object, not "
                        f"{type(arguments).__name__}")
    return arguments


def _validate(spec: ToolSpec, arguments: Mapping[str, Any]) -> Any:
    try:
        return spec.arguments.model_validate(dict(arguments))
    except ValidationError as exc:
        raise _Refused("invalid_arguments", _explain(spec, exc)) from None


def _explain(spec: ToolSpec, exc: ValidationError) -> str:
    """Pydantic's errors as one line a model can act on; never the input's text."""
    allowed = ", ".join(spec.arguments.model_fields)
    problems = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        if error["type"] == "none_required":
            continue  # the null branch of an optional argument: null was not sent
        where = str(error["loc"][0]) if error["loc"] else ""  # not the union branch
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown argument {_show(where)} (allowed: {allowed})")
        elif error["type"] == "missing":
            problems.append(f"missing required argument {_show(where)}")
        else:
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{_cut(where, 60)}: {message}" if where else message)
    problems = list(dict.fromkeys(problems))
    return _cut(f"invalid arguments for {spec.name}: " + "; ".join(problems), MAX_ERROR_CHARS)


def _error(name: object, code: str, message: str) -> dict[str, Any]:
    tool = name if isinstance(name, str) else repr(name)
    return {"error": _cut(message, MAX_ERROR_CHARS), "code": code, "tool": _cut(tool, 100)}


def _item(item: Item | None) -> dict[str, Any]:
    """What a tool result says about a knowledge item; optional fields only when set."""
    assert item is not None
    shown: dict[str, Any] = {
        "id": item.id, "content": item.content, "category": item.category,
        "context": item.context, "confidence": round(item.confidence, 4),
        "created_at": item.created_at, "updated_at": item.updated_at}
    for key in ("entity", "domain", "due_at", "reminded_at"):
        if getattr(item, key) is not None:
            shown[key] = getattr(item, key)
    if item.sensitive:
        shown["sensitive"] = True
    return shown


def _turn(turn: Turn | None) -> dict[str, Any]:
    assert turn is not None
    shown: dict[str, Any] = {"id": turn.id, "role": turn.role,
                             "content": turn.content[:MAX_TURN_SHOWN], "ts": turn.ts,
                             "session_id": turn.session_id}
    if len(turn.content) > MAX_TURN_SHOWN:
        shown["truncated"] = True
    return shown


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _show(value: object) -> str:
    return _cut(repr(value), 60)


# slash commands ---------------------------------------------------------------------
@dataclass(frozen=True)
class SlashResult:
    """What a slash command did, and the reply to show the person (not the model).

    The session layer's contract: when ``handle`` returns a result, the text is not
    sent to the model and is not stored as a turn; ``reply`` goes back to the person.
    When ``reset`` is True (``/reset``) nothing has been done yet: the session layer
    consolidates the session's conversation into long-term memory, then clears the
    session (a new one starts), and may replace ``reply`` with what happened.

    Attributes:
        command: ``remember``, ``memory``, ``forget``, ``reset`` or ``help`` (also for
            an unknown command and for a usage message).
        reply: readable text for the person.
        reset: the session must be consolidated and cleared (``/reset``).
        data: what a program may want: ``{"id", "written"}`` for ``/remember``,
            ``{"count", "total"}`` for ``/memory``, ``{"forgotten"}`` for ``/forget``.
    """

    command: str
    reply: str
    reset: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)


_COMMAND = re.compile(r"/([A-Za-z][A-Za-z0-9_-]*)(?:@\S+)?(?:\s+(.*))?", re.DOTALL)
MAX_LISTED = 100
"""Most memories ``/memory`` lists; it says how many more there are."""
MAX_LINE = 300
"""Longest memory text on one ``/memory`` line."""

HELP = (
    "Commands (handled here, never sent to the assistant):\n"
    "/remember <fact> - remember this exactly as written\n"
    "/memory - list what I remember about you\n"
    "/forget - erase everything I remember about you (conversations are kept)\n"
    "/reset - start a fresh conversation (it is saved to memory first)\n"
    "/help - this list"
)
MEMORY_OFF_REPLY = ("Long-term memory is off here: I remember only this conversation, "
                    "and nothing is stored about you.")
"""What ``/remember``, ``/memory`` and ``/forget`` answer with long-term memory off."""
MEMORY_OFF_TOOL = ("long-term memory is off for this conversation: nothing can be "
                   "remembered, recalled or forgotten")
"""The error a memory tool call answers with long-term memory off."""
_PLURAL = {"fact": "Facts", "preference": "Preferences", "error": "Things to avoid",
           "skill": "Skills", "note": "Notes", "reminder": "Reminders"}


class SlashCommands:
    """The in-chat commands, run for one user before anything reaches the model.

    A message is a command when it starts with ``/`` and a word followed by a space or
    its end (``/remember x``, ``/memory``, Telegram's ``/memory@my_bot``); a path
    such as ``/usr/bin is slow`` is an ordinary message. Every command answers with a
    reply; none raises for what a person can type.
    """

    def __init__(self, handle: UserMemory, *, long_term: bool = True) -> None:
        self.user_memory = handle
        self.long_term = long_term

    def handle(self, text: str) -> SlashResult | None:
        """Run ``text`` if it is a command; ``None`` when it is an ordinary message.
        With long-term memory off (``long_term=False``), ``/remember``, ``/memory`` and
        ``/forget`` answer that it is off and touch nothing; ``/reset`` still starts a
        fresh conversation."""
        match = _COMMAND.fullmatch(text.strip())
        if match is None:
            return None
        command, rest = match.group(1).lower(), (match.group(2) or "").strip()
        if not self.long_term and command in ("remember", "memory", "memories", "forget"):
            return SlashResult("memory" if command == "memories" else command,
                               MEMORY_OFF_REPLY)
        if command == "reset" and not self.long_term:
            return SlashResult("reset", "Starting a fresh conversation.", reset=True)
        if command == "remember":
            return self._remember(rest)
        if command in ("memory", "memories"):
            return self._list()
        if command == "forget":
            return self._forget(rest)
        if command == "reset":
            return SlashResult("reset", "Starting a fresh conversation. What we said is "
                               "saved to memory first.", reset=True)
        if command == "help":
            return SlashResult("help", HELP)
        return SlashResult("help", f"Unknown command /{_cut(command, 40)}.\n{HELP}")

    def _remember(self, fact: str) -> SlashResult:
        if not fact:
            return SlashResult("remember", "Usage: /remember <fact>, e.g. "
                               "/remember I prefer green tea")
        if len(fact) > MAX_CONTENT:
            return SlashResult("remember", f"That is {len(fact):,} characters; I can keep "
                               f"at most {MAX_CONTENT:,}. Please shorten it.")
        try:
            item = self.user_memory.remember(fact, "fact", source="user")
        except LedgermemError as exc:
            return SlashResult("remember", f"Could not remember that: {_cut(str(exc), 200)}")
        said = ("Remembered" if item.written == "added"
                else "I already knew that; updated")
        return SlashResult("remember", f'{said}: "{item.content}"',
                           data={"id": item.id, "written": item.written})

    def _list(self) -> SlashResult:
        page = self.user_memory.all_knowledge(limit=MAX_LISTED)
        items: list[Item] = page["items"]
        total: int = page["total"]
        data = {"count": len(items), "total": total}
        if not items:
            return SlashResult("memory", "I don't remember anything about you yet.",
                               data=data)
        lines = [f"What I remember about you ({total}):"]
        for category in CATEGORIES:
            group = [item for item in items if item.category == category]
            if group:
                lines.append(f"{_PLURAL[category]}:")
                lines.extend(f"- {_line(item)}" for item in group)
        if total > len(items):
            lines.append(f"... and {total - len(items)} more.")
        return SlashResult("memory", "\n".join(lines), data=data)

    def _forget(self, rest: str) -> SlashResult:
        if rest:
            # "/forget my address" must not erase everything by surprise.
            return SlashResult("forget", "/forget takes nothing after it: it erases "
                               "everything I remember about you. To forget one thing, "
                               "ask me in a normal message.")
        try:
            count = self.user_memory.forget_all()
        except LedgermemError as exc:
            return SlashResult("forget", f"Could not forget: {_cut(str(exc), 200)}")
        reply = (f"Forgot everything I remembered about you ({count} "
                 f"{'memory' if count == 1 else 'memories'}). Our conversations are "
                 "kept; /reset starts a fresh one." if count else
                 "There was nothing to forget.")
        return SlashResult("forget", reply, data={"forgotten": count})


def _line(item: Item) -> str:
    text = _cut(" ".join(item.content.split()), MAX_LINE)
    notes = [note for note in (
        item.entity, None if item.context == "global" else item.context,
        f"due {item.due_at[:16].replace('T', ' ')} UTC" if item.due_at else None,
        "sensitive" if item.sensitive else None) if note]
    return f"{text} ({', '.join(notes)})" if notes else text
