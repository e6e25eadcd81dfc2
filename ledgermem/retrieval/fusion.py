"""Reciprocal rank fusion: combine ranked lists by rank, not by incomparable scores."""

from __future__ import annotations

import math
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
    contributions: dict[str, list[float]] = {}
    for name in sorted(rankings):
        weight = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, doc_id in enumerate(rankings[name], start=1):
            contributions.setdefault(doc_id, []).append(weight / (k + rank))
    return {doc_id: math.fsum(parts) for doc_id, parts in contributions.items()}
