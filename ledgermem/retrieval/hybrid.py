"""The hybrid search pipeline shared by knowledge and conversation search.

keyword candidates (AND, then OR to fill) + vector candidates → reciprocal rank
fusion → salience → top k. Filters are applied by the store, before ranking.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from ..errors import InvalidInput
from ..store.base import MatchMode, Store, TurnQuery
from ..types import Hit, Item, ItemQuery, Turn
from .embedding import embed_query_soon, query_truncated
from .fusion import rrf
from .keyword import STOPWORDS, query_terms, word_set
from .rerank import Reranker, rerank
from .salience import CATEGORY_IMPORTANCE, SalienceWeights, salience
from .when import TimeWindow, find_time_window

__all__ = ["SearchOptions", "Searcher", "item_time", "items_in", "keyword_text", "merge_hits",
           "speaker_ranking", "turns_in", "window_why"]


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
        time_weight: weight in fusion of the rows whose time falls in the window the
            query names ("last week", "in May 2023"; see ``retrieval.when``): a turn's
            ``ts``, an item's ``valid_from`` (else ``created_at``). 0 turns it off.
        time_filter: keep only the rows inside that window instead of boosting them.
        reranker: reorders the best ``rerank_depth`` fused hits before the cut to
            ``top_k`` (see ``retrieval.rerank``); None keeps the fused order.
        rerank_depth: how many hits the reranker sees.
    """

    limit: int = 5
    candidates: int = 50
    rrf_k: float = 30.0
    keyword_weight: float = 1.0
    vector_weight: float = 0.3
    salience: SalienceWeights = field(default_factory=SalienceWeights)
    mode: Literal["hybrid", "keyword", "vector"] = "hybrid"
    expansion_weight: float = 0.5
    """Weight in fusion of turns found through the items extracted from them."""
    time_weight: float = 0.3
    time_filter: bool = False
    speaker_weight: float = 0.3
    """Weight in fusion of the turns said by the one conversation participant the query
    names ("what does Melanie like?" — Melanie's own turns; see ``speaker_ranking``).
    0 turns it off."""
    reranker: Reranker | None = None
    rerank_depth: int = 20
    min_score: float = 0.0
    """Hits scoring below this are left out (scores are on one scale across queries:
    see ``Searcher`` — 1 is a row every retriever ranked first)."""
    similarity_floor: float | None = None
    """Knowledge vector candidates less similar than this to the query are no match
    (None: the embedder's own ``similarity_floor``, else 0)."""

    def __post_init__(self) -> None:
        for name in ("time_weight", "speaker_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise InvalidInput(f"{name} must be a number ≥ 0, not {value!r}")
        if not isinstance(self.rerank_depth, int) or self.rerank_depth < 1:
            raise InvalidInput(f"rerank_depth must be a positive integer, not "
                               f"{self.rerank_depth!r}")
        if (not isinstance(self.min_score, int | float) or isinstance(self.min_score, bool)
                or not 0 <= self.min_score <= 1):
            raise InvalidInput(f"min_score must be within 0–1, not {self.min_score!r}")
        if self.reranker is not None and not callable(self.reranker):
            raise InvalidInput("reranker must be callable as reranker(query, hits)")


class Searcher:
    """Runs hybrid searches against one store (and embedder, when there is one).

    A hit's score is its fused relevance over the fused score of an ideal row (one
    every retriever that voted on the query ranked first), times salience. So scores
    mean the same across queries: near 1 for a row that both the words and the meaning
    of the query found first, about 0.2 for a row only the vector retriever found,
    and a query that matched nothing returns nothing (knowledge vector candidates under
    the embedder's ``similarity_floor`` are not matches). ``min_score`` cuts on it.
    """

    def __init__(self, store: Store, *, embedder: Any = None, options: SearchOptions) -> None:
        self.store = store
        self.embedder = embedder
        self.options = options
        self._memo: dict[tuple[Any, ...], Any] | None = None

    def sharing(self) -> Searcher:
        """This searcher for one compound search (``search_all``): the query's
        embedding and knowledge keyword results are computed once and reused by each
        part of it. Not for reuse across queries."""
        twin = Searcher(self.store, embedder=self.embedder, options=self.options)
        twin._memo = {}
        return twin

    def _remembered(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        if self._memo is None:
            return compute()
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def _item_keywords(self, user_id: str, terms: list[str], mode: MatchMode,
                       filters: ItemQuery, limit: int) -> list[tuple[str, float]]:
        found: list[tuple[str, float]] = self._remembered(
            ("keyword", user_id, tuple(terms), mode, filters, limit),
            lambda: self.store.keyword_search_items(user_id, terms, mode, filters, limit))
        return found

    def with_options(self, **changes: Any) -> Searcher:
        """A searcher over the same store and embedder with some options changed."""
        return Searcher(self.store, embedder=self.embedder,
                        options=replace(self.options, **changes))

    def time_window(self, query: str, now: datetime) -> TimeWindow | None:
        """The window ``query`` names, resolved against ``now``, when time-aware search
        is on (``time_weight`` > 0 or ``time_filter``)."""
        if self.options.time_weight <= 0 and not self.options.time_filter:
            return None
        return find_time_window(_clean(query), now)

    def _retrieve(self, query: str, pool: int, keyword: Any, vector: Any,
                  more: Callable[[], dict[str, list[tuple[str, float]]]] | None,
                  rows: _Rows,
                  finish: Callable[[dict[str, list[tuple[str, float]]]], list[Hit]],
                  ) -> list[Hit]:
        """``finish`` of the candidates of each retriever for ``query`` (already
        ``_clean``) and those of ``more`` (the rankings that need no query vector), in
        that order.

        The query's embedding starts first, in a worker thread (``embed_query_soon``),
        and the keyword searches and ``more`` run meanwhile: a hybrid search costs the
        longer of the two, not their sum. If the embedding is still running then,
        the rows of the candidates found so far are read (``rows``) while it runs.
        The store calls before the wait share one ``Store.reading`` block, and those
        after it another: no transaction is held while the vector is awaited (a remote
        embedder may take a while). With nothing to wait for (keyword mode, a query
        embedded before), one block holds them all. Where the store reads beside
        (``Store.reads_beside``), the vector search and its hits' rows run in the
        embedding's thread as soon as the vector is there (``_vector_beside``), and
        the caller opens no second block for what little is left."""
        pending = None
        if self.options.mode != "keyword" and self.embedder is not None and query.strip():
            pending = self._remembered(("embed", query),
                                       lambda: embed_query_soon(self.embedder, query))
        beside = self._vector_beside(pending, vector, pool, rows)
        ranked: dict[str, list[tuple[str, float]]] = {}
        others: dict[str, list[tuple[str, float]]] = {}

        def finished() -> list[Hit]:
            if pending is not None:
                found = beside.result() if beside is not None else None
                if found is not None:
                    ranked["vector"] = found[0]
                    rows.add(found[1])
                else:
                    ranked["vector"] = vector(pending.result(), pool)
            ranked.update(others)
            return finish(ranked)

        with self.store.reading():
            if self.options.mode != "vector":
                terms = query_terms(query)
                every = keyword(terms, "and", pool)
                ranked["keyword"] = self._keyword(terms, every, keyword, pool)
                if len(terms) > 1 and every:
                    # Rows holding every term get a second vote, so salience cannot lift
                    # a one-word match above them.
                    ranked["all_terms"] = every
            if more is not None:
                others.update(more())
            awaited = beside if beside is not None else pending
            if awaited is None or awaited.done():   # nothing to wait for: one block
                return finished()
            rows.load([doc for hits in (*ranked.values(), *others.values())
                       for doc, _ in hits])
        awaited.exception()  # computed meanwhile in the worker; no transaction is held
        if beside is not None and beside.result() is not None:
            return finished()    # the vector's hits and rows were read beside: no block
        with self.store.reading():
            return finished()

    def _vector_beside(self, pending: Future[Any] | None, vector: Callable[[Any, int], Any],
                       pool: int, rows: _Rows) -> Future[_Beside | None] | None:
        """The vector search of ``pending``'s vector and its hits' rows, read in the
        thread that computes the vector as soon as it is there, in a reading block of
        its own (``Store.reading_beside``): on PostgreSQL they then run in a server
        process beside the caller's keyword searches, where they ran after them. The
        future's result is None where they did not run (no connection free at once,
        or a failure, which the caller then meets itself). None where the store reads
        nothing beside, or the vector is there already."""
        if pending is None or pending.done() or not self.store.reads_beside:
            return None
        found: Future[_Beside | None] = Future()

        def run(done: Future[Any]) -> None:
            result = None
            try:
                if done.exception() is None:
                    with self.store.reading_beside() as reading:
                        if reading:
                            hits = vector(done.result(), pool)
                            result = (hits, rows.read([doc for doc, _ in hits]))
            except Exception:   # the caller runs it again, and meets the error itself
                result = None
            found.set_result(result)

        pending.add_done_callback(run)
        return found

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
        query = _clean(query)
        window = self.time_window(query, now)
        if window is not None and self.options.time_filter:
            filters = items_in(filters, window)
        text = keyword_text(query, window)
        floor = self._floor()

        def in_window() -> dict[str, list[tuple[str, float]]]:
            if window is None or (self.options.time_filter and text):
                return {}
            inside = items_in(filters, window)
            return {"in_window": self._in_window(
                text, pool,
                lambda t, mode, n: self.store.keyword_search_items(user_id, t, mode, inside, n),
                lambda n: [(i.id, 0.0) for i in self.store.query_items(user_id, inside,
                                                                         limit=n)[0]])}

        rows = _Rows(lambda ids: {i.id: i for i in self.store.query_items(
            user_id, ItemQuery(ids=ids, include_superseded=True))[0]})
        hits = self._retrieve(
            query, pool,
            _without_time(text, window, lambda t, mode, n: self._item_keywords(
                user_id, t, mode, filters, n)),
            lambda v, n: [hit for hit in self.store.vector_search_items(user_id, v, filters, n)
                          if hit[1] >= floor],
            in_window, rows,
            lambda ranked: self._finish(
                query, ranked, window, limit, now, rows.load,
                lambda item: (item.updated_at, _importance(item), item.confidence),
                item_time),
        )
        return self._cut(query, hits, limit)

    def search_turns(
        self, user_id: str, query: str, filters: TurnQuery, limit: int, *, now: datetime
    ) -> list[Hit]:
        """Conversation hits for ``query``, best first."""
        pool = max(self.options.candidates, limit)
        query = _clean(query)
        window = self.time_window(query, now)
        if window is not None and self.options.time_filter:
            filters = turns_in(filters, window)
        # Unlike items, turns keep the time expression's words in keyword matching: a
        # turn's day is indexed in words ("8 May 2023 Monday"), and people say "last
        # summer" about last summer (measured on LoCoMo: docs/retrieval.md).
        text = keyword_text(query, window)

        def more() -> dict[str, list[tuple[str, float]]]:
            found = {}
            if expansion := self._turns_via_items(user_id, query, filters, pool):
                found["items"] = expansion
            if window is not None and (not self.options.time_filter or not text):
                inside = turns_in(filters, window)
                found["in_window"] = self._in_window(
                    text, pool,
                    lambda t, mode, n: self.store.keyword_search_turns(user_id, t, mode,
                                                                       inside, n),
                    lambda n: [(t.id, 0.0) for t in self.store.query_turns(
                        user_id, inside, descending=True, limit=n)])
            return found

        rows = _Rows(lambda ids: {t.id: t for t in self.store.query_turns(
            user_id, TurnQuery(ids=ids))})
        hits = self._retrieve(
            query, pool,
            lambda t, mode, n: self.store.keyword_search_turns(user_id, t, mode, filters, n),
            lambda v, n: self.store.vector_search_turns(user_id, v, filters, n),
            more, rows,
            lambda ranked: self._finish(
                query, ranked, window, limit, now, rows.load,
                lambda turn: (turn.ts, 0.5, 1.0), lambda turn: turn.ts, _speaker),
        )
        return self._cut(query, hits, limit)

    def _in_window(self, text: str, pool: int, search: Any,
                   listing: Callable[[int], list[tuple[str, float]]]
                   ) -> list[tuple[str, float]]:
        """Keyword hits among the rows inside the window, or, when the query has no words
        but its time expression, those rows newest first."""
        terms = query_terms(text)
        if not terms:
            return listing(pool)
        return self._keyword(terms, search(terms, "and", pool), search, pool)

    def _floor(self) -> float:
        floor = self.options.similarity_floor
        if floor is None:
            floor = getattr(self.embedder, "similarity_floor", 0.0)
        return float(floor)

    def _ideal(self, ranked: Mapping[str, object], window: TimeWindow | None, *,
               speaker: bool = False) -> float:
        """The fused score of a row every retriever that voted on this query ranked
        first (a hit's relevance is its fused score over this)."""
        voters = set(ranked) - {"in_window"}  # the extra votes (all_terms, items) when cast
        if window is not None:
            voters.add("time")
        if speaker:
            voters.add("speaker")
        weights = self._weights()
        # fsum: exact, so the same in every process (a set's order is not)
        return math.fsum(weights.get(name, 1.0) for name in voters) / (self.options.rrf_k + 1)

    def _finish(self, query: str, ranked: dict[str, list[tuple[str, float]]],
                window: TimeWindow | None, limit: int, now: datetime,
                load: Callable[[tuple[str, ...]], dict[str, Any]], signals: Any,
                moment: Callable[[Any], str],
                speaker: Callable[[Any], str | None] | None = None) -> list[Hit]:
        """Fuse, add the time and speaker rankings, weigh by salience: the best
        ``limit`` hits (``rerank_depth`` with a reranker), for ``_cut``.

        The time ranking holds the rows inside the window that match the query's other
        words (``in_window``: keyword hits searched inside the window) or its meaning
        (vector candidates), in fused order. Rows that are candidates only through the
        time expression's own words get no second vote from it. The speaker ranking
        (turns only, see ``speaker_ranking``) holds the candidates said by the one
        participant the query names, in fused order."""
        extra = ranked.pop("in_window", None)
        fused = self._fuse(ranked)
        order = sorted(fused, key=lambda doc: (-fused[doc], doc))
        order += [doc for doc, _ in extra or [] if doc not in fused]
        if not order:
            return []
        rows = load(tuple(order))
        votes: dict[str, list[str]] = {}
        if window is not None and extra is not None:
            relevant = {doc for doc, _ in [*extra, *ranked.get("vector", [])]}
            votes["time"] = [doc for doc in order if doc in relevant and doc in rows
                             and window.contains(moment(rows[doc]))]
        if speaker is not None and self.options.speaker_weight > 0:
            said = speaker_ranking(query, [doc for doc in order if doc in fused],
                                   {doc: speaker(row) for doc, row in rows.items()})
            if said:
                votes["speaker"] = said
        if votes:
            fused = self._fuse(ranked, ranks_only=votes)
        if not fused:
            return []
        ideal = self._ideal(ranked, window, speaker="speaker" in votes)
        reranker = self.options.reranker
        depth = max(limit, self.options.rerank_depth) if reranker is not None else limit
        scored = self._rank(fused, ideal, rows, depth, now, signals)
        # ``why`` only for the hits returned: building it for every candidate cost
        # more than the fusion itself.
        why = self._why([doc for _, doc in scored], ranked, votes)
        common: dict[str, Any] = window_why(window) if window is not None else {}
        if "vector" in ranked and query_truncated(self.embedder, query):
            common["query_truncated"] = True    # the embedder read only the query's start
        hits = []
        for final, doc_id in scored:
            row = rows[doc_id]
            reasons = {**why[doc_id], **common, "rrf": round(fused[doc_id], 6),
                       "score": round(final, 6)}
            if isinstance(row, Item):
                hits.append(Hit(score=final, item=row, why=reasons))
            else:
                assert isinstance(row, Turn)
                hits.append(Hit(score=final, turn=row, why=reasons))
        return hits

    def _cut(self, query: str, hits: list[Hit], limit: int) -> list[Hit]:
        """``hits`` reranked (with a reranker: outside the store's ``reading`` block, as
        it may take a while), those under ``min_score`` dropped, cut to ``limit``."""
        if self.options.reranker is not None:
            hits = rerank(self.options.reranker, query, hits, self.options.rerank_depth)
        return [hit for hit in hits if hit.score >= self.options.min_score][:limit]

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
        matched = (self._item_keywords(user_id, terms, "and", every, pool)
                   or self._item_keywords(user_id, terms, "or", every, pool))
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

    def _weights(self) -> dict[str, float]:
        """Each retriever's weight in fusion."""
        return {"keyword": self.options.keyword_weight, "vector": self.options.vector_weight,
                "all_terms": self.options.keyword_weight / 2,
                "items": self.options.expansion_weight,
                # A hard filter's listing ("what did I say yesterday") still needs a vote.
                "time": self.options.time_weight or 1.0,
                "speaker": self.options.speaker_weight}

    def _fuse(self, ranked: Mapping[str, Sequence[tuple[str, float]]],
              ranks_only: Mapping[str, Sequence[str]] | None = None) -> dict[str, float]:
        """RRF over the ranked lists and over ``ranks_only`` (lists without scores)."""
        lists = {name: [d for d, _ in hits] for name, hits in ranked.items()}
        return rrf({**lists, **(ranks_only or {})}, k=self.options.rrf_k,
                   weights=self._weights())

    @staticmethod
    def _why(docs: Sequence[str], ranked: Mapping[str, Sequence[tuple[str, float]]],
             ranks_only: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
        """Each of ``docs``'s rank (and score) in each list that holds it."""
        why: dict[str, dict[str, float]] = {doc: {} for doc in docs}
        for name, hits in ranked.items():
            for rank, (doc_id, score) in enumerate(hits, start=1):
                if doc_id in why:
                    why[doc_id][f"{name}_rank"] = rank
                    why[doc_id][f"{name}_score"] = round(score, 6)
        for name, ids in ranks_only.items():
            for rank, doc_id in enumerate(ids, start=1):
                if doc_id in why:
                    why[doc_id][f"{name}_rank"] = rank
        return why

    def _rank(self, fused: dict[str, float], ideal: float, found: dict[str, Any], limit: int,
              now: datetime, signals: Any) -> list[tuple[float, str]]:
        """The best ``limit`` of ``fused`` as (final score, id), best first: relevance
        (fused over ``ideal``) times salience."""
        scored = []
        for doc_id, score in fused.items():
            row = found.get(doc_id)
            if row is None:
                continue
            stamp, importance, confidence = signals(row)
            age = (now - datetime.fromisoformat(stamp)).total_seconds() / 86400
            final = salience(min(1.0, score / ideal), age_days=age, importance=importance,
                             confidence=confidence, weights=self.options.salience)
            scored.append((final, doc_id))
        scored.sort(key=lambda entry: (-entry[0], entry[1]))
        return scored[:limit]


_Beside = tuple[list[tuple[str, float]], dict[str, Any]]
"""A vector search's hits and their rows, read beside the caller (``_vector_beside``)."""


class _Rows:
    """The rows of a search's candidates, each read once: those known before the
    query's embedding is ready can be read while it is computed, the rest after."""

    def __init__(self, read: Callable[[tuple[str, ...]], dict[str, Any]]) -> None:
        self._read = read
        self._found: dict[str, Any] = {}
        self._asked: set[str] = set()

    def load(self, ids: Sequence[str]) -> dict[str, Any]:
        """The rows of ``ids`` that exist, by id (reading those not read before)."""
        if wanted := self._unasked(ids):
            self.add(self._read(wanted), wanted)
        return {doc: self._found[doc] for doc in ids if doc in self._found}

    def read(self, ids: Sequence[str]) -> dict[str, Any]:
        """The rows of those of ``ids`` not asked for yet, read now and kept nowhere:
        for another thread (then ``add``; the caller may ask for some meanwhile)."""
        return self._read(wanted) if (wanted := self._unasked(ids)) else {}

    def _unasked(self, ids: Sequence[str]) -> tuple[str, ...]:
        """Those of ``ids`` not asked for yet, once each, in order."""
        asked = self._asked
        return tuple(dict.fromkeys(doc for doc in ids if doc not in asked))

    def add(self, found: Mapping[str, Any], asked: Sequence[str] | None = None) -> None:
        """Keep ``found`` (rows by id, read for ``asked``: those ids by default); a row
        kept already stays as it was read."""
        self._asked.update(found if asked is None else asked)
        for doc, row in found.items():
            self._found.setdefault(doc, row)


def merge_hits(knowledge: Sequence[Hit], conversations: Sequence[Hit]) -> list[Hit]:
    """One ranking of knowledge and conversation hits, by score, knowledge first on ties.

    Each pipeline's score is its fused relevance over that of an ideal row (see
    ``Searcher``), times salience, so scores of both kinds are on one scale.
    Each hit keeps its score; ``why`` gains ``knowledge_rank`` or ``conversation_rank``
    (its rank in its own list), which also says where it came from.
    """
    ranked = [(hit, 0, rank) for rank, hit in enumerate(knowledge, start=1)]
    ranked += [(hit, 1, rank) for rank, hit in enumerate(conversations, start=1)]
    ranked.sort(key=lambda entry: (-entry[0].score, entry[1], entry[2]))
    return [replace(hit, why={**hit.why, ("conversation_rank" if source else "knowledge_rank"):
                                   float(rank)})
            for hit, source, rank in ranked]


def speaker_ranking(query: str, order: Sequence[str], speakers: Mapping[str, str | None]
                    ) -> list[str]:
    """The rows of ``order`` said by the one participant ``query`` names, in that order.

    A participant is a distinct speaker name among the candidates (``speakers``: row id
    → name); the query names one when it holds a word of that name that is no stopword
    ("Melanie", "Smith" for "Jane Smith"). Nothing when fewer than two participants are
    among the candidates (nothing to tell apart) or when the query names none or
    several of them ("what did Jane tell John?").
    """
    words = word_set(query)
    names = {name for name in speakers.values() if name}
    if len(names) < 2:
        return []
    named = [name for name in names if (word_set(name) - STOPWORDS) & words]
    if len(named) != 1:
        return []
    return [doc for doc in order if speakers.get(doc) == named[0]]


def _speaker(turn: Turn) -> str | None:
    name = turn.metadata.get("name")
    return name.lower() if isinstance(name, str) and name.strip() else None


def _clean(text: str) -> str:
    """What no store or model can take (lone surrogates, NUL) is dropped, not raised."""
    return text.encode("utf-8", "ignore").decode("utf-8").replace("\x00", " ")


_FILLER = frozenset(
    """happen happened happening happens talk talked talking discuss discussed say said
    mention mentioned anything something everything""".split())
"""Words that, around a time expression, ask what is in that time rather than about
something ("what happened yesterday?", "what did we talk about last week?")."""


def keyword_text(query: str, window: TimeWindow | None) -> str:
    """What keyword matching reads: the query without its time expression, so "in May
    2023" does not outvote the words that say what happened. "" when nothing but
    stopwords and ``_FILLER`` is left: the time ranking then lists the window's rows."""
    if window is None:
        return query
    rest = window.rest
    return rest if any(t not in STOPWORDS | _FILLER for t in query_terms(rest)) else ""


KeywordSearch = Callable[[list[str], MatchMode, int], list[tuple[str, float]]]


def _without_time(text: str, window: TimeWindow | None, search: KeywordSearch
                  ) -> KeywordSearch:
    """``search`` reading only the terms of ``text`` (the query without its time
    expression), so "yesterday" or "May 2023" cannot outrank what the query is about
    (the vector query keeps them: a model reads them as context, not as matches)."""
    if window is None:
        return search
    kept = set(query_terms(text))

    def run(terms: list[str], mode: MatchMode, limit: int) -> list[tuple[str, float]]:
        return search([t for t in terms if t in kept], mode, limit)

    return run


def item_time(item: Item) -> str:
    """When an item's fact happened, for time-aware search: ``valid_from``, else
    ``created_at``."""
    return item.valid_from or item.created_at


def items_in(filters: ItemQuery, window: TimeWindow) -> ItemQuery:
    """``filters`` narrowed to items whose time (``item_time``) is inside ``window``."""
    low, high = _narrow(filters.valid_from_min, filters.valid_from_max, window)
    return replace(filters, valid_from_min=low, valid_from_max=high)


def turns_in(filters: TurnQuery, window: TimeWindow) -> TurnQuery:
    """``filters`` narrowed to turns whose ``ts`` is inside ``window``."""
    low, high = _narrow(filters.time_from, filters.time_to, window)
    return replace(filters, time_from=low, time_to=high)


def _narrow(low: str | None, high: str | None, window: TimeWindow
            ) -> tuple[str | None, str | None]:
    lows = [b for b in (low, window.time_from) if b is not None]
    highs = [b for b in (high, window.time_to) if b is not None]
    return max(lows, default=None), min(highs, default=None)


def window_why(window: TimeWindow) -> dict[str, float]:
    """The window as ``why`` entries: ``time_window_start`` / ``time_window_end`` in
    POSIX seconds (a side left open has none)."""
    why = {}
    if window.start is not None:
        why["time_window_start"] = window.start.timestamp()
    if window.end is not None:
        why["time_window_end"] = window.end.timestamp()
    return why


def _importance(item: Item) -> float:
    value = item.metadata.get("importance")
    if isinstance(value, int | float) and 0 <= value <= 1:
        return float(value)
    return CATEGORY_IMPORTANCE.get(item.category, 0.5)
