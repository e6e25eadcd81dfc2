"""The ledger's vocabulary: every event kind, and the payload each kind carries.

An event is stored as a kind string and a JSON payload; this module is the one place
that names the kinds (``Kind``) and says what their payloads hold (one frozen
dataclass per payload shape, with ``to_payload`` / ``parse``). Code that writes
events builds them with ``new_event`` from these payloads; the projection
(``projection.py``) reads them back through ``parse``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from ..clock import new_id
from ..errors import InvalidInput
from ..types import Event, Item, Scope, Visibility

__all__ = [
    "FORGOTTEN",
    "MEMORY_KINDS",
    "PROPOSAL_KINDS",
    "ItemAdded",
    "ItemChanged",
    "ItemsScaled",
    "ItemsTouched",
    "Kind",
    "Payload",
    "ProposalDecided",
    "ProposalMade",
    "Pruned",
    "check_payload",
    "item_row",
    "new_event",
]


class Kind(StrEnum):
    """Every kind of ledger event ledgermem writes. Values are what the ledger stores."""

    MEMORY_ADDED = "memory.added"
    MEMORY_UPDATED = "memory.updated"
    MEMORY_SUPERSEDED = "memory.superseded"
    MEMORY_INVALIDATED = "memory.invalidated"
    MEMORY_RESTORED = "memory.restored"
    MEMORY_DELETED = "memory.deleted"
    MEMORY_RECALLED = "memory.recalled"
    MEMORY_DECAYED = "memory.decayed"
    MEMORY_PRUNED = "memory.pruned"
    MEMORY_COMPARED = "memory.compared"
    TURN_USER = "turn.user"
    TURN_ASSISTANT = "turn.assistant"
    TURN_SYSTEM = "turn.system"
    TURN_TOOL = "turn.tool"
    TURN_CONSOLIDATED = "turn.consolidated"
    TURNS_QUEUED = "turns.queued"
    TURNS_EXTRACTED = "turns.extracted"
    LLM_CALLED = "llm.called"
    TOOL_CALLED = "tool.called"
    PROPOSAL_MADE = "proposal.made"
    PROPOSAL_DECIDED = "proposal.decided"

    @classmethod
    def turn(cls, role: str) -> Kind:
        """The kind of a conversation turn spoken by ``role``."""
        return cls(f"turn.{role}")


FORGOTTEN = "forgotten"
"""The extraction state (``turns.extracted`` outcome) of turns said before the user
asked to forget everything (``forget_all``): kept in their sessions, never learnt from."""

CHANGE_KINDS = frozenset({Kind.MEMORY_UPDATED, Kind.MEMORY_SUPERSEDED,
                          Kind.MEMORY_INVALIDATED, Kind.MEMORY_RESTORED})
"""Kinds whose payload is an ``ItemChanged``: some fields of one item change."""

MEMORY_KINDS: tuple[str, ...] = (
    Kind.MEMORY_ADDED, Kind.MEMORY_UPDATED, Kind.MEMORY_SUPERSEDED, Kind.MEMORY_INVALIDATED,
    Kind.MEMORY_RESTORED, Kind.MEMORY_DELETED, Kind.MEMORY_RECALLED, Kind.MEMORY_DECAYED,
    Kind.MEMORY_PRUNED,
)
"""The kinds that change knowledge items (what ``as_of`` replays)."""

PROPOSAL_KINDS: tuple[str, ...] = (Kind.PROPOSAL_MADE, Kind.PROPOSAL_DECIDED)
"""The review queue's kinds: read from the ledger alone (``review.py``), they change no
view, so nothing proposed is searched or shown before a person approves it."""

_ITEM_FIELDS = frozenset(f.name for f in fields(Item))


@dataclass(frozen=True)
class Payload:
    """A typed event payload; ``to_payload`` gives the JSON object the ledger stores."""

    def to_payload(self) -> dict[str, Any]:
        """The JSON object stored in the ledger (empty optional fields left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None and v != ()}


