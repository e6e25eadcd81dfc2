"""Does the knowledge view say what the ledger says? ``verify`` replays each user's
ledger through the projection and compares the result with the stored rows."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from ..store.base import Store
from ..types import Item, ItemQuery
from .events import MEMORY_KINDS
from .projection import replay

__all__ = ["verify"]

END_OF_TIME = "9999-12-31T23:59:59.999999+00:00"
_COMPARED = tuple(f.name for f in dataclasses.fields(Item) if f.name != "written")


def verify(store: Store, users: Iterable[str] | None = None) -> dict[str, Any]:
    """Compare every knowledge item (any state) with the ledger's replay of it.

    Returns ``{"users", "items", "problems"}``: users and items checked, and one line
    per difference (an item only in the view or only in the ledger, or a field that
    differs). An empty ``problems`` list means the view is what the ledger says.
    """
    checked_users = checked_items = 0
    problems: list[str] = []
    for user_id in store.user_ids() if users is None else users:
        checked_users += 1
        expected = replay(store.events(user_id, kinds=MEMORY_KINDS), END_OF_TIME)
        stored = {item.id: item for item in store.query_items(
            user_id, ItemQuery(include_superseded=True))[0]}
        checked_items += len(expected.keys() | stored.keys())
        for item_id in sorted(expected.keys() - stored.keys()):
            problems.append(f"{user_id}: item {item_id} is in the ledger, not in the view")
        for item_id in sorted(stored.keys() - expected.keys()):
            problems.append(f"{user_id}: item {item_id} is in the view, not in the ledger")
        for item_id in sorted(expected.keys() & stored.keys()):
            problems += [f"{user_id}: item {item_id}: {field} is {got!r} in the view, "
                         f"{want!r} in the ledger"
                         for field, want, got in _differences(expected[item_id],
                                                              stored[item_id])]
    return {"users": checked_users, "items": checked_items, "problems": problems}


def _differences(want: Item, got: Item) -> list[tuple[str, Any, Any]]:
    found = []
    for field in _COMPARED:
        a, b = getattr(want, field), getattr(got, field)
        if isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, abs_tol=1e-9):
            continue
        if a != b:
            found.append((field, a, b))
    return found
