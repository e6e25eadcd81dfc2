"""Prompts, each a function paired with the pydantic model its answer must fit.

Pure functions, no I/O: the pipeline builds messages here, the ``LLM`` provider sends
them, and the answer comes back validated as the paired model. Answers are read
leniently where a model's slip should cost one operation, not the whole answer: an
operation that does not fit is set aside in ``rejected`` and the others are kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from ..clock import iso, parse_when
from ..errors import InvalidInput
from ..types import CATEGORIES, Item, Turn

__all__ = [
    "DEFAULT_EXTRACTION_INSTRUCTIONS",
    "Consolidation",
    "ExtractionResult",
    "Fact",
    "Operation",
    "Verdict",
    "consolidation_messages",
    "entity_or_none",
    "extraction_messages",
    "reconcile_messages",
    "time_or_none",
]

Messages = list[dict[str, str]]

DEFAULT_EXTRACTION_INSTRUCTIONS = (
    "Keep durable facts about the user: identity (name, age, home, work, background), "
    "relationships and contacts (people they know, with names and roles), stable "
    "preferences and dislikes, ongoing goals and projects, and commitments, appointments "
    "and deadlines. Skip small talk, greetings, one-off questions and requests, and "
    "anything that is only true for a moment. Keep nothing from a message that only "
    "describes what the assistant did or said."
)
"""What extraction keeps unless ``Memory(extraction_instructions=...)`` says otherwise."""

_FIELDS = (
    f"category: one of {', '.join(CATEGORIES)}. "
    "entity: the main person, place, organisation or thing as 'type:name' (e.g. "
    "'person:sarah_chen', 'place:lisbon'), or null. "
    "context: a life area such as 'work' or 'personal', or null. "
    "due_at: for reminders and deadlines, the date-time in ISO 8601, resolved against the "
    "current date; otherwise null. "
    "sensitive: true for health, money, credentials, intimate or legal matters. "
    "valid_from: when the fact became true if the turns say so (ISO 8601), else null."
)


def _op_upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


class Operation(BaseModel):
    """One change extraction asks for. ``id`` is an alias shown in the prompt."""

    model_config = ConfigDict(extra="ignore")

    op: Literal["ADD", "UPDATE", "DELETE", "NOOP"]
    id: str | None = None
    content: str | None = None
    category: str | None = None
    entity: str | None = None
    context: str | None = None
    due_at: str | None = None
    sensitive: bool = False
    valid_from: str | None = None
    reason: str | None = None

    @field_validator("op", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return _op_upper(value)

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: Any) -> Any:
        """Ids as text: ``1`` and ``1.0`` read as ``"1"``; what text means is decided
        against the items shown (``extraction.target_of``)."""
        if isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value).strip() if isinstance(value, int | str) else value


def _lenient(data: Any, key: str, model: type[BaseModel]) -> Any:
    """Keep the entries of ``data[key]`` that fit ``model``; set the rest aside."""
    if isinstance(data, list):
        data = {key: data}
    if isinstance(data, dict) and isinstance(data.get(key), list):
        good: list[BaseModel] = []
        bad: list[str] = []
        for raw in data[key]:
            try:
                good.append(model.model_validate(raw))
            except ValidationError as exc:
                bad.append(f"{str(raw)[:200]}: {exc.errors()[0]['msg']}")
        return {**data, key: good, "rejected": bad}
    return data


class ExtractionResult(BaseModel):
    """What extraction answers: the operations to apply."""

    operations: list[Operation]
    rejected: SkipJsonSchema[list[str]] = Field(default_factory=list)
    """Operations that did not fit ``Operation`` (set aside, logged)."""

    @model_validator(mode="before")
    @classmethod
    def _keep_good(cls, data: Any) -> Any:
        return _lenient(data, "operations", Operation)


def extraction_messages(
    turns: Sequence[Turn], shown: Mapping[str, Item], *, instructions: str | None, now: str
) -> Messages:
    """The extraction prompt: new turns plus existing items under short aliases."""
    system = (
        "You maintain the long-term memory an assistant keeps about one user. You get new "
        "conversation turns and the memory items that may relate to them, and you decide "
        "what in memory should change.\n\n"
        f"What to keep: {instructions or DEFAULT_EXTRACTION_INSTRUCTIONS}\n\n"
        "Operations:\n"
        "- ADD: a new fact that memory lacks. content is one short, self-contained "
        "sentence about the user in the third person (\"Prefers green tea over coffee\", "
        "\"Sister Anna lives in Porto\").\n"
        "- UPDATE: an item the turns correct or make more precise: its id and the full "
        "new content. The old version is kept in history.\n"
        "- DELETE: an item the turns show is no longer true: its id and the reason.\n"
        "- NOOP: an item that needs no change (optional).\n"
        "Use only ids from the memory items list; never invent one. Prefer UPDATE to "
        "DELETE plus ADD. Do not add what memory already says. Give a short reason for "
        "every operation.\n"
        f"Fields: {_FIELDS}\n"
        'Answer as JSON: {"operations": [{"op": "ADD", "content": "...", "category": '
        '"fact", "entity": null, "context": null, "due_at": null, "sensitive": false, '
        '"reason": "..."}, {"op": "UPDATE", "id": "1", "content": "...", "reason": "..."}]}. '
        'Answer {"operations": []} when nothing is worth remembering.'
    )
    items = "\n".join(f"[{alias}] {_item_line(item)}" for alias, item in shown.items())
    said = "\n".join(f"[{_short(t.ts)}] {_speaker(t)}: {t.content}" for t in turns)
    user = (f"Current date: {_spoken(now)}\n\nMemory items:\n{items or '(none)'}\n\n"
            f"New conversation turns:\n{said}")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class Verdict(BaseModel):
    """How the newer of two similar items relates to the older."""

    relation: Literal["reinforce", "contradict", "weaken", "neutral"]
    reason: str = ""

    @field_validator("relation", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


def reconcile_messages(older: Item, newer: Item) -> Messages:
    """The reconciliation prompt for one pair of similar items."""
    system = (
        "Two items from the long-term memory of an assistant about one user are similar. "
        "Say how the NEWER item relates to the OLDER one:\n"
        "- reinforce: it says the same thing or supports it;\n"
        "- contradict: both cannot be true now, and the newer one replaces the older;\n"
        "- weaken: it makes the older one less certain without refuting it;\n"
        "- neutral: they are compatible, different facts.\n"
        'Answer as JSON: {"relation": "reinforce|contradict|weaken|neutral", '
        '"reason": "..."}'
    )
    user = f"OLDER: {_item_line(older)}\nNEWER: {_item_line(newer)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class Fact(BaseModel):
    """One piece of knowledge distilled from a conversation."""

    model_config = ConfigDict(extra="ignore")

    content: str = Field(min_length=1)
    category: str = "fact"
    entity: str | None = None
    context: str | None = None
    due_at: str | None = None
    sensitive: bool = False


class Consolidation(BaseModel):
    """What consolidation answers: the knowledge a past session holds."""

    items: list[Fact]
    rejected: SkipJsonSchema[list[str]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _keep_good(cls, data: Any) -> Any:
        return _lenient(data, "items", Fact)


def consolidation_messages(turns: Sequence[Turn], existing: Sequence[Item], *,
                           instructions: str | None) -> Messages:
    """The consolidation prompt: one past session, and what memory already holds."""
    system = (
        "You distil a past conversation between a user and an assistant into durable "
        "knowledge for the assistant's long-term memory.\n\n"
        f"What to keep: {instructions or DEFAULT_EXTRACTION_INSTRUCTIONS}\n\n"
        "Each item is one short, self-contained sentence about the user in the third "
        "person. Leave out what memory already holds.\n"
        f"Fields: {_FIELDS}\n"
        'Answer as JSON: {"items": [{"content": "...", "category": "fact", "entity": null, '
        '"context": null, "due_at": null, "sensitive": false}]}; {"items": []} when '
        "nothing is worth keeping."
    )
    known = "\n".join(f"- {_item_line(item)}" for item in existing)
    said = "\n".join(f"[{_short(t.ts)}] {_speaker(t)}: {t.content}" for t in turns)
    user = (f"Conversation date: {_spoken(turns[-1].ts) if turns else ''}\n\n"
            f"Memory already holds:\n{known or '(nothing)'}\n\nConversation:\n{said}")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def entity_or_none(value: str | None) -> str | None:
    """A model's entity if it looks like ``type:name``; anything else is dropped."""
    if not value or ":" not in value:
        return None
    kind, name = value.split(":", 1)
    return value if kind.strip() and name.strip() else None


def time_or_none(value: str | None, at: str) -> str | None:
    """A model's date as stored ISO 8601 (relative words read against ``at``), or None
    when it cannot be read."""
    if not value:
        return None
    try:
        return iso(parse_when(value, now=parse_when(at)))
    except InvalidInput:
        return None


def _item_line(item: Item) -> str:
    tags = [item.category]
    if item.entity:
        tags.append(item.entity)
    if item.context != "global":
        tags.append(f"context {item.context}")
    if item.due_at:
        tags.append(f"due {_short(item.due_at)}")
    return f"({', '.join(tags)}; recorded {_short(item.created_at)}) {item.content}"


def _speaker(turn: Turn) -> str:
    name = turn.metadata.get("name")
    return f"{turn.role} ({name})" if isinstance(name, str) and name else turn.role


def _short(timestamp: str) -> str:
    return timestamp[:16].replace("T", " ")


def _spoken(timestamp: str) -> str:
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    return f"{moment:%Y-%m-%d %H:%M} UTC ({moment:%A})"
