"""Value types: frozen dataclasses shared by every layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CATEGORIES",
    "DECISIONS",
    "MAX_CONTENT",
    "PROPOSAL_STATUSES",
    "SOURCES",
    "START_CONFIDENCE",
    "Event",
    "Finding",
    "Hit",
    "Item",
    "ItemQuery",
    "Proposal",
    "Scope",
    "ToolCall",
    "Turn",
]

CATEGORIES = ("fact", "preference", "error", "skill", "note", "reminder")
"""Knowledge categories."""

SOURCES = ("user", "tool", "llm_extract", "heuristic", "error_auto", "discovery", "consolidation")
"""Where a knowledge item came from."""

START_CONFIDENCE = {
    "user": 0.8,
    "tool": 0.7,
    "error_auto": 0.5,
    "consolidation": 0.5,
    "llm_extract": 0.4,
    "discovery": 0.4,
    "heuristic": 0.3,
}
"""Confidence an item starts with, by source, unless the caller gives one."""

MAX_CONTENT = 2000
"""Longest content kept; longer content is cut and flagged in metadata."""

Visibility = Literal["private", "global"]


@dataclass(frozen=True)
class Scope:
    """Who a read or write belongs to. ``user_id`` is the isolation boundary."""

    user_id: str
    agent_id: str | None = None
    session_id: str | None = None
    context: str = "global"


@dataclass(frozen=True)
class Event:
    """One entry of the append-only ledger."""

    id: str
    ts: str
    user_id: str
    kind: str
    payload: dict[str, Any]
    agent_id: str | None = None
    session_id: str | None = None
    subject_id: str | None = None
    visibility: Visibility = "private"


@dataclass(frozen=True)
class Item:
    """A knowledge item: a fact, preference, skill, error, note or reminder."""

    id: str
    user_id: str
    category: str
    content: str
    source: str
    confidence: float
    created_at: str
    updated_at: str
    context: str = "global"
    domain: str | None = None
    agent_id: str | None = None
    entity: str | None = None
    sensitive: bool = False
    due_at: str | None = None
    reminded_at: str | None = None
    superseded_by: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None
    last_used_at: str | None = None
    use_count: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    written: Literal["added", "merged"] | None = field(default=None, compare=False,
                                                          repr=False)
    """Set on what ``remember`` returns: ``added`` (a new item) or ``merged`` (the text
    restated this existing item, which was refreshed instead). Not stored."""

    @property
    def active(self) -> bool:
        """Neither superseded by a newer version nor invalidated."""
        return self.superseded_by is None and self.valid_to is None


@dataclass(frozen=True)
class Turn:
    """One conversation message, a view over ``turn.*`` events."""

    id: str
    user_id: str
    session_id: str
    role: str
    content: str
    ts: str
    agent_id: str | None = None
    consolidated_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    """One logged tool call of the host agent, a view over ``tool.called`` events."""

    id: str
    user_id: str
    name: str
    arguments: dict[str, Any]
    success: bool
    ts: str
    duration_ms: float | None = None
    error: str | None = None
    session_id: str | None = None
    agent_id: str | None = None


@dataclass(frozen=True)
class Hit:
    """A search result with the reasons it ranked where it did.

    ``why`` holds ``keyword_rank`` / ``vector_rank`` (1-based, absent when that
    retriever did not return it), their raw scores, the fused ``rrf`` score and the
    final ``score`` after salience. When the query named a time ("last week"),
    ``time_window_start`` / ``time_window_end`` give the window in POSIX seconds and
    ``time_rank`` the hit's rank among the rows inside it; a reranker adds
    ``rerank_rank`` and ``pre_rerank_score``; ``search_all`` adds ``knowledge_rank`` or
    ``conversation_rank``.
    """

    score: float
    item: Item | None = None
    turn: Turn | None = None
    why: dict[str, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The id of the item or turn found."""
        found = self.item or self.turn
        assert found is not None
        return found.id

    @property
    def content(self) -> str:
        """The text of the item or turn found."""
        found = self.item or self.turn
        assert found is not None
        return found.content


@dataclass(frozen=True)
class ItemQuery:
    """Filters shared by listing and searching knowledge. ``None`` means any.

    ``time_from`` / ``time_to`` bound when an item was written (``created_at``);
    ``valid_from_min`` / ``valid_from_max`` bound when it became true (``valid_from``, or
    ``created_at`` for an item without one). All four bounds are inclusive.
    """

    category: str | None = None
    context: str | None = None
    entity: str | None = None
    sensitive: bool | None = None
    source: str | None = None
    time_from: str | None = None
    time_to: str | None = None
    include_superseded: bool = False
    ids: tuple[str, ...] | None = None
    content: str | None = None
    contents: tuple[str, ...] | None = None
    """Any of these exact texts (``content``: this one)."""
    valid_from_min: str | None = None
    valid_from_max: str | None = None


DECISIONS = ("approved", "edited", "rejected")
"""What a person can decide about a proposal: store it as proposed, store it with
changes, or drop it."""

PROPOSAL_STATUSES = ("pending", *DECISIONS)
"""Where a proposal stands: waiting for a person, or decided."""


@dataclass(frozen=True)
class Finding:
    """Something a proposer (the system-discovery bootstrap, an agent's
    self-improvement loop, a reflection, an import) suggests remembering about the user.

    A finding is never stored as knowledge on its own: ``UserMemory.propose`` puts it in
    the review queue, and only a person's approval makes an item of it.

    Attributes:
        content: the text to remember if approved.
        category: the item's category (``fact``, ``preference``, ``skill``…).
        context: the item's context; None: the handle's.
        entity: ``type:name`` the finding is about, if any.
        sensitive: whether the item stays out of prompts (kept on approval).
        confidence: the item's starting confidence (discovery: 0.4).
        source: the item's source (``discovery`` for the bootstrap's scanners).
        why: where it was found, shown to the reviewer (blanked on rejection).
        key: what the finding is about, stable from one scan to the next (e.g.
            ``git:repo:github.com/acme/widgets``): a finding whose key is already
            pending or approved is not proposed twice.
    """

    content: str
    category: str = "fact"
    context: str | None = None
    entity: str | None = None
    sensitive: bool = False
    confidence: float = 0.4
    source: str = "discovery"
    why: str = ""
    key: str | None = None


@dataclass(frozen=True)
class Proposal:
    """A finding in the review queue, as the ledger's ``proposal.*`` events say it
    stands (JSON-friendly: ``dataclasses.asdict`` gives a plain object).

    ``status`` is ``pending``, ``approved``, ``edited`` (approved with ``changes``) or
    ``rejected``; an approved or edited proposal names the item it made (``item_id``).
    A rejected one keeps no text: its content, entity and why are blanked in the ledger.
    """

    id: str
    content: str
    category: str
    context: str
    source: str
    confidence: float
    proposer: str
    proposed_at: str
    status: Literal["pending", "approved", "edited", "rejected"] = "pending"
    entity: str | None = None
    sensitive: bool = False
    why: str = ""
    key: str | None = None
    decided_at: str | None = None
    item_id: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)
