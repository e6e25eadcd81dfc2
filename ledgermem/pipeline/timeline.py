"""Searching memory as it stood at a past moment (``as_of``).

``domain.projection.replay`` folds a user's ``memory.*`` events up to a moment into the
items as they stood then ("what was known"); here ``valid_at`` says whether an item was
true at that moment (``valid_from <= t < valid_to``, not superseded), ``matches`` applies
search filters to replayed items, and ``rank_as_of`` ranks them for a query.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..retrieval.fusion import rrf
from ..retrieval.hybrid import SearchOptions, item_time, keyword_text, window_why
from ..retrieval.keyword import query_terms, word_set
from ..retrieval.when import TimeWindow
from ..types import Hit, Item, ItemQuery

__all__ = ["matches", "rank_as_of", "rank_by_overlap", "valid_at"]

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
    if query.time_to is not None and item.created_at > query.time_to:
        return False
    began = item.valid_from or item.created_at
    if query.valid_from_min is not None and began < query.valid_from_min:
        return False
    return query.valid_from_max is None or began <= query.valid_from_max


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
    scored.sort(key=lambda pair: pair[0].updated_at, reverse=True)  # newest first on ties
    scored.sort(key=lambda pair: (-pair[1], -pair[0].confidence))
    return scored[:limit]


def rank_as_of(items: Sequence[Item], query: str, window: TimeWindow | None,
               options: SearchOptions, limit: int) -> list[Hit]:
    """Hits among replayed items: shared words (``rank_by_overlap``) and, when the query
    names a time window, a time ranking fused with them by RRF, as live search does
    (items inside the window, those sharing words first, then the newest)."""
    text = keyword_text(query, window)
    scored = rank_by_overlap(items, text, len(items))
    shown = window_why(window) if window is not None else {}
    if window is None or (options.time_filter and text):
        return [Hit(score=share, item=item, why={"as_of_overlap": round(share, 6),
                                                 "score": round(share, 6), **shown})
                for item, share in scored[:limit]]
    share = {item.id: value for item, value in scored}
    newest = sorted(items, key=lambda i: (item_time(i), i.id), reverse=True)
    inside = [i for i in [item for item, _ in scored] + newest
              if window.contains(item_time(i))]
    timed = list(dict.fromkeys(i.id for i in inside))
    fused = rrf({"overlap": list(share), "time": timed}, k=options.rrf_k,
                weights={"overlap": 1.0, "time": options.time_weight or 1.0})
    by_id = {item.id: item for item in items}
    time_rank = {item_id: rank for rank, item_id in enumerate(timed, start=1)}
    hits = []
    for item_id, score in sorted(fused.items(), key=lambda f: (-f[1], f[0]))[:limit]:
        why = {"as_of_overlap": round(share.get(item_id, 0.0), 6), **shown}
        if item_id in time_rank:
            why["time_rank"] = time_rank[item_id]
        hits.append(Hit(score=score, item=by_id[item_id], why={**why, "score": round(score, 6)}))
    return hits


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word
