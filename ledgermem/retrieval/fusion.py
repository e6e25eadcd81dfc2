"""Reciprocal rank fusion: combine ranked lists by rank, not by incomparable scores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["rrf"]


def rrf(
    rankings: Mapping[str, Sequence[str]],
    *,
    k: float = 60.0,
    weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Fuse named rankings (ids best first) into ``{id: score}``.

    ``score(d) = Σ_r weight_r / (k + rank_r(d))`` with 1-based ranks. The result does
    not depend on the order the rankings are given in.
    """
    fused: dict[str, float] = {}
    for name, ranking in rankings.items():
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + weight / (k + rank)
    return fused
