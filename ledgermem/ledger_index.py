"""``HybridEventIndex``: the built-in ``MemoryIndex`` for the salience view.

Salience ranks by keyword Jaccard unless a ``MemoryIndex`` is attached
(``Memory(memory_index=…)``); this one scores relevance the way ledgermem's own search
does, over event text (``views.event_text``): BM25 over the keyword terms of
``retrieval.keyword``, cosine similarity of embeddings when an embedder is given, the
two rankings fused by reciprocal rank fusion (``retrieval.fusion.rrf``), and the fused
score divided by that of an event every retriever ranked first, so a score is 0–1.

It is a lens, never a source: it lives in memory, holds only what it was given
(``index``), is keyed by event id (indexing an event again changes nothing), and can be
wiped (``clear``) and rebuilt from the ledger at any time (``rebuild_from``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import InvalidInput
from .retrieval.fusion import rrf
from .retrieval.keyword import query_terms
from .types import Event
from .views import event_text

__all__ = ["HybridEventIndex"]

_MAX_TERMS = 100_000
"""Terms kept of one event's text: all of them, in practice."""


@dataclass(frozen=True)
class _Doc:
    text: str
    terms: frozenset[str]


class HybridEventIndex:
    """An in-memory hybrid search index over ledger events (a ``views.MemoryIndex``).

    BM25 counts each word of an event once (event texts are short) and takes its
    statistics (document frequencies, mean length) from the events searched among, so
    the score of an event does not depend on events outside them. With an embedder,
    an event whose cosine similarity to the query is at or below the floor is no
    vector match. Ties go to the smaller event id (the older event, for ledgermem's
    time-ordered ids), so the results do not depend on the order events were indexed
    in: an index rebuilt from the ledger answers as the one it replaces. Thread-safe.

    Args:
        embedder: an ``Embedder`` (``embed_batch`` / ``embed_query``) for the vector
            ranking; None ranks by keywords alone.
        similarity_floor: the least cosine similarity that counts as a vector match
            (None: the embedder's own ``similarity_floor``, else 0).
        rrf_k: the reciprocal rank fusion constant (60, as in ``SearchOptions``).
        k1: BM25's term saturation.
        b: BM25's length normalisation.

    Example:
        >>> index = HybridEventIndex()
        >>> index.index([Event("e1", "2026-06-01T12:00:00+00:00", "u", "agent.spoke",
        ...                    {"text": "The baker hid the key"})])
        >>> index.search("who hid the key?", 5)
        [('e1', 1.0)]
    """

    def __init__(self, embedder: Any = None, *, similarity_floor: float | None = None,
                 rrf_k: float = 60.0, k1: float = 1.2, b: float = 0.75) -> None:
        for name, value in (("rrf_k", rrf_k), ("k1", k1), ("b", b)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and value >= 0):
                raise InvalidInput(f"{name} must be a finite number ≥ 0, not {value!r}")
        self.embedder = embedder
        if similarity_floor is None:
            similarity_floor = getattr(embedder, "similarity_floor", 0.0)
        self.similarity_floor = float(similarity_floor)
        self.rrf_k = float(rrf_k)
        self.k1 = float(k1)
        self.b = float(b)
        self._lock = threading.Lock()
        self._docs: dict[str, _Doc] = {}
        self._vectors: dict[str, npt.NDArray[np.float32]] = {}
        self._matrix: tuple[dict[str, int], npt.NDArray[np.float32]] | None = None

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._docs

    # MemoryIndex ----------------------------------------------------------------------
    def index(self, events: Sequence[Event]) -> None:
        """Add ``events``. An event already indexed with the same text is left as it is;
        one whose text changed (the ledger blanked it when it was forgotten) is
        replaced, so the index never keeps text the ledger no longer holds.

        Raises:
            InvalidInput: something that is not an ``Event``.
        """
        fresh: dict[str, Event] = {}
        for event in events:
            if not isinstance(event, Event):
                raise InvalidInput(f"index takes Events, not {type(event).__name__}")
            fresh[event.id] = event
        with self._lock:
            texts = {i: event_text(e) for i, e in fresh.items()
                     if i not in self._docs or self._docs[i].text != event_text(e)}
        if not texts:
            return
        vectors = self._embed(texts)  # outside the lock: an embedder may be slow
        with self._lock:
            for event_id, text in texts.items():
                terms = frozenset(query_terms(text, max_terms=_MAX_TERMS))
                self._docs[event_id] = _Doc(text, terms)
                self._vectors.pop(event_id, None)
                if event_id in vectors:
                    self._vectors[event_id] = vectors[event_id]
            self._matrix = None

    def search(self, query: str, k: int, *, among: Collection[str] | None = None
               ) -> list[tuple[str, float]]:
        """At most ``k`` ``(event id, score)`` pairs, best first, scores from 0 to 1.

        Args:
            query: what to look for.
            k: how many hits at most.
            among: search only these event ids (those not indexed are ignored); None
                searches every indexed event.

        Raises:
            InvalidInput: a query that is not text, or ``k`` below 0.
        """
        if not isinstance(query, str):
            raise InvalidInput(f"a query must be text, not {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidInput(f"k must be a whole number ≥ 0, not {k!r}")
        with self._lock:
            ids = (list(self._docs) if among is None
                   else [i for i in dict.fromkeys(among) if i in self._docs])
            docs = {i: self._docs[i] for i in ids}
            matrix = self._vector_matrix()
        if k == 0 or not docs:
            return []
        rankings = {"keyword": self._keyword_ranking(query, docs)}
        if self.embedder is not None:
            rankings["vector"] = self._vector_ranking(query, docs, matrix)
        fused = rrf(rankings, k=self.rrf_k)
        ideal = len(rankings) / (self.rrf_k + 1)
        best = sorted(fused, key=lambda i: (-fused[i], i))[:k]
        return [(i, min(1.0, fused[i] / ideal)) for i in best]

    # housekeeping ---------------------------------------------------------------------
    def clear(self) -> None:
        """Forget everything indexed."""
        with self._lock:
            self._docs.clear()
            self._vectors.clear()
            self._matrix = None

    def rebuild_from(self, events: Iterable[Event]) -> None:
        """Wipe the index and index ``events`` (a ledger, or the part of it to search)."""
        events = list(events)
        self.clear()
        self.index(events)

    # internals ------------------------------------------------------------------------
    def _embed(self, texts: dict[str, str]) -> dict[str, npt.NDArray[np.float32]]:
        if self.embedder is None:
            return {}
        wanted = [i for i, text in texts.items() if text.strip()]
        if not wanted:
            return {}
        matrix = np.asarray(self.embedder.embed_batch([texts[i] for i in wanted]),
                            dtype=np.float32)
        return {i: matrix[row] for row, i in enumerate(wanted)}

    def _vector_matrix(self) -> tuple[dict[str, int], npt.NDArray[np.float32]] | None:
        """Every vector as one matrix (rows by id), made again only after a change.
        Called under the lock."""
        if not self._vectors:
            return None
        if self._matrix is None:
            rows = {i: row for row, i in enumerate(self._vectors)}
            self._matrix = (rows, np.stack(list(self._vectors.values())))
        return self._matrix

    def _keyword_ranking(self, query: str, docs: dict[str, _Doc]) -> list[str]:
        """BM25 (each word once) of the docs holding a query term, best first."""
        terms = query_terms(query)
        if not terms:
            return []
        n = len(docs)
        mean = sum(len(d.terms) for d in docs.values()) / n or 1.0
        frequency = {t: sum(1 for d in docs.values() if t in d.terms) for t in terms}
        idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t, df in frequency.items()}
        scores: dict[str, float] = {}
        for event_id, doc in docs.items():
            found = [t for t in terms if t in doc.terms]
            if found:
                norm = 1 + self.k1 * (1 - self.b + self.b * len(doc.terms) / mean)
                scores[event_id] = math.fsum(idf[t] * (self.k1 + 1) / norm for t in found)
        return sorted(scores, key=lambda i: (-scores[i], i))

    def _vector_ranking(self, query: str, docs: dict[str, _Doc],
                        matrix: tuple[dict[str, int], npt.NDArray[np.float32]] | None
                        ) -> list[str]:
        """The docs more similar to the query than the floor, most similar first."""
        if matrix is None or not query.strip():
            return []
        rows, vectors = matrix
        ids = [i for i in docs if i in rows]
        if not ids:
            return []
        vector = np.asarray(self.embedder.embed_query(query), dtype=np.float32)
        similarity = vectors[[rows[i] for i in ids]] @ vector
        kept = {i: float(s) for i, s in zip(ids, similarity, strict=True)
                if float(s) > self.similarity_floor}
        return sorted(kept, key=lambda i: (-kept[i], i))
