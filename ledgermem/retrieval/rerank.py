"""The re-ranking hook: a function that reorders the best fused hits before the cut.

A reranker is any callable ``(query, hits) -> hits``: a cross-encoder, an LLM judge, a
rerank API, or a plain rule. It gets the top ``SearchOptions.rerank_depth`` hits (best
first, after fusion and salience) and returns them in its order, best first. It may
drop hits (they are left out of the results) and may change their ``score`` (a
cross-encoder's relevance, say); it may not invent hits or repeat one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol, runtime_checkable

from ..errors import LedgermemError, ProviderError
from ..types import Hit

__all__ = ["Reranker", "rerank"]


@runtime_checkable
class Reranker(Protocol):
    """Reorders search hits for a query, best first."""

    def __call__(self, query: str, hits: list[Hit], /) -> Sequence[Hit]:
        """The hits to keep, best first: a subset of ``hits``, each at most once."""
        ...


def rerank(reranker: Reranker, query: str, hits: Sequence[Hit], depth: int) -> list[Hit]:
    """``hits`` with the first ``depth`` reordered by ``reranker``; the rest follow.

    Each reranked hit keeps the item or turn it was given (a reranker cannot change
    what was found) and takes the score the reranker returned; its ``why`` gains
    ``rerank_rank`` (1-based) and ``pre_rerank_score``.

    Raises:
        ProviderError: the reranker raised (chained as ``__cause__``; ledgermem's own
            errors pass through as they are), returned something other than hits, or
            returned a hit it was not given, or one twice.
    """
    head, tail = list(hits[:depth]), list(hits[depth:])
    if not head:
        return list(hits)
    name = getattr(reranker, "__qualname__", None) or type(reranker).__qualname__
    try:
        returned: object = reranker(query, list(head))
    except LedgermemError:
        raise
    except Exception as exc:
        raise ProviderError(f"reranker {name} failed: {exc!r}") from exc
    if isinstance(returned, str | bytes) or not isinstance(returned, Sequence) or not all(
            isinstance(hit, Hit) and (hit.item or hit.turn) is not None for hit in returned):
        raise ProviderError(f"reranker {name} must return a list of the Hit objects it was "
                            f"given, not {type(returned).__name__}")
    given = {hit.id: hit for hit in head}
    ids = [hit.id for hit in returned]
    unknown = [i for i in ids if i not in given]
    if unknown or len(set(ids)) != len(ids):
        problem = f"hits it was not given ({', '.join(unknown)})" if unknown else "a hit twice"
        raise ProviderError(f"reranker {name} returned {problem}")
    reranked = []
    for rank, hit in enumerate(returned, start=1):
        before = given[hit.id]
        why = {**before.why, "rerank_rank": float(rank),
               "pre_rerank_score": round(before.score, 6), "score": round(hit.score, 6)}
        reranked.append(replace(before, score=hit.score, why=why))
    return reranked + tail
