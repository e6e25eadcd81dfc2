"""Consolidation: old sessions are distilled into knowledge and their turns marked.

A session qualifies when all its turns are older than ``idle_days``, it has at least
``min_turns`` turns, and some are not consolidated yet. One LLM call per session turns
its unconsolidated turns (the first ``max_turns`` of them) into items of source
``consolidation``, linked to those turns; the items and the ``turn.consolidated`` mark
are written in one transaction. Each item must pass the guards extraction's ADDs pass
(``guards.check_fact``: no placeholder, nothing only the assistant said or did, words a
user turn of the session said), and must not bring back what memory holds as no longer
true (below); one that fails is logged, counted as ``skipped`` and listed in the mark's
``problems``.
Turns stay until ``prune``. A session whose call fails is left as it was and tried
again on the next run.

Turns queued for extraction (``add_turns(infer=True)``) are extraction's, by their
extraction state:

- ``done``: extraction learnt what they hold. Distilling them again would bring back
  a fact the user corrected since (the writer's duplicate check only sees active
  items), so they are marked without being shown to the model; a session whose open
  turns are all like that costs no call. So are ``forgotten`` turns (``forget_all``).
- ``pending`` and ``failed``: left alone, neither shown nor marked. Extraction will
  learn pending ones, and ``requeue_extraction()`` puts failed ones back; distilling
  them here too would learn them twice. A later run marks them once they are done.
- ``skipped`` (too few words for extraction to ask) and turns never queued: distilled,
  since nothing learnt from them yet. The model is shown the user's current items
  only, so such old turns may restate a fact memory has since superseded or
  invalidated ("I live in Porto", long before "Lives in Porto" became "Lives in
  Lisbon"). A distilled fact that restates such a version (``dedup.restates``, the
  rule that merges restatements on every write) and no current item is skipped when
  the user turns that ground it are no newer than the moment that version stopped
  being true: memory learnt since that it no longer holds. Said again after that
  moment, it is learnt, as the user may mean it again.

Two runs may consolidate one session at once (the sessions layer's idle timer or
sweep, and ``maintain()``, in one process or several). Each asks the model, but the
transaction that applies an answer (``Store.writing_for``) first reads the turns
again: when they were consolidated (or forgotten) meanwhile, the answer is dropped,
as extraction drops a late answer for turns it lost. One run applies; the other's call
is wasted, which is the price of holding no lock across a model call.

``consolidate_session`` does the same for one given session now, whatever its age or
length (the agent's sessions layer calls it when a conversation goes idle or on
``/reset``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from ..clock import iso
from ..domain.dedup import dedup_terms, restates
from ..domain.events import FORGOTTEN, Kind, new_event
from ..errors import InvalidInput
from ..store.base import TurnQuery
from ..types import CATEGORIES, Event, Item, ItemQuery, Scope, Turn
from ..validation import check_scope
from .calls import Answer, ask, llm_events
from .guards import Said, check_fact, unquoted
from .prompts import Consolidation, Fact, consolidation_messages, entity_or_none, time_or_none

if TYPE_CHECKING:
    from ..providers.llm import LLM
    from ..store.base import Store
    from .parts import PipelineParts

__all__ = ["consolidate", "consolidate_session"]

log = logging.getLogger("ledgermem.consolidation")

_LEARNT = {"done": "already learnt by extraction",
           FORGOTTEN: "said before the user's memory was forgotten"}
"""Extraction states whose turns are marked without being shown to the model, and the
reason their mark gives."""

_EXTRACTION_ONLY = ("pending", "failed")
"""Extraction states whose turns consolidation leaves to extraction."""


def consolidate(parts: PipelineParts, scope: Scope, llm: LLM, *, max_sessions: int = 5,
                idle_days: float = 14, min_turns: int = 5, max_turns: int = 200,
                instructions: str | None = None) -> dict[str, int]:
    """Consolidate up to ``max_sessions`` sessions of ``scope``'s user, oldest first.

    Each session's items and marks are written for the user, ``scope``'s agent and that
    session (context ``global``). A session whose open turns all wait for extraction
    is passed over without counting. Returns ``consolidated`` (sessions whose turns
    this run marked, with or without a call), ``extracted_items`` and ``failed``
    (calls).
    """
    store, user_id = parts.store, scope.user_id
    cutoff = iso(parts.clock() - timedelta(days=idle_days))
    due = sorted((s for s in store.sessions(user_id)
                  if s["last_ts"] < cutoff and s["turns"] >= min_turns and s["unconsolidated"]),
                 key=lambda s: (s["last_ts"], s["session_id"]))
    counts = {"consolidated": 0, "extracted_items": 0, "failed": 0}
    for session in due:
        if counts["consolidated"] + counts["failed"] >= max_sessions:
            break
        turns = store.query_turns(user_id, TurnQuery(session_id=session["session_id"]))
        outcome = _distil(parts, scope, session["session_id"], turns, llm, instructions,
                          max_turns=max_turns)
        if outcome.status == "failed":
            counts["failed"] += 1
        elif outcome.status == "consolidated":
            counts["consolidated"] += 1
            counts["extracted_items"] += outcome.items
    return counts


def consolidate_session(parts: PipelineParts, scope: Scope, session_id: str, llm: LLM, *,
                        instructions: str | None = None) -> dict[str, int]:
    """Consolidate one session of ``scope``'s user now, however recent: every turn not
    consolidated yet (and not extraction's, see the module), in one LLM call with the
    whole conversation as context.

    The items and the ``turn.consolidated`` mark are written in one transaction, for the
    user, ``scope``'s agent and that session; a failed call leaves the session as it was.
    Returns ``consolidated`` (0 or 1), ``extracted_items``, ``failed`` (0 or 1) and
    ``turns`` (how many turns were marked, distilled or not). All are 0 when another
    run consolidated the session meanwhile.
    """
    turns = parts.store.query_turns(scope.user_id, TurnQuery(session_id=session_id))
    outcome = _distil(parts, scope, session_id, turns, llm, instructions)
    return {"consolidated": int(outcome.status == "consolidated"),
            "extracted_items": outcome.items, "failed": int(outcome.status == "failed"),
            "turns": outcome.turns}


@dataclass(frozen=True)
class _Plan:
    """What consolidation does with a session's open turns: ``distil`` is shown to the
    model; ``marked`` (reason → turn ids) is marked without a call. Turns that wait for
    extraction are in neither."""

    distil: list[Turn]
    marked: dict[str, list[str]]

    @property
    def ids(self) -> list[str]:
        """The turns the plan distils, in order (what an answer was asked about)."""
        return [t.id for t in self.distil]


def _extraction_states(store: Store, user_id: str) -> dict[str, str]:
    """Turn id → extraction state, for the states that keep a turn from being distilled."""
    return {turn_id: state for state in (*_LEARNT, *_EXTRACTION_ONLY)
            for turn_id in store.extraction_ids(user_id, state)}


def _plan(turns: Sequence[Turn], states: Mapping[str, str],
          max_turns: int | None = None) -> _Plan:
    """Split the open turns of ``turns`` by their extraction ``states``; only the first
    ``max_turns`` of those to distil are kept (the rest wait for the next run)."""
    distil: list[Turn] = []
    marked: dict[str, list[str]] = {}
    for turn in turns:
        state = states.get(turn.id)
        if turn.consolidated_at is not None or state in _EXTRACTION_ONLY:
            continue
        if state in _LEARNT:
            marked.setdefault(_LEARNT[state], []).append(turn.id)
        else:
            distil.append(turn)
    return _Plan(distil[:max_turns], marked)


@dataclass(frozen=True)
class _Outcome:
    """What one run did with a session: ``consolidated`` (turns marked, items written),
    ``failed`` (the call failed; nothing written), ``lost`` (another run consolidated
    the turns meanwhile; the answer was dropped) or ``idle`` (nothing to do)."""

    status: Literal["consolidated", "failed", "lost", "idle"]
    turns: int = 0
    items: int = 0


def _distil(parts: PipelineParts, scope: Scope, session_id: str, turns: Sequence[Turn],
            llm: LLM, instructions: str | None, *, max_turns: int | None = None
            ) -> _Outcome:
    """Ask the model about the open turns of ``turns`` that need distilling, if any
    (``_plan``), then apply the answer and the marks in one transaction (``_apply``).

    That transaction plans again from the turns as they are then; when the plan
    changed (another run consolidated them, or the user forgot them, during the call)
    nothing is applied and the call is only recorded: it was wasted, and the other
    run's result stands. What was forgotten is never shown to the model, so it is not
    learnt again from the conversation it came from."""
    store, user_id = parts.store, scope.user_id
    scoped = check_scope(Scope(user_id, scope.agent_id, session_id))
    plan = _plan(turns, _extraction_states(store, user_id), max_turns)
    if not plan.distil and not plan.marked:
        return _Outcome("idle")
    answer: Answer[Consolidation] | None = None
    system = ""
    if plan.distil:
        known = store.query_items(user_id, ItemQuery(), limit=30)[0]
        messages = consolidation_messages(plan.distil, known, instructions=instructions)
        system = messages[0]["content"]
        answer = ask(llm, messages, Consolidation, purpose="consolidation")
    with store.writing_for(user_id):
        if answer is not None:
            store.append(llm_events(scoped, iso(parts.clock()), answer.calls))
            if answer.value is None:
                log.warning("consolidating session %s failed: %s", session_id, answer.error)
                return _Outcome("failed")
        # Read again inside the transaction that writes: a run beside this one may
        # have consolidated these turns (or the user forgotten them) during the call.
        # Only the turns read before: one said since is for the next run.
        seen = {t.id for t in turns}
        now = _plan([t for t in store.query_turns(user_id, TurnQuery(session_id=session_id))
                     if t.id in seen], _extraction_states(store, user_id), max_turns)
        if now.ids != plan.ids or not (now.distil or now.marked):
            log.info("session %s changed meanwhile (consolidated by another run, or "
                     "forgotten): nothing applied", session_id)
            return _Outcome("lost")
        facts = answer.value if answer is not None else None
        added, events = _apply(parts, scoped, session_id, now, facts, system)
        store.append(events)
    marked = sum(len(e.payload["ids"]) for e in events)
    log.info("consolidated session %s: %d turns (%d distilled), %d items", session_id,
             marked, len(now.distil), added)
    return _Outcome("consolidated", marked, added)


def _apply(parts: PipelineParts, scoped: Scope, session_id: str, plan: _Plan,
           answer: Consolidation | None, system: str) -> tuple[int, list[Event]]:
    """Write the answer's facts that pass the guards (inside the caller's transaction);
    returns how many were added and the ``turn.consolidated`` events to append: one for
    the distilled turns, one per reason for the turns marked without a call."""
    ts = iso(parts.clock())
    events = [new_event(scoped, ts, Kind.TURN_CONSOLIDATED,
                        {"ids": ids, "items": 0, "skipped": 0, "distilled": False,
                         "reason": reason}) for reason, ids in plan.marked.items()]
    if answer is None or not plan.distil:
        return 0, events
    said = Said([(t.id, t.role, t.content) for t in plan.distil], system)
    added, problems = _write_facts(parts, scoped, session_id, answer.items, plan.distil, said)
    problems = [f"unreadable item {bad}" for bad in answer.rejected] + problems
    events.append(new_event(scoped, ts, Kind.TURN_CONSOLIDATED,
                            {"ids": plan.ids, "items": added, "skipped": len(problems),
                             **({"problems": problems} if problems else {})}))
    return added, events


def _write_facts(parts: PipelineParts, scoped: Scope, session_id: str, facts: list[Fact],
                 turns: list[Turn], said: Said) -> tuple[int, list[str]]:
    """Write each fact that is not refused (``_refusal``), each in its own savepoint;
    returns how many were added and a line per fact skipped (logged)."""
    added, problems = 0, []
    for fact in facts:
        problem = _refusal(parts.store, scoped.user_id, fact, said, turns)
        if problem is None:
            try:
                with parts.store.transaction():
                    parts.writer.remember(
                        scoped, fact.content,
                        fact.category if fact.category in CATEGORIES else "fact",
                        source="consolidation", context=fact.context or None,
                        entity=entity_or_none(fact.entity), sensitive=fact.sensitive,
                        due_at=time_or_none(fact.due_at, turns[-1].ts),
                        valid_from=turns[-1].ts, metadata={"turn_ids": [t.id for t in turns]},
                        reason=f"consolidated from session {session_id}")
                added += 1
                continue
            except InvalidInput as exc:
                problem = unquoted(str(exc)) if fact.sensitive else str(exc)
        problems.append(problem)
        log.warning("consolidation item skipped: %s", problem)
    return added, problems


def _refusal(store: Store, user_id: str, fact: Fact, said: Said, turns: Sequence[Turn]
             ) -> str | None:
    """Why ``fact`` must not be written, or None: it fails the guards, or it restates a
    version memory holds as no longer true since the user turns that ground it were
    said (``_ended_version``). The reason quotes no text of a sensitive fact or item."""
    checked = check_fact(fact.content, None, said)
    if checked.problem is not None:
        return unquoted(checked.problem) if fact.sensitive else checked.problem
    said_at = {t.id: t.ts for t in turns}
    ended = _ended_version(store, user_id, fact.content, max(
        (said_at[turn_id] for turn_id in checked.turn_ids), default=turns[-1].ts))
    if ended is None:
        return None
    problem = (f"{fact.content.strip()[:60]!r} restates {ended.content[:60]!r}, which "
               f"memory holds as no longer true since {_end(ended)[:16]} (said before then)")
    return unquoted(problem) if fact.sensitive or ended.sensitive else problem


_CANDIDATES = 10
"""Items, current and ended, that one fact's lookup for the version it restates reads
(as the writer's dedup lookup reads ten: a restatement shares more than 80% of the
fact's words, so the keyword ranking puts it at or near the top)."""


def _ended_version(store: Store, user_id: str, text: str, said_at: str) -> Item | None:
    """The version of a fact, superseded or invalidated at ``said_at`` or later, that
    ``text`` restates (``dedup.restates``), or None. None too when ``text`` restates a
    current item as well: the writer merges it into that one, and nothing comes back.

    One keyword lookup over every version of the user's items, holding two of the
    text's longest words (``dedup_terms``: every restatement does), and one read of
    the items found."""
    found = store.keyword_search_items(user_id, list(dedup_terms(text)), "two",
                                       ItemQuery(include_superseded=True), _CANDIDATES)
    if not found:
        return None
    versions = store.query_items(user_id, ItemQuery(
        ids=tuple(item_id for item_id, _ in found), include_superseded=True))[0]
    restated = [v for v in versions if restates(text, v.content)]
    if any(v.active for v in restated):
        return None
    ended = [v for v in restated if _end(v) >= said_at]
    return max(ended, key=_end, default=None)


def _end(item: Item) -> str:
    """When a version stopped being true: its ``valid_to``, or when it was superseded
    (a version superseded without one)."""
    return item.valid_to or item.updated_at
