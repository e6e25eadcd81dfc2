"""Memory through time, read from the ledger: ``as_of`` views and item lineage.

``replay`` folds a user's ``memory.*`` events up to a moment into the items as they
stood then ("what was known"); ``valid_at`` says whether an item was true at that
moment (``valid_from <= t < valid_to``, not superseded). Forgotten items never come
back, whatever the moment asked about.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..retrieval.keyword import query_terms, word_set
from ..store.base import Store
from ..types import Event, Item, ItemQuery

__all__ = ["MEMORY_KINDS", "lineage", "rank_by_overlap", "replay", "valid_at"]

MEMORY_KINDS = (
    "memory.added", "memory.updated", "memory.superseded", "memory.invalidated",
    "memory.restored", "memory.deleted", "memory.recalled", "memory.decayed", "memory.pruned",
)
"""The event kinds that change knowledge items."""

_FIELDS = frozenset(f.name for f in dataclasses.fields(Item)) - {"id", "user_id"}


def replay(events: Iterable[Event], until: str) -> dict[str, Item]:
    """The items as they stood at ``until``, from events in ledger order."""
    items: dict[str, Item] = {}
    forgotten: set[str] = set()
    for event in events:
        if event.kind == "memory.deleted" and event.subject_id:
            forgotten.add(event.subject_id)
        if event.ts > until:
            continue
        _fold(items, event)
    return {item_id: item for item_id, item in items.items() if item_id not in forgotten}


def _fold(items: dict[str, Item], event: Event) -> None:
    data, subject = event.payload, event.subject_id
    if event.kind == "memory.added":
        raw = dict(data["item"])
        items[raw["id"]] = Item(**{k: v for k, v in raw.items() if k in _FIELDS | {"id",
                                                                                   "user_id"}})
    elif event.kind in ("memory.updated", "memory.superseded", "memory.invalidated",
                        "memory.restored"):
        if subject in items:
            changes = {k: v for k, v in data.get("changes", {}).items() if k in _FIELDS}
            items[subject] = dataclasses.replace(items[subject], **changes)
    elif event.kind in ("memory.deleted",) and subject:
        items.pop(subject, None)
    elif event.kind == "memory.pruned":
        for item_id in data.get("items", []):
            items.pop(item_id, None)
    elif event.kind in ("memory.recalled", "memory.decayed"):
        for item_id in data.get("ids", []):
            if item_id in items:
                items[item_id] = _touched(items[item_id], event)


def _touched(item: Item, event: Event) -> Item:
    if event.kind == "memory.decayed":
        return dataclasses.replace(item, confidence=item.confidence * event.payload["factor"])
    return dataclasses.replace(
        item, confidence=min(1.0, item.confidence + event.payload["boost"]),
        use_count=item.use_count + 1, last_used_at=event.ts)


def valid_at(item: Item, moment: str) -> bool:
    """Whether ``item`` was true at ``moment`` as far as its state says."""
    start = item.valid_from or item.created_at
    return (item.superseded_by is None and start <= moment
            and (item.valid_to is None or moment < item.valid_to))


def matches(item: Item, query: ItemQuery) -> bool:
    """The ``ItemQuery`` filters, in Python (for replayed items)."""
    for name in ("category", "context", "entity", "source", "sensitive"):
        wanted = getattr(query, name)
        if wanted is not None and getattr(item, name) != wanted:
            return False
    if query.time_from is not None and item.created_at < query.time_from:
        return False
    return query.time_to is None or item.created_at <= query.time_to


def rank_by_overlap(items: Iterable[Item], query: str, limit: int
                    ) -> list[tuple[Item, float]]:
    """Items sharing words with ``query`` (lightly stemmed), best first: the share of
    query terms an item holds, ties broken by confidence and recency."""
    terms = {_stem(t) for t in query_terms(query)}
    if not terms:
        return []
    scored = []
    for item in items:
        words = {_stem(w) for w in word_set(f"{item.content} {item.entity or ''}")}
        share = len(terms & words) / len(terms)
        if share > 0:
            scored.append((item, share))
    scored.sort(key=lambda pair: (-pair[1], -pair[0].confidence, pair[0].updated_at))
    return scored[:limit]


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def lineage(store: Store, user_id: str, item_id: str) -> dict[str, list[Event]]:
    """The ledger entries of ``item_id`` and of every version linked to it by
    supersession, either way (``by`` / ``supersedes`` in the payloads), by item."""
    found: dict[str, list[Event]] = {}
    todo = [item_id]
    while todo:
        current = todo.pop()
        found[current] = store.events(user_id, subject_id=current)
        for event in found[current]:
            todo.extend(other for other in _links(event.payload)
                        if other not in found and other not in todo)
    return found


def _links(payload: Mapping[str, Any]) -> Sequence[str]:
    return [v for k in ("by", "supersedes") if isinstance(v := payload.get(k), str)]
