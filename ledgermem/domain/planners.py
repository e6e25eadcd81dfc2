"""Pure planners: a write request and the rows it depends on → the ledger events.

No I/O and no clock: the writer (``writer.py``) reads the rows inside its write
transaction, passes them here with the time, and appends what comes back. Each
planner is therefore testable over hand-built items, and what an event means stays
the projection's business (``projection.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InvalidInput
from ..types import START_CONFIDENCE, Event, Item, Scope
from ..validation import merge_metadata
from .dedup import says_less
from .events import ItemAdded, ItemChanged, Kind, new_event

__all__ = ["CLEARABLE", "Revision", "plan_add", "plan_change", "plan_forget", "plan_invalidate",
           "plan_merge", "plan_restore", "plan_revise", "why"]

_VERSION_KEYS = ("turn_ids", "supersedes", "truncated", "original_length")
"""Metadata that belongs to one version and is not carried to the next."""


def why(reason: str, source: str | None, turn_ids: Sequence[str] | None) -> dict[str, Any]:
    """Provenance for a ledger entry: why, who or what, and from which turns."""
    found: dict[str, Any] = {"reason": reason}
    if source:
        found["source"] = source
    if turn_ids:
        found["turn_ids"] = list(turn_ids)
    return found


def plan_add(scope: Scope, item: Item, *, reason: str | None, now: str) -> list[Event]:
    """A new item (built and validated by the caller)."""
    return [new_event(scope, now, Kind.MEMORY_ADDED, ItemAdded(item, reason=reason),
                      subject_id=item.id)]


def plan_change(scope: Scope, item: Item, changes: Mapping[str, Any], *, now: str,
                reason: str, source: str | None = None, kind: Kind = Kind.MEMORY_UPDATED,
                extra: Mapping[str, Any] | None = None) -> list[Event]:
    """Fields of ``item`` take new values (the previous content kept for ``history``)."""
    payload = ItemChanged(dict(changes), reason=reason, source=source,
                          previous=item.content if "content" in changes else None,
                          extra=extra or {})
    return [new_event(scope, now, kind, payload, subject_id=item.id)]


def plan_merge(scope: Scope, twin: Item, *, text: str, confidence: float, sensitive: bool,
               due: str | None, metadata: Mapping[str, Any], source: str,
               reason: str | None, now: str) -> list[Event]:
    """A restatement refreshes the item it restates: its text (unless it only drops
    words of the item's: ``says_less``), the higher confidence, a sensitive flag never
    cleared, a due date, merged metadata."""
    changes: dict[str, Any] = {"updated_at": now, "confidence": max(twin.confidence,
                                                                    confidence)}
    if text != twin.content and not says_less(text, twin.content):
        changes["content"] = text
    if sensitive and not twin.sensitive:
        changes["sensitive"] = True
    if due is not None:
        changes["due_at"] = due
    merged = merge_metadata(twin.metadata, metadata)
    if merged != twin.metadata:
        changes["metadata"] = merged
    return plan_change(scope, twin, changes, now=now, reason="dedup", source=source,
                       extra={"why": reason} if reason else None)


def plan_forget(scope: Scope, item: Item, *, now: str) -> list[Event]:
    """An item deleted (the caller redacts its text in the ledger too)."""
    return [new_event(scope, now, Kind.MEMORY_DELETED, {"id": item.id}, subject_id=item.id)]


@dataclass(frozen=True)
class Revision:
    """A validated ``revise`` request: the new text and the fields it changes (None:
    the old version's), and the optional fields it clears (``CLEARABLE``)."""

    text: str
    metadata: Mapping[str, Any]
    source: str
    reason: str
    category: str | None = None
    context: str | None = None
    entity: str | None = None
    domain: str | None = None
    confidence: float | None = None
    sensitive: bool | None = None
    due: str | None = None
    at: str | None = None
    turn_ids: Sequence[str] | None = None
    clear: frozenset[str] = frozenset()


CLEARABLE = frozenset({"entity", "domain", "due_at"})
"""The fields a new version may leave empty where the old one had them."""


def plan_revise(scope: Scope, old: Item, revision: Revision, *, new_id: str, now: str
                ) -> tuple[list[Event], Item]:
    """A new version of an active item, and the old one superseded by it.

    Raises:
        InvalidInput: ``old`` is not active.
    """
    if not old.active:
        raise InvalidInput(f"memory {old.id!r} is not active; restore it first")
    when = max(revision.at or now, old.valid_from or "")
    metadata = {k: v for k, v in old.metadata.items() if k not in _VERSION_KEYS}
    metadata.update(revision.metadata, supersedes=old.id)
    if revision.turn_ids:
        metadata["turn_ids"] = list(revision.turn_ids)
    unknown = revision.clear - CLEARABLE
    if unknown:
        raise InvalidInput(f"only {', '.join(sorted(CLEARABLE))} can be cleared, "
                           f"not {', '.join(sorted(unknown))}")
    due_changed = revision.due is not None or "due_at" in revision.clear
    new = replace(
        old, id=new_id, content=revision.text, source=revision.source,
        category=old.category if revision.category is None else revision.category,
        context=old.context if revision.context is None else revision.context,
        entity=_field(old.entity, revision.entity, "entity" in revision.clear),
        domain=_field(old.domain, revision.domain, "domain" in revision.clear),
        sensitive=old.sensitive if revision.sensitive is None else revision.sensitive,
        due_at=_field(old.due_at, revision.due, "due_at" in revision.clear),
        reminded_at=None if due_changed else old.reminded_at,
        confidence=(max(old.confidence, START_CONFIDENCE[revision.source])
                    if revision.confidence is None else revision.confidence), created_at=now,
        updated_at=now, valid_from=when, valid_to=None, superseded_by=None,
        last_used_at=None, use_count=0, metadata=metadata, written=None,
    )
    provenance = why(revision.reason, revision.source, revision.turn_ids)
    return [
        new_event(scope, now, Kind.MEMORY_ADDED, ItemAdded(
            new, reason=revision.reason, source=revision.source, supersedes=old.id,
            turn_ids=tuple(revision.turn_ids or ())), subject_id=new.id),
        new_event(scope, now, Kind.MEMORY_SUPERSEDED, {
            "changes": {"superseded_by": new.id, "valid_to": when, "updated_at": now},
            "by": new.id, **provenance}, subject_id=old.id),
    ], new


def _field(old: str | None, given: str | None, cleared: bool) -> str | None:
    """A new version's optional field: cleared, the given value, or the old one's."""
    if cleared:
        return None
    return old if given is None else given


def plan_invalidate(scope: Scope, item: Item, *, reason: str, source: str | None,
                    turn_ids: Sequence[str] | None, at: str | None, now: str) -> list[Event]:
    """An active item no longer true from ``at`` (default now); nothing erased.

    Raises:
        InvalidInput: ``item`` is not active.
    """
    if not item.active:
        raise InvalidInput(f"memory {item.id!r} is not active")
    when = max(at or now, item.valid_from or "")
    return [new_event(scope, now, Kind.MEMORY_INVALIDATED, {
        "changes": {"valid_to": when, "updated_at": now},
        **why(reason, source, turn_ids)}, subject_id=item.id)]


def plan_restore(scope: Scope, item: Item, active_versions: Sequence[Item], *, reason: str,
                 now: str) -> list[Event]:
    """An earlier version active again, and every other active version of the fact
    invalidated, so one stays active. Nothing when ``item`` is active already."""
    if item.active:
        return []
    events = [new_event(scope, now, Kind.MEMORY_RESTORED, {
        "changes": {"valid_to": None, "superseded_by": None, "updated_at": now},
        "reason": reason, "source": "user"}, subject_id=item.id)]
    events += [new_event(scope, now, Kind.MEMORY_INVALIDATED, {
        "changes": {"valid_to": max(now, other.valid_from or ""), "updated_at": now},
        "reason": f"{reason}: another version is back", "source": "user",
        "restored": item.id}, subject_id=other.id) for other in active_versions]
    return events
