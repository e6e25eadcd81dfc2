"""What an event means, said once: ``project(event)`` → the row changes it makes.

The projection is pure: it reads the event and returns ``Insert`` / ``Update`` /
``Delete`` values naming a view table, the rows (by id, always within the event's
user) and the new values. The SQL stores render these as statements inside the
transaction that appends the event (``store/sql.py``); ``replay`` applies the
knowledge changes to items in memory for ``as_of``. ``rebuild`` is the stores'
projection of the whole ledger again, and ``verify`` the same into a scratch store.
Kinds the projection does not know only live in the ledger, and so do the review
queue's (``proposal.*``): a proposal is no item until a person approves it, and the
approval writes the item through the usual ``memory.added``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..types import Event, Item
from .events import (
    CHANGE_KINDS,
    PROPOSAL_KINDS,
    ItemAdded,
    ItemChanged,
    Kind,
    item_row,
)

__all__ = ["TEXT_KEPT_KINDS", "Add", "Change", "Delete", "Insert", "Scale", "Update",
           "apply_change", "project", "replay"]

ViewTable = Literal["knowledge", "conversations", "tool_history", "llm_calls", "comparisons"]


@dataclass(frozen=True)
class Add:
    """A column value raised by ``amount``, capped at ``cap`` when one is given."""

    amount: float
    cap: float | None = None


@dataclass(frozen=True)
class Scale:
    """A column value multiplied by ``factor``."""

    factor: float


@dataclass(frozen=True)
class Insert:
    """A new row of ``table`` (``values`` by column; the user is the event's)."""

    table: ViewTable
    values: Mapping[str, Any]


@dataclass(frozen=True)
class Update:
    """Rows of ``table`` by id take ``values`` (a plain value, ``Add`` or ``Scale``)."""

    table: ViewTable
    ids: Sequence[str]
    values: Mapping[str, Any]


@dataclass(frozen=True)
class Delete:
    """Rows of ``table`` by id are removed."""

    table: ViewTable
    ids: Sequence[str]


Change = Insert | Update | Delete

_PRUNED: tuple[tuple[ViewTable, str], ...] = (
    ("knowledge", "items"), ("conversations", "turns"), ("tool_history", "tools"))
"""Tables a ``memory.pruned`` event removes rows from, and its payload key for each."""

TEXT_KEPT_KINDS = frozenset({
    Kind.MEMORY_RECALLED, Kind.MEMORY_DECAYED, Kind.MEMORY_COMPARED, Kind.TURN_CONSOLIDATED,
    Kind.TURNS_QUEUED, Kind.TURNS_EXTRACTED, Kind.LLM_CALLED, Kind.TOOL_CALLED,
    *PROPOSAL_KINDS})
"""Kinds whose projection adds, removes and rewords no knowledge item and no turn: the
full-text indexes, and the word counts a store keeps from them, stay as they were (a
search's bookkeeping, ``memory.recalled``, is the most frequent event of all)."""


def project(event: Event) -> list[Change]:
    """The row changes ``event`` makes to the views (none for kinds only the ledger
    keeps)."""
    kind, data = event.kind, event.payload
    if kind in PROPOSAL_KINDS:
        return []  # the review queue is read from the ledger (review.py), never a view
    if kind == Kind.MEMORY_ADDED:
        return [Insert("knowledge", item_row(ItemAdded.parse(data)))]
    if kind in CHANGE_KINDS:
        changes = ItemChanged.parse(data)
        if not changes or event.subject_id is None:
            return []
        if "content" in changes:
            changes["embedding"] = None  # recomputed from the new text
        return [Update("knowledge", [event.subject_id], changes)]
    if kind == Kind.MEMORY_DELETED:
        return [Delete("knowledge", [event.subject_id])] if event.subject_id else []
    if kind == Kind.MEMORY_RECALLED:
        return [Update("knowledge", list(data["ids"]), {
            "confidence": Add(float(data["boost"]), cap=1.0), "use_count": Add(1),
            "last_used_at": event.ts})]
    if kind == Kind.MEMORY_DECAYED:
        return [Update("knowledge", list(data["ids"]),
                       {"confidence": Scale(float(data["factor"]))})]
    if kind == Kind.MEMORY_PRUNED:
        return [Delete(table, list(data.get(key, []))) for table, key in _PRUNED if data.get(key)]
    if kind.startswith("turn.") and kind != Kind.TURN_CONSOLIDATED:
        at = data.get("at", event.ts)
        batch = data.get("extract")
        return [Insert("conversations", {
            "id": event.subject_id or event.id, "agent_id": event.agent_id,
            "session_id": event.session_id, "role": data["role"], "name": data.get("name"),
            "content": data["content"], "ts": at, "consolidated_at": None,
            "metadata": data.get("metadata") or {},
            "extraction": "pending" if batch else None, "extraction_batch": batch or None})]
    if kind == Kind.TURN_CONSOLIDATED:
        return [Update("conversations", list(data["ids"]), {"consolidated_at": event.ts})]
    if kind in (Kind.TURNS_EXTRACTED, Kind.TURNS_QUEUED):
        state = "pending" if kind == Kind.TURNS_QUEUED else data.get("outcome", "done")
        return [Update("conversations", list(data["ids"]), {
            "extraction": state, "extraction_claim": None, "extraction_claim_until": None})]
    if kind == Kind.LLM_CALLED:
        return [Insert("llm_calls", {
            "id": event.id, "ts": event.ts, "purpose": data["purpose"], "model": data["model"],
            "tokens_in": int(data.get("tokens_in") or 0),
            "tokens_out": int(data.get("tokens_out") or 0),
            "latency_ms": float(data.get("latency_ms") or 0), "outcome": data["outcome"],
            "error": data.get("error")})]
    if kind == Kind.MEMORY_COMPARED:
        first, second = sorted((data["a"], data["b"]))
        return [Insert("comparisons", {
            "item_a": first, "item_b": second, "outcome": data["outcome"],
            "similarity": data.get("similarity"), "ts": event.ts})]
    if kind == Kind.TOOL_CALLED:
        return [Insert("tool_history", {
            "id": event.subject_id or event.id, "agent_id": event.agent_id,
            "session_id": event.session_id, "name": data["name"],
            "arguments": data.get("arguments") or {}, "success": bool(data["success"]),
            "duration_ms": data.get("duration_ms"), "error": data.get("error"),
            "ts": event.ts})]
    return []


def replay(events: Iterable[Event], until: str) -> dict[str, Item]:
    """The knowledge items as they stood at ``until``, from events in ledger order,
    through ``project``. Forgotten items never come back, whatever the moment."""
    items: dict[str, Item] = {}
    forgotten: set[str] = set()
    for event in events:
        if event.kind == Kind.MEMORY_DELETED and event.subject_id:
            forgotten.add(event.subject_id)
        if event.ts > until:
            continue
        for change in project(event):
            if change.table == "knowledge":
                apply_change(items, change)
    return {item_id: item for item_id, item in items.items() if item_id not in forgotten}


def apply_change(items: dict[str, Item], change: Change) -> None:
    """Make ``change`` (to the knowledge view) in ``items``, keyed by id."""
    if isinstance(change, Insert):
        item = Item(**{k: v for k, v in change.values.items() if k in _ITEM_FIELDS})
        items[item.id] = item
    elif isinstance(change, Delete):
        for item_id in change.ids:
            items.pop(item_id, None)
    else:
        for item_id in change.ids:
            if item_id in items:
                current = items[item_id]
                items[item_id] = dataclasses.replace(current, **{
                    name: value_of(getattr(current, name), value)
                    for name, value in change.values.items() if name in _ITEM_FIELDS})


def value_of(current: Any, value: Any) -> Any:
    """A column's new value: ``value`` itself, or ``current`` moved by ``Add``/``Scale``."""
    if isinstance(value, Add):
        raised = current + value.amount
        return raised if value.cap is None else min(value.cap, raised)
    if isinstance(value, Scale):
        return current * value.factor
    return value


_ITEM_FIELDS = frozenset(f.name for f in dataclasses.fields(Item))