@dataclass(frozen=True)
class ItemAdded(Payload):
    """``memory.added``: a new item (a new version when ``supersedes`` is set)."""

    item: Item
    reason: str | None = None
    source: str | None = None
    supersedes: str | None = None
    turn_ids: tuple[str, ...] = ()

    def to_payload(self) -> dict[str, Any]:
        # Built by hand: ``asdict`` copies every value recursively, and this runs for
        # every item written (a fifth of a batch write's time).
        payload: dict[str, Any] = {"item": item_row(self.item)}
        for name in ("reason", "source", "supersedes"):
            if (value := getattr(self, name)) is not None:
                payload[name] = value
        if self.turn_ids:
            payload["turn_ids"] = list(self.turn_ids)
        return payload

    @staticmethod
    def parse(payload: Mapping[str, Any]) -> Item:
        """The item an ``memory.added`` payload holds (unknown fields ignored)."""
        raw = payload["item"]
        return Item(**{k: v for k, v in raw.items() if k in _ITEM_FIELDS})


_TEXT_FIELDS = frozenset({"id", "user_id", "category", "content", "source", "created_at",
                          "updated_at", "context"})
_OPTIONAL_TEXT_FIELDS = frozenset({"domain", "agent_id", "entity", "due_at", "reminded_at",
                                   "superseded_by", "valid_from", "valid_to",
                                   "last_used_at"})


def _fits(name: str, value: Any) -> bool:
    """Whether ``value`` is of the type (and range) an item's field ``name`` holds;
    a field items do not have fits (``parse`` ignores it)."""
    if name in _TEXT_FIELDS:
        return isinstance(value, str)
    if name in _OPTIONAL_TEXT_FIELDS:
        return value is None or isinstance(value, str)
    if name == "confidence":
        return _number(value) and 0 <= value <= 1
    if name == "sensitive":
        return isinstance(value, bool)
    if name == "use_count":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if name == "metadata":
        return isinstance(value, Mapping)
    return True


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def check_payload(kind: str, payload: Mapping[str, Any]) -> None:
    """Refuse a payload of a knowledge kind that its projection would store as no item
    can be (a confidence of ``"high"``, a content that is no text): kept, it would fail
    every later read of the user's items. Other kinds are not looked at.

    Raises:
        InvalidInput: naming the kind and the field.
    """
    if kind == Kind.MEMORY_ADDED:
        fields_of = payload.get("item")
    elif kind in CHANGE_KINDS:
        fields_of = payload.get("changes", {})
    elif kind in (Kind.MEMORY_RECALLED, Kind.MEMORY_DECAYED):
        number = payload.get("boost" if kind == Kind.MEMORY_RECALLED else "factor")
        ids = payload.get("ids")
        if not (_number(number) and isinstance(ids, list)
                and all(isinstance(i, str) for i in ids)):
            raise InvalidInput(f"{kind}: needs a list of ids and a finite number")
        return
    else:
        return
    if not isinstance(fields_of, Mapping):
        raise InvalidInput(f"{kind}: its item's fields must be an object")
    for name, value in fields_of.items():
        if not _fits(name, value):
            raise InvalidInput(f"{kind}: an item's {name} cannot be {value!r:.60}")


_ROW_FIELDS = tuple(f.name for f in fields(Item) if f.name != "written")


def item_row(item: Item) -> dict[str, Any]:
    """``item``'s stored fields as a new dict (``written`` is what a call returns, not
    what is stored); its metadata is a copy, so the dict can be changed apart."""
    row = {name: getattr(item, name) for name in _ROW_FIELDS}
    row["metadata"] = dict(item.metadata)
    return row


