"""Consolidation: old sessions are distilled into knowledge and their turns marked.

A session qualifies when all its turns are older than ``idle_days``, it has at least
``min_turns`` turns, and some are not consolidated yet. One LLM call per session turns
its unconsolidated turns (the first ``max_turns`` of them) into items of source
``consolidation``, linked to those turns; the items and the ``turn.consolidated`` mark
are written in one transaction. Each item must pass the guards extraction's ADDs pass
(``guards.check_fact``: no placeholder, nothing only the assistant said or did, words a
user turn of the session said); one that fails is logged and counted as ``skipped``.
Turns stay until ``prune``. A session whose call fails is left as it was and tried
again on the next run.

``consolidate_session`` does the same for one given session now, whatever its age or
length (the agent's sessions layer calls it when a conversation goes idle or on
``/reset``).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from ..clock import iso
from ..domain.events import FORGOTTEN, Kind, new_event
from ..errors import InvalidInput
from ..store.base import TurnQuery
from ..types import CATEGORIES, ItemQuery, Scope, Turn
from ..validation import check_scope
from .calls import ask, llm_events
from .guards import Said, check_fact
from .prompts import Consolidation, Fact, consolidation_messages, entity_or_none, time_or_none

if TYPE_CHECKING:
    from ..providers.llm import LLM
    from .parts import PipelineParts

__all__ = ["consolidate", "consolidate_session"]

log = logging.getLogger("ledgermem.consolidation")


def consolidate(parts: PipelineParts, scope: Scope, llm: LLM, *, max_sessions: int = 5,
                idle_days: float = 14, min_turns: int = 5, max_turns: int = 200,
                instructions: str | None = None) -> dict[str, int]:
    """Consolidate up to ``max_sessions`` sessions of ``scope``'s user, oldest first.

    Each session's items and marks are written for the user, ``scope``'s agent and that
    session (context ``global``). Returns ``consolidated`` (sessions),
    ``extracted_items`` and ``failed`` (calls).
    """
    store, user_id = parts.store, scope.user_id
    cutoff = iso(parts.clock() - timedelta(days=idle_days))
    due = sorted((s for s in store.sessions(user_id)
                  if s["last_ts"] < cutoff and s["turns"] >= min_turns and s["unconsolidated"]),
                 key=lambda s: (s["last_ts"], s["session_id"]))[:max_sessions]
    counts = {"consolidated": 0, "extracted_items": 0, "failed": 0}
    for session in due:
        turns = [t for t in store.query_turns(user_id, TurnQuery(session_id=session["session_id"]))
                 if t.consolidated_at is None][:max_turns]
        if not turns:
            continue
        added = _distil(parts, scope, session["session_id"], turns, llm, instructions)
        if added is None:
            counts["failed"] += 1
            continue
        counts["consolidated"] += 1
        counts["extracted_items"] += added
    return counts


def consolidate_session(parts: PipelineParts, scope: Scope, session_id: str, llm: LLM, *,
                        instructions: str | None = None) -> dict[str, int]:
    """Consolidate one session of ``scope``'s user now, however recent: every turn not
    consolidated yet, in one LLM call with the whole conversation as context.

    The items and the ``turn.consolidated`` mark are written in one transaction, for the
    user, ``scope``'s agent and that session; a failed call leaves the session as it was.
    Returns ``consolidated`` (0 or 1), ``extracted_items``, ``failed`` (0 or 1) and
    ``turns`` (how many turns were distilled).
    """
    turns = [t for t in parts.store.query_turns(scope.user_id, TurnQuery(session_id=session_id))
             if t.consolidated_at is None]
    if not turns:
        return {"consolidated": 0, "extracted_items": 0, "failed": 0, "turns": 0}
    added = _distil(parts, scope, session_id, turns, llm, instructions)
    if added is None:
        return {"consolidated": 0, "extracted_items": 0, "failed": 1, "turns": 0}
    return {"consolidated": 1, "extracted_items": added, "failed": 0, "turns": len(turns)}


def _distil(parts: PipelineParts, scope: Scope, session_id: str, turns: list[Turn], llm: LLM,
            instructions: str | None) -> int | None:
    """One LLM call turns ``turns`` into items, written with the ``turn.consolidated``
    mark in one transaction. Returns the items added, or None when the call failed.

    Turns said before the user asked to forget everything (``FORGOTTEN``) are marked
    with the others but never shown to the model: what was forgotten is not learnt
    again from the conversation it came from."""
    store, user_id = parts.store, scope.user_id
    scoped = check_scope(Scope(user_id, scope.agent_id, session_id))
    ids = [t.id for t in turns]
    forgotten = set(store.extraction_ids(user_id, FORGOTTEN))
    turns = [t for t in turns if t.id not in forgotten]
    if not turns:
        store.append([new_event(scoped, iso(parts.clock()), Kind.TURN_CONSOLIDATED,
                                {"ids": ids, "items": 0, "skipped": 0, "distilled": False,
                                 "reason": "said before the user's memory was forgotten"})])
        return 0
    known = store.query_items(user_id, ItemQuery(), limit=30)[0]
    messages = consolidation_messages(turns, known, instructions=instructions)
    answer = ask(llm, messages, Consolidation, purpose="consolidation")
    with store.transaction():
        store.append(llm_events(scoped, iso(parts.clock()), answer.calls))
        if answer.value is None:
            log.warning("consolidating session %s failed: %s", session_id, answer.error)
            return None
        said = Said([(t.id, t.role, t.content) for t in turns], messages[0]["content"])
        added, skipped = _write_facts(parts, scoped, session_id, answer.value.items, turns,
                                      said)
        store.append([new_event(scoped, iso(parts.clock()), Kind.TURN_CONSOLIDATED,
                                {"ids": ids, "items": added,
                                 "skipped": len(answer.value.rejected) + skipped})])
    log.info("consolidated session %s: %d turns, %d items", session_id, len(turns), added)
    return added


def _write_facts(parts: PipelineParts, scoped: Scope, session_id: str, facts: list[Fact],
                 turns: list[Turn], said: Said) -> tuple[int, int]:
    """Write each fact that passes the guards, each in its own savepoint; returns how
    many were added and how many were skipped (logged)."""
    added = skipped = 0
    for fact in facts:
        checked = check_fact(fact.content, None, said)
        if checked.problem is not None:
            log.warning("consolidation item skipped: %s", checked.problem)
            skipped += 1
            continue
        try:
            with parts.store.transaction():
                parts.writer.remember(
                    scoped, fact.content,
                    fact.category if fact.category in CATEGORIES else "fact",
                    source="consolidation", context=fact.context or None,
                    entity=entity_or_none(fact.entity), sensitive=fact.sensitive,
                    due_at=time_or_none(fact.due_at, turns[-1].ts), valid_from=turns[-1].ts,
                    metadata={"turn_ids": [t.id for t in turns]},
                    reason=f"consolidated from session {session_id}")
            added += 1
        except InvalidInput as exc:
            log.warning("consolidation item skipped: %s", exc)
            skipped += 1
    return added, skipped
