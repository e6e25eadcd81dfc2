"""``ViewConfig``: what an agent sees, how much of it, and how it is ranked."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeGuard

from ..errors import InvalidInput

__all__ = ["DEFAULT_GLOBAL_KINDS", "DEFAULT_IMPORTANCE", "REFLECTED", "ViewConfig",
           "check_count"]

REFLECTED = "agent.reflected"
"""The kind of a belief an agent wrote by reflecting (globally visible)."""

DEFAULT_GLOBAL_KINDS: frozenset[str] = frozenset(
    {"world.observed", "judge.verdict", "user.injected", "run.started", REFLECTED})
"""Kinds every agent of a user sees, whoever wrote them."""

DEFAULT_IMPORTANCE: Mapping[str, float] = MappingProxyType({
    "verdict.final": 1.00,
    "user.injected": 0.95,
    "judge.verdict": 0.90,
    REFLECTED: 0.85,
    "clue.found": 0.80,
    "world.observed": 0.70,
    "agent.spoke": 0.50,
    "agent.thought": 0.40,
    "run.started": 0.30,
})
"""Importance (0–1) of an event by its kind, for salience."""


@dataclass(frozen=True)
class ViewConfig:
    """Settings of the ledger views; every value is checked when the config is built.

    Attributes:
        global_kinds: kinds visible to every agent of the user (besides events written
            with ``visibility="global"``).
        importance: importance (0–1) by event kind.
        default_importance: importance of a kind the table does not name.
        episodic_n: events in the episodic window.
        salience_k: events ``salient`` returns.
        w_rel: weight of relevance to the query.
        w_rec: weight of recency, ``exp(-decay·Δturn)``.
        w_imp: weight of the kind's importance.
        decay: λ of the recency term (0.1: half-life about 7 events).
        reflect_every: visible events seen since its last reflection before an agent
            is due to reflect again.
        reflect_window: at most this many of those events (the newest) are shown to
            the model in one reflection request.

    Raises:
        InvalidInput: a count that is not a whole number ≥ 0 (≥ 1 for
            ``reflect_every`` and ``reflect_window``), a weight or decay that is
            negative or not finite, weights that are all 0, or an importance outside
            0–1.
    """

    global_kinds: frozenset[str] = DEFAULT_GLOBAL_KINDS
    importance: Mapping[str, float] = field(default_factory=lambda: DEFAULT_IMPORTANCE,
                                              hash=False)
    default_importance: float = 0.5
    episodic_n: int = 8
    salience_k: int = 8
    w_rel: float = 0.30
    w_rec: float = 0.40
    w_imp: float = 0.30
    decay: float = 0.1
    reflect_every: int = 10
    reflect_window: int = 40

    def __post_init__(self) -> None:
        kinds: object = self.global_kinds  # a caller may pass any collection, or a str
        if (isinstance(kinds, str) or not isinstance(kinds, Iterable)
                or not all(isinstance(k, str) and k for k in kinds)):
            raise InvalidInput("global_kinds must be a set of non-empty kind strings")
        # Frozen means frozen: a caller's set or dict is copied, not shared.
        object.__setattr__(self, "global_kinds", frozenset(kinds))
        try:
            table = dict(self.importance)
        except (TypeError, ValueError) as exc:
            raise InvalidInput("importance must map kinds to numbers") from exc
        for kind, value in table.items():
            _check_unit(f"importance[{kind!r}]", value)
        object.__setattr__(self, "importance", MappingProxyType(table))
        _check_unit("default_importance", self.default_importance)
        for name in ("episodic_n", "salience_k", "reflect_every", "reflect_window"):
            value = getattr(self, name)
            least = 1 if name.startswith("reflect") else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidInput(f"{name} must be a whole number ≥ {least}, not {value!r}")
        for name in ("w_rel", "w_rec", "w_imp", "decay"):
            value = getattr(self, name)
            if not _is_number(value) or value < 0:
                raise InvalidInput(f"{name} must be a finite number ≥ 0, not {value!r}")
        if self.w_rel + self.w_rec + self.w_imp == 0:
            raise InvalidInput("at least one of w_rel, w_rec, w_imp must be above 0")

    def importance_of(self, kind: str) -> float:
        """The importance of an event of ``kind`` (``default_importance`` if unlisted)."""
        return self.importance.get(kind, self.default_importance)


def _is_number(value: object) -> TypeGuard[float]:
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and math.isfinite(value))


def _check_unit(name: str, value: object) -> None:
    if not _is_number(value) or not 0 <= value <= 1:
        raise InvalidInput(f"{name} must be a number from 0 to 1, not {value!r}")


def check_count(name: str, value: int) -> int:
    """``value`` if it is a whole number ≥ 0; else ``InvalidInput``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be a whole number ≥ 0, not {value!r}")
    return value
