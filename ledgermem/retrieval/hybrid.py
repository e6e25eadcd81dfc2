"""The hybrid search pipeline shared by knowledge and conversation search.

keyword candidates (AND, then OR to fill) + vector candidates → reciprocal rank
fusion → salience → top k. Filters are applied by the store, before ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from ..store.base import Store, TurnQuery
from ..types import Hit, Item, ItemQuery, Turn
from .fusion import rrf
from .keyword import query_terms
from .salience import CATEGORY_IMPORTANCE, SalienceWeights, salience

__all__ = ["SearchOptions", "Searcher"]


@dataclass(frozen=True)
class SearchOptions:
    """Tuning of the search pipeline.

    Attributes:
        limit: hits returned when the caller gives no ``top_k``.
        candidates: how many candidates each retriever contributes to fusion.
        rrf_k: the reciprocal rank fusion constant.
        keyword_weight / vector_weight: each retriever's weight in fusion.
        salience: recency / importance / confidence weights.
        mode: ``hybrid`` (both retrievers), ``keyword`` or ``vector`` only.
    """

    limit: int = 5
    candidates: int = 50
    rrf_k: float = 60.0
    keyword_weight: float = 1.0
    vector_weight: float = 0.3
    salience: SalienceWeights = field(default_factory=SalienceWeights)
    mode: Literal["hybrid", "keyword", "vector"] = "hybrid"
    expansion_weight: float = 0.5
    """Weight in fusion of turns found through the items extracted from them."""


class Searcher:
    """Runs hybrid searches against one store (and embedder, when there is one)."""

    def __init__(self, store: Store, *, embedder: Any = None, options: SearchOptions) -> None:
        self.store = store
        self.embedder = embedder
        self.options = options

    def _retrieve(self, query: str, pool: int, keyword: Any, vector: Any
                  ) -> dict[str, list[tuple[str, float]]]:
        ranked: dict[str, list[tuple[str, float]]] = {}
        # What no store or model can take (lone surrogates, NUL) is dropped, not raised.
        query = query.encode("utf-8", "ignore").decode("utf-8").replace("\x00", " ")
        if self.options.mode != "vector":
            terms = query_terms(query)
            every = keyword(terms, "and", pool)
            ranked["keyword"] = self._keyword(terms, every, keyword, pool)
            if len(terms) > 1 and every:
                # Rows holding every term get a second vote, so salience cannot lift a
                # one-word match above them.
                ranked["all_terms"] = every
        if self.options.mode != "keyword" and self.embedder is not None and query.strip():
            ranked["vector"] = vector(self.embedder.embed_query(query), pool)
        return ranked

    def _keyword(self, terms: list[str], every: list[tuple[str, float]], search: Any,
                 limit: int) -> list[tuple[str, float]]:
        """Rows with every term first (AND), then rows with some (OR) to fill ``limit``.

        Measured on LoCoMo, filling with OR finds far more than OR-only-when-AND-finds-
        nothing (recall@10 0.76 against 0.69): questions rarely share every word with
        their answer.
        """
        found = list(every)
        if len(found) < limit and len(terms) > 1:
            seen = {doc_id for doc_id, _ in found}
            found += [hit for hit in search(terms, "or", limit) if hit[0] not in seen]
        return list(found[:limit])

    def search_items(
        self, user_id: str, query: str, filters: ItemQuery, limit: int, *, now: datetime
    ) -> list[Hit]:
        """Knowledge hits for ``query``, best first."""
        pool = max(self.options.candidates, limit)
        ranked = self._retrieve(
            query, pool,
            lambda t, mode, n: self.store.keyword_search_items(user_id, t, mode, filters, n),
            lambda v, n: self.store.vector_search_items(user_id, v, filters, n),
        )
        fused, why = self._fuse(ranked)
        if not fused:
            return []
        items, _ = self.store.query_items(user_id, ItemQuery(
            ids=tuple(fused), include_superseded=True))
        return self._rank(
            fused, why, {i.id: i for i in items}, limit, now,
            lambda item: (item.updated_at, _importance(item), item.confidence),
        )

    def search_turns(
        self, user_id: str, query: str, filters: TurnQuery, limit: int, *, now: datetime
    ) -> list[Hit]:
        """Conversation hits for ``query``, best first."""
        pool = max(self.options.candidates, limit)
        ranked = self._retrieve(
            query, pool,
            lambda t, mode, n: self.store.keyword_search_turns(user_id, t, mode, filters, n),
            lambda v, n: self.store.vector_search_turns(user_id, v, filters, n),
        )
        if expansion := self._turns_via_items(user_id, query, filters, pool):
            ranked["items"] = expansion
        fused, why = self._fuse(ranked)
        if not fused:
            return []
        turns = self.store.query_turns(user_id, TurnQuery(ids=tuple(fused)))
        return self._rank(fused, why, {t.id: t for t in turns}, limit, now,
                          lambda turn: (turn.ts, 0.5, 1.0))

    def _turns_via_items(self, user_id: str, query: str, filters: TurnQuery, pool: int
                         ) -> list[tuple[str, float]]:
        """Key expansion: the turns that knowledge matching ``query`` was extracted from
        (``metadata["turn_ids"]``), ranked as those items rank, so a turn can be found
        by the facts drawn from it. Keyword matching only (AND, else OR): items are
        short statements, and it costs no second query embedding."""
        terms = query_terms(query)
        if not terms:
            return []
        every = ItemQuery()
        matched = (self.store.keyword_search_items(user_id, terms, "and", every, pool)
                   or self.store.keyword_search_items(user_id, terms, "or", every, pool))
        if not matched:
            return []
        items = {i.id: i for i in self.store.query_items(
            user_id, ItemQuery(ids=tuple(i for i, _ in matched)))[0]}
        found: dict[str, float] = {}
        for item_id, score in matched:
            linked = items[item_id].metadata.get("turn_ids") if item_id in items else None
            for turn_id in linked if isinstance(linked, list) else []:
                if filters.ids is None or turn_id in filters.ids:
                    found.setdefault(str(turn_id), score)
        if not found:
            return []
        kept = {t.id for t in self.store.query_turns(user_id, replace(filters, ids=tuple(found)))}
        return [(turn_id, score) for turn_id, score in found.items() if turn_id in kept][:pool]

    def _fuse(self, ranked: Mapping[str, Sequence[tuple[str, float]]]
              ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        weights = {"keyword": self.options.keyword_weight, "vector": self.options.vector_weight,
                   "all_terms": self.options.keyword_weight / 2,
                   "items": self.options.expansion_weight}
        fused = rrf({name: [d for d, _ in hits] for name, hits in ranked.items()},
                    k=self.options.rrf_k, weights=weights)
        why: dict[str, dict[str, float]] = {doc: {} for doc in fused}
        for name, hits in ranked.items():
            for rank, (doc_id, score) in enumerate(hits, start=1):
                why[doc_id][f"{name}_rank"] = rank
                why[doc_id][f"{name}_score"] = round(score, 6)
        return fused, why

    def _rank(self, fused: dict[str, float], why: dict[str, dict[str, float]],
              found: dict[str, Any], limit: int, now: datetime, signals: Any) -> list[Hit]:
        best = max(fused.values())
        hits = []
        for doc_id, score in fused.items():
            row = found.get(doc_id)
            if row is None:
                continue
            stamp, importance, confidence = signals(row)
            age = (now - datetime.fromisoformat(stamp)).total_seconds() / 86400
            final = salience(score / best, age_days=age, importance=importance,
                             confidence=confidence, weights=self.options.salience)
            reasons = {**why[doc_id], "rrf": round(score, 6), "score": round(final, 6)}
            if isinstance(row, Item):
                hits.append(Hit(score=final, item=row, why=reasons))
            else:
                assert isinstance(row, Turn)
                hits.append(Hit(score=final, turn=row, why=reasons))
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:limit]


def _importance(item: Item) -> float:
    value = item.metadata.get("importance")
    if isinstance(value, int | float) and 0 <= value <= 1:
        return float(value)
    return CATEGORY_IMPORTANCE.get(item.category, 0.5)