@dataclass(frozen=True)
class ItemChanged(Payload):
    """``memory.updated`` / ``superseded`` / ``invalidated`` / ``restored``: fields of
    one item (the event's subject) take new values."""

    changes: Mapping[str, Any]
    reason: str | None = None
    source: str | None = None
    previous: str | None = None
    """The content before a change of content (kept for ``history``)."""
    by: str | None = None
    """The version that supersedes the subject."""
    restored: str | None = None
    """The earlier version whose restore invalidated the subject."""
    turn_ids: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Further provenance (the dedup merge's ``why``, reconciliation's similarity…)."""

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"changes": dict(self.changes)}
        for name in ("reason", "source", "previous", "by", "restored"):
            if (value := getattr(self, name)) is not None:
                payload[name] = value
        if self.turn_ids:
            payload["turn_ids"] = list(self.turn_ids)
        return {**payload, **self.extra}

    @staticmethod
    def parse(payload: Mapping[str, Any]) -> dict[str, Any]:
        """The item fields a change payload sets (unknown and fixed fields ignored)."""
        return {k: v for k, v in payload.get("changes", {}).items()
                if k in _ITEM_FIELDS - {"id", "user_id", "created_at"}}


@dataclass(frozen=True)
class ItemsTouched(Payload):
    """``memory.recalled``: items were returned by searches; each gains ``boost``
    confidence (capped at 1), a use, and ``last_used_at`` = the event's time."""

    ids: tuple[str, ...]
    boost: float

    def to_payload(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "boost": self.boost}


@dataclass(frozen=True)
class ItemsScaled(Payload):
    """``memory.decayed``: the confidence of unused items is multiplied by ``factor``."""

    ids: tuple[str, ...]
    factor: float

    def to_payload(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "factor": self.factor}


@dataclass(frozen=True)
class Pruned(Payload):
    """``memory.pruned``: items, turns and tool calls removed by ``prune``."""

    items: Sequence[str] = ()
    turns: Sequence[str] = ()
    tools: Sequence[str] = ()

    def to_payload(self) -> dict[str, Any]:
        return {"items": list(self.items), "turns": list(self.turns),
                "tools": list(self.tools)}


@dataclass(frozen=True)
class ProposalMade(Payload):
    """``proposal.made``: a finding put in the review queue (the event's subject is the
    proposal's id). What the reviewer sees beyond the item's fields, ``why`` and
    ``key``, is kept under ``metadata``, so that a rejection (``Store.redact`` of the
    proposal) blanks it along with ``content`` and ``entity``."""

    content: str
    category: str
    context: str
    source: str
    confidence: float
    proposer: str
    sensitive: bool = False
    entity: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Any]:
        payload = super().to_payload()
        payload["metadata"] = dict(self.metadata)
        return payload


@dataclass(frozen=True)
class ProposalDecided(Payload):
    """``proposal.decided``: a person approved (``approved``), approved with
    ``changes`` (``edited``) or rejected (``rejected``) a proposal, the event's
    subject. An approval names the item it made (``item_id``)."""

    decision: str
    item_id: str | None = None
    changes: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def to_payload(self) -> dict[str, Any]:
        payload = super().to_payload()
        payload["changes"] = dict(self.changes)
        return payload


def new_event(scope: Scope, ts: str, kind: Kind | str, payload: Payload | dict[str, Any], *,
              subject_id: str | None = None, session_id: str | None = None,
              visibility: Visibility = "private") -> Event:
    """A ledger event of ``scope``'s user (its agent and session) at ``ts``.

    ``kind`` is one of ``Kind`` or, for events ledgermem only stores (an application's
    own kinds, such as the multi-agent views' ``agent.reflected``), any kind string.
    ``visibility`` is ``private`` (to the agent) or ``global`` (to every agent of the
    user).
    """
    data = payload.to_payload() if isinstance(payload, Payload) else payload
    return Event(id=new_id(), ts=ts, user_id=scope.user_id, kind=str(kind), payload=data,
                 agent_id=scope.agent_id, session_id=session_id or scope.session_id,
                 subject_id=subject_id, visibility=visibility)
