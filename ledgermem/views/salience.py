"""Salience: the visible events most worth recalling now, not merely the newest.

Each visible event is scored

    w_rel·relevance + w_rec·exp(−λ·Δturn) + w_imp·importance(kind)

where ``Δturn`` counts the visible events after it (0 for the newest), so recency is
measured in what the agent lived through, not in wall-clock time. ``relevance`` is the
Jaccard similarity of the keyword sets of the query and the event's text; attaching a
``MemoryIndex`` replaces only that term with the index's score. The index is a lens,
never a source: it is fed the visible events before it is asked, and an id it returns
that is not among them counts for nothing, so it can change the ranking but never what
an agent may see.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidInput
from ..retrieval.keyword import STOPWORDS, word_set
from ..types import Event
from .config import ViewConfig, check_count
from .visibility import DEFAULT_CONFIG, visible

__all__ = ["TEXT_KEYS", "MemoryIndex", "ScoredEvent", "event_text", "keyword_relevance",
           "salient", "scored"]

TEXT_KEYS = ("text", "content", "belief")
"""Payload keys read, in this order, as an event's text."""


@runtime_checkable
class MemoryIndex(Protocol):
    """A rebuildable search index over ledger events, for the relevance term.

    Derived from the ledger and keyed by event id, so it can be wiped and rebuilt
    from it at any time.
    """

    def index(self, events: Sequence[Event]) -> None:
        """Add ``events``; an event already indexed (same id) is left as it is."""

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """At most ``k`` ``(event id, score)`` pairs, best first, scores from 0 to 1."""


@dataclass(frozen=True)
class ScoredEvent:
    """A visible event with its salience and each term that made it.

    Attributes:
        event: the event.
        score: ``w_rel·relevance + w_rec·recency + w_imp·importance``.
        relevance: keyword Jaccard with the query, or the index's score (0–1).
        recency: ``exp(−λ·age)``.
        importance: the kind's importance.
        age: visible events newer than this one (Δturn).
    """

    event: Event
    score: float
    relevance: float
    recency: float
    importance: float
    age: int

    @property
    def why(self) -> dict[str, float]:
        """The terms by name, for logs and tests."""
        return {"score": self.score, "relevance": self.relevance, "recency": self.recency,
                "importance": self.importance, "age": float(self.age)}


def event_text(event: Event) -> str:
    """The text of an event, as relevance and prompts read it.

    The first non-empty string among ``payload["text"]``, ``["content"]`` and
    ``["belief"]``; otherwise the payload as JSON (keys sorted), without the keys that
    hold ids (``id``, ``*_id``, ``*_ids``, ``based_on``, ``supersedes``), which would
    only add noise.
    """
    for key in TEXT_KEYS:
        value = event.payload.get(key)
        if isinstance(value, str) and value.strip():
            return value
    rest = {key: value for key, value in event.payload.items() if not _is_id_key(key)}
    return json.dumps(rest, sort_keys=True, ensure_ascii=False, default=str) if rest else ""


def keyword_relevance(query: str, text: str) -> float:
    """Jaccard similarity (0–1) of the keyword sets of two texts (stopwords dropped)."""
    return _jaccard(_keywords(query), _keywords(text))


def scored(events: Sequence[Event], agent_id: str, query: str,
           config: ViewConfig = DEFAULT_CONFIG, index: MemoryIndex | None = None
           ) -> list[ScoredEvent]:
    """Every event ``agent_id`` sees, scored against ``query``, most salient first.

    Ties go to the newer event. Arguments and errors are those of ``salient``.
    """
    if not isinstance(query, str):
        raise InvalidInput(f"query must be a string, not {type(query).__name__}")
    seen = visible(events, agent_id, config)
    relevance = _index_relevance(seen, query, index) if index is not None else None
    words = _keywords(query)
    newest = len(seen) - 1
    out = []
    for position, event in enumerate(seen):
        age = newest - position
        rel = (relevance.get(event.id, 0.0) if relevance is not None
               else _jaccard(words, _keywords(event_text(event))))
        rec = math.exp(-config.decay * age)
        imp = config.importance_of(event.kind)
        score = config.w_rel * rel + config.w_rec * rec + config.w_imp * imp
        out.append(ScoredEvent(event, score, rel, rec, imp, age))
    out.sort(key=lambda s: (-s.score, s.age))
    return out


def salient(events: Sequence[Event], agent_id: str, query: str,
            config: ViewConfig = DEFAULT_CONFIG, k: int | None = None,
            index: MemoryIndex | None = None) -> list[Event]:
    """The ``k`` most salient events ``agent_id`` sees, in chronological order.

    Args:
        events: one user's ledger (or a prefix, see ``until``), in append order.
        agent_id: the agent whose view this is.
        query: what the agent is facing now (the scene, the question).
        config: weights, decay and importance table.
        k: how many (``config.salience_k`` by default).
        index: scores relevance instead of keyword overlap; it is given the visible
            events (``index``, idempotent) and then asked for as many hits.

    Raises:
        InvalidInput: events of several users, an empty ``agent_id``, a query that is
            not a string, or ``k`` below 0.
    """
    count = config.salience_k if k is None else check_count("k", k)
    top = scored(events, agent_id, query, config, index)[:count]
    return [s.event for s in sorted(top, key=lambda s: -s.age)]


def _index_relevance(seen: list[Event], query: str, index: MemoryIndex) -> dict[str, float]:
    """The index's score per visible event id; other ids are dropped."""
    if not seen:
        return {}
    index.index(seen)
    allowed = {event.id for event in seen}
    found: dict[str, float] = {}
    for event_id, score in index.search(query, len(seen)):
        if event_id in allowed and event_id not in found:
            found[event_id] = _unit(score)
    return found


def _unit(score: Any) -> float:
    """An index's score clamped to 0–1 (anything not a finite number counts 0)."""
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(
            score):
        return 0.0
    return min(1.0, max(0.0, float(score)))


def _is_id_key(key: str) -> bool:
    return key in ("id", "based_on", "supersedes") or key.endswith(("_id", "_ids"))


def _keywords(text: str) -> frozenset[str]:
    return word_set(text) - STOPWORDS


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0
