"""The versions of one fact: items linked by supersession, read from the ledger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..store.base import Store
from ..types import Event

__all__ = ["lineage"]


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
