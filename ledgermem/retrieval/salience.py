"""Salience: relevance weighted by recency, importance and confidence."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InvalidInput

__all__ = ["CATEGORY_IMPORTANCE", "SalienceWeights", "salience"]

CATEGORY_IMPORTANCE = {
    "preference": 0.8,
    "fact": 0.7,
    "reminder": 0.7,
    "error": 0.6,
    "skill": 0.6,
    "note": 0.5,
}
"""Default importance by category; an item's ``metadata["importance"]`` overrides it."""


@dataclass(frozen=True)
class SalienceWeights:
    """How much each signal moves a hit; relevance always keeps ``1 - sum(weights)``.

    ``recency`` decays with a half-life of ``half_life_days`` from the item's last
    update (or the turn's time). Set every weight to 0 for pure relevance ranking.
    """

    recency: float = 0.10
    importance: float = 0.05
    confidence: float = 0.10
    half_life_days: float = 30.0

    def __post_init__(self) -> None:
        values = (self.recency, self.importance, self.confidence, self.half_life_days)
        if any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
               for v in values):
            raise InvalidInput(f"salience weights and half_life_days must be finite "
                               f"numbers, not {values!r}")
        total = self.recency + self.importance + self.confidence
        if min(self.recency, self.importance, self.confidence) < 0 or total > 1:
            raise InvalidInput("salience weights must be ≥ 0 and sum to at most 1")
        if self.half_life_days <= 0:
            raise InvalidInput("half_life_days must be positive")


def salience(
    relevance: float,
    *,
    age_days: float,
    importance: float,
    confidence: float,
    weights: SalienceWeights,
) -> float:
    """``relevance × (base + w_rec·recency + w_imp·importance + w_conf·confidence)``.

    ``relevance`` is normalised to 0–1 by the caller; the other signals are 0–1.
    """
    recency = math.exp(-math.log(2) * max(age_days, 0.0) / weights.half_life_days)
    base = 1.0 - weights.recency - weights.importance - weights.confidence
    return relevance * (
        base
        + weights.recency * recency
        + weights.importance * importance
        + weights.confidence * confidence
    )
