"""Reconciliation: similar active items are compared once, and confidence moves.

Pairs of active items in one context whose vectors have cosine similarity above the
threshold, never compared before, are shown to the LLM one pair per call. The verdict
is applied with the ``memory.compared`` record in one transaction:

- reinforce: both items +0.05 confidence;
- contradict: the newer +0.1, the older invalidated (``valid_to`` set, recoverable);
- weaken: the older −0.1;
- neutral: nothing moves.

A pair whose call fails is not recorded, so the next run asks again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..clock import iso
from ..domain.events import ItemChanged, Kind, new_event
from ..types import Event, Item, ItemQuery, Scope
from .calls import ask, llm_events
from .prompts import Verdict, reconcile_messages

if TYPE_CHECKING:
    from ..providers.llm import LLM
    from ..store.base import Vector
    from .parts import PipelineParts

__all__ = ["OUTCOMES", "candidate_pairs", "reconcile"]

log = logging.getLogger("ledgermem.reconcile")

OUTCOMES = ("reinforced", "contradicted", "weakened", "neutral")
REINFORCE, CONTRADICT_BOOST, WEAKEN = 0.05, 0.1, 0.1
_BLOCK = 512


def candidate_pairs(items: dict[str, Item], vectors: Sequence[tuple[str, Vector]],
                    compared: set[tuple[str, str]], threshold: float, limit: int
                    ) -> list[tuple[str, str, float]]:
    """Uncompared pairs (smaller id first) in one context above ``threshold``, most
    similar first, at most ``limit``. Works in blocks, so memory stays linear."""
    by_context: dict[str, list[tuple[str, Vector]]] = defaultdict(list)
    for item_id, vector in vectors:
        if item_id in items:
            by_context[items[item_id].context].append((item_id, vector))
    found: list[tuple[str, str, float]] = []
    for group in by_context.values():
        if len(group) < 2 or len({v.shape[0] for _, v in group}) != 1:
            continue
        ids = [i for i, _ in group]
        matrix = np.stack([v for _, v in group]).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
        for start in range(0, len(ids), _BLOCK):
            sims = matrix[start:start + _BLOCK] @ matrix.T
            rows, cols = np.nonzero(sims > threshold)
            for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
                a, b = ids[start + r], ids[c]
                if start + r < c and (min(a, b), max(a, b)) not in compared:
                    found.append((min(a, b), max(a, b), float(sims[r, c])))
    found.sort(key=lambda pair: (-pair[2], pair[0], pair[1]))
    return found[:limit]


def reconcile(parts: PipelineParts, scope: Scope, llm: LLM, *, threshold: float = 0.85,
              max_pairs: int = 20) -> dict[str, int]:
    """Compare up to ``max_pairs`` similar pairs of ``scope``'s user; returns the counts
    ``pairs_checked``, ``reinforced``, ``contradicted``, ``weakened``, ``neutral``
    (and ``failed`` calls)."""
    store, user_id = parts.store, scope.user_id
    counts = dict.fromkeys(("pairs_checked", *OUTCOMES, "failed"), 0)
    vectors = store.item_vectors(user_id)
    if len(vectors) < 2:
        return counts
    items = {i.id: i for i in store.query_items(
        user_id, ItemQuery(ids=tuple(i for i, _ in vectors)))[0]}
    pairs = candidate_pairs(items, vectors, store.compared_pairs(user_id), threshold,
                            max_pairs)
    for a, b, similarity in pairs:
        first, second = store.get_item(user_id, a), store.get_item(user_id, b)
        if first is None or second is None or not (first.active and second.active):
            continue
        older, newer = sorted((first, second), key=lambda i: (i.created_at, i.id))
        answer = ask(llm, reconcile_messages(older, newer), Verdict, purpose="reconcile")
        now = iso(parts.clock())
        with store.transaction():
            store.append(llm_events(scope, now, answer.calls))
            if answer.value is None:
                log.warning("reconciling %s and %s failed: %s", a, b, answer.error)
                counts["failed"] += 1
                continue
            relation, reason = answer.value.relation, answer.value.reason
            store.append([new_event(scope, now, Kind.MEMORY_COMPARED, {
                "a": a, "b": b, "outcome": relation, "similarity": round(similarity, 6),
                "older": older.id, "newer": newer.id, "reason": reason}, subject_id=older.id),
                *_moves(scope, relation, older, newer, reason, now)])
        counts["pairs_checked"] += 1
        counts[{"reinforce": "reinforced", "contradict": "contradicted",
                "weaken": "weakened", "neutral": "neutral"}[relation]] += 1
        log.info("reconciled %s / %s (%.3f): %s", older.id, newer.id, similarity, relation)
    return counts


def _moves(scope: Scope, relation: str, older: Item, newer: Item, reason: str,
           now: str) -> list[Event]:
    """The confidence changes (and invalidation) a verdict asks for."""
    why = f"reconcile: {relation}"

    def confidence(item: Item, delta: float, other: Item) -> Event:
        value = round(min(1.0, max(0.0, item.confidence + delta)), 6)
        return new_event(scope, now, Kind.MEMORY_UPDATED, ItemChanged(
            {"confidence": value, "updated_at": now}, reason=why, source="reconcile",
            extra={"compared_with": other.id, "detail": reason}), subject_id=item.id)

    if relation == "reinforce":
        return [confidence(older, REINFORCE, newer), confidence(newer, REINFORCE, older)]
    if relation == "weaken":
        return [confidence(older, -WEAKEN, newer)]
    if relation == "contradict":
        ends = max(now, older.valid_from or now)
        return [confidence(newer, CONTRADICT_BOOST, older), new_event(
            scope, now, Kind.MEMORY_INVALIDATED, ItemChanged(
                {"valid_to": ends, "updated_at": now}, reason=why, source="reconcile",
                extra={"contradicted_by": newer.id, "detail": reason}),
            subject_id=older.id)]
    return []
