"""Background maintenance of one user's memory: decay → reconcile → consolidate → prune.

Each step is capped, logged to ``ledgermem.maintenance``, and isolated: a step that
fails is reported in the result and the next one still runs. Steps that need what is
not configured (an LLM; vectors for reconcile) are skipped and say why.

Decay and prune are the user's own operations (``UserMemory.apply_confidence_decay``
and ``prune``, which validate their arguments); they are passed in as callables, so
this module needs the parts and the scope, never the handle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .consolidate import consolidate
from .reconcile import reconcile

if TYPE_CHECKING:
    from ..types import Scope
    from .parts import PipelineParts

__all__ = ["Decay", "MaintenanceOptions", "Prune", "maintain_user", "sum_results"]

log = logging.getLogger("ledgermem.maintenance")


@dataclass(frozen=True)
class MaintenanceOptions:
    """Caps and thresholds of ``maintain``.

    Attributes:
        decay_unused_days / decay_factor: confidence × factor for items unused that long.
        similarity: cosine above which two active items of one context are compared.
        max_pairs: comparisons (LLM calls) per run and user.
        max_sessions: sessions consolidated per run and user.
        idle_days: a session is consolidated once all its turns are this old.
        min_session_turns: shorter sessions are left alone.
        prune_days / prune_min_confidence: see ``UserMemory.prune``.
    """

    decay_unused_days: int = 30
    decay_factor: float = 0.9
    similarity: float = 0.85
    max_pairs: int = 20
    max_sessions: int = 5
    idle_days: float = 14
    min_session_turns: int = 5
    prune_days: int = 90
    prune_min_confidence: float = 0.1


class Decay(Protocol):
    """Decays the confidence of the user's unused items; returns how many decayed."""

    def __call__(self, *, unused_days: int, factor: float) -> int: ...


class Prune(Protocol):
    """Drops the user's old turns, tool calls and weak unused items; returns counts."""

    def __call__(self, days: int, *, min_confidence: float) -> dict[str, int]: ...


def maintain_user(parts: PipelineParts, scope: Scope, options: MaintenanceOptions, *,
                  decay: Decay, prune: Prune, instructions: str | None = None
                  ) -> dict[str, Any]:
    """Run every step for ``scope``'s user; returns ``{"decay", "reconcile",
    "consolidate", "prune", "skipped"}`` (``skipped``: step → why).

    ``decay`` and ``prune`` run those steps for the user; ``instructions`` replace
    consolidation's default (what to keep).
    """
    llm, skipped, user_id = parts.llm, {}, scope.user_id
    result: dict[str, Any] = {}

    def step(name: str, run: Any) -> None:
        try:
            result[name] = run()
        except Exception as exc:  # one failing step must not stop the others
            log.exception("maintenance step %s failed for %s", name, user_id)
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            return
        log.info("maintenance %s for %s: %s", name, user_id, result[name])

    step("decay", lambda: {"decayed": decay(unused_days=options.decay_unused_days,
                                            factor=options.decay_factor)})
    why_not = ("no LLM configured" if llm is None
               else "no embedder configured (it compares vectors)" if parts.embedder is None
               else None)
    if llm is None or why_not is not None:
        skipped["reconcile"] = why_not or ""
        result["reconcile"] = dict.fromkeys(
            ("pairs_checked", "reinforced", "contradicted", "weakened", "neutral"), 0)
    else:
        step("reconcile", lambda: reconcile(parts, scope, llm, threshold=options.similarity,
                                            max_pairs=options.max_pairs))
    if llm is None:
        skipped["consolidate"] = "no LLM configured"
        result["consolidate"] = {"consolidated": 0, "extracted_items": 0}
    else:
        step("consolidate", lambda: consolidate(
            parts, scope, llm, max_sessions=options.max_sessions, idle_days=options.idle_days,
            min_turns=options.min_session_turns, instructions=instructions))
    step("prune", lambda: prune(options.prune_days,
                                min_confidence=options.prune_min_confidence))
    for name, why in skipped.items():
        parts.report_skipped(name, why)
    result["skipped"] = skipped
    return result


def sum_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Add up per-user results (numbers summed step by step; skipped reasons merged)."""
    total: dict[str, Any] = {"users": len(results), "skipped": {}}
    for result in results:
        for name, counts in result.items():
            if name == "skipped":
                total["skipped"].update(counts)
                continue
            into = total.setdefault(name, {})
            for key, value in counts.items():
                if isinstance(value, int | float):
                    into[key] = into.get(key, 0) + value
                else:
                    into.setdefault("errors", []).append(value)
    return total
