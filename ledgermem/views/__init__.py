"""Ledger views: an agent's memory computed fresh from the ledger, as pure functions.

In a world of several agents serving one user, memory is not a separate store: it is
a filtered view over the user's append-only ledger, recomputed each turn. It is thus
always consistent with the ledger, rebuilt after a crash by reading the ledger again,
private by construction, and testable on a hand-written list of events.

The views, each a function of a list of events (one user's ledger, in append order):

- ``visible``: what an agent may see — its own events of any kind, plus events of the
  globally visible kinds (``ViewConfig.global_kinds``) or written ``global``. Events
  of two users in one list are refused (``InvalidInput``).
- ``episodic``: the last ``n`` visible events, oldest first.
- ``salient`` / ``scored``: the top ``k`` visible events by
  ``w_rel·relevance + w_rec·exp(−λ·Δturn) + w_imp·importance(kind)``, in chronological
  order; relevance is keyword Jaccard, or a ``MemoryIndex``'s score when one is given.
- reflection: ``reflection_due`` says when an agent has seen enough to reflect,
  ``reflection_request`` builds the prompt, ``reflect`` asks an ``LLM`` for a ``Belief``
  and returns the globally visible ``agent.reflected`` event to append, and
  ``beliefs`` lists an agent's current beliefs.
- ``build_context``: the prompt's layers in order (identity, scene, memory, visitor
  artifacts, extra, output format).

Nothing here reads or writes storage: to see a view as it was at a past position,
pass ``until(events, event_id=...)`` or ``until(events, time=...)`` instead of the
whole ledger.

Example:
    >>> from ledgermem.types import Event
    >>> ledger = [
    ...     Event("e1", "2026-06-01T12:00:00+00:00", "u", "world.observed",
    ...           {"text": "The bakery burned down"}),
    ...     Event("e2", "2026-06-01T12:01:00+00:00", "u", "agent.thought",
    ...           {"text": "The miller was out late"}, agent_id="miller"),
    ... ]
    >>> [e.id for e in episodic(ledger, "baker")]
    ['e1']
    >>> [e.id for e in salient(ledger, "miller", "who burned the bakery?", k=1)]
    ['e1']
"""

from .config import DEFAULT_GLOBAL_KINDS, DEFAULT_IMPORTANCE, REFLECTED, ViewConfig
from .context import build_context, event_line
from .reflection import (
    Belief,
    beliefs,
    reflect,
    reflection_due,
    reflection_event,
    reflection_request,
    unreflected,
)
from .salience import MemoryIndex, ScoredEvent, event_text, keyword_relevance, salient, scored
from .visibility import episodic, is_visible, until, visible

__all__ = [
    "DEFAULT_GLOBAL_KINDS",
    "DEFAULT_IMPORTANCE",
    "REFLECTED",
    "Belief",
    "MemoryIndex",
    "ScoredEvent",
    "ViewConfig",
    "beliefs",
    "build_context",
    "episodic",
    "event_line",
    "event_text",
    "is_visible",
    "keyword_relevance",
    "reflect",
    "reflection_due",
    "reflection_event",
    "reflection_request",
    "salient",
    "scored",
    "unreflected",
    "until",
    "visible",
]
