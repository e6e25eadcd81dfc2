"""``UserMemory``, the per-user handle: conversations, tool calls, observability and
housekeeping, on top of the knowledge methods it inherits.

``UserMemory`` → ``UserReview`` (``review.py``: the review queue, propose, approve,
reject) → ``UserKnowledge`` (``knowledge.py``: remember, update, revise, forget, get,
search, search_all…) → ``UserHandle`` (``handle.py``: scope and plumbing).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .clock import iso, new_id
from .domain.events import ItemsScaled, Kind, Pruned
from .errors import InvalidInput
from .handle import TimeMode
from .ledger_views import UserLedger
from .pipeline.maintenance import maintain_user
from .review import UserReview
from .store.base import TurnQuery
from .types import Hit, ToolCall, Turn
from .validation import (
    ROLES,
    check_choice,
    check_confidence,
    check_days,
    check_filters,
    check_limit,
    check_name,
    check_number,
    check_optional_limit,
    check_optional_name,
    check_optional_text,
    check_query,
    check_turn_content,
    check_turns,
    json_object,
)

__all__ = ["UserMemory"]


class UserMemory(UserReview, UserLedger):
    """Everything one user's memory can do. Every call is confined to ``scope.user_id``.

    Knowledge (``remember``, ``search``, ``revise``, ``forget``…) is inherited from
    ``UserKnowledge``, the review queue (``propose``, ``proposals``, ``approve``,
    ``reject``…) from ``UserReview``; conversations, tool calls, observability and
    housekeeping are defined here.
    """

    # conversations ----------------------------------------------------------------
    def add_turn(
        self,
        role: str,
        content: str,
        *,
        session_id: str | None = None,
        name: str | None = None,
        at: str | datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Turn:
        """Keep one conversation message."""
        return self.add_turns([{"role": role, "content": content, "name": name, "at": at,
                                "metadata": metadata}], session_id=session_id)[0]

    def add_turns(
        self, turns: Iterable[Mapping[str, Any]], *, session_id: str | None = None,
        infer: bool = False,
    ) -> list[Turn]:
        """Keep several messages (dicts with ``role``, ``content`` and optionally
        ``name``, ``at``, ``metadata``) in one transaction.

        With ``infer=True`` the turns are also queued for extraction: a background
        worker asks the LLM what to remember from them (``flush()`` waits for it); this
        call returns at once. Without an LLM the turns are kept and wait in the queue.

        Raises:
            InvalidInput: an unknown role, empty content or content longer than
                ``Limits.max_turn_chars``, an unreadable ``at``, metadata that is not a
                JSON object, or text no store can keep (NUL, lone surrogates), named by
                the turn's index (``turn 3: …``); nothing is stored then.
        """
        session = check_optional_name(session_id, "session_id") or self.scope.session_id \
            or f"{self.user_id}:default"
        limits = self._memory.limits
        batch = new_id() if infer else None
        events = []
        for number, turn in enumerate(check_turns(turns)):
            try:
                role = check_choice("role", turn.get("role"), ROLES)
                content = check_turn_content(turn.get("content"), limits)
                at = self._when(turn.get("at")) or self._now()
                payload = {"role": role, "content": content, "at": at,
                           "name": check_optional_name(turn.get("name"), "a turn's name"),
                           "metadata": json_object(turn.get("metadata"), "metadata")}
            except InvalidInput as exc:
                raise InvalidInput(f"turn {number}: {exc}") from exc
            if batch:
                payload["extract"] = batch
            events.append(self._event(Kind.turn(role), payload, session_id=session))
        self._store.append(events)
        self._memory._written()
        if batch and events:
            self._memory._queued()
        return self._store.query_turns(self.user_id, TurnQuery(ids=tuple(e.id for e in events)))

    def session_history(self, session_id: str | None = None, *, limit: int | None = None
                        ) -> list[Turn]:
        """The last ``limit`` turns of a session, oldest first."""
        session = check_optional_name(session_id, "session_id") or self.scope.session_id \
            or f"{self.user_id}:default"
        turns = self._store.query_turns(self.user_id, TurnQuery(session_id=session),
                                        descending=True, limit=check_optional_limit(limit))
        return turns[::-1]

    def search_conversations(
        self,
        query: str | None = None,
        *,
        time_from: str | datetime | None = None,
        time_to: str | datetime | None = None,
        session_id: str | None = None,
        limit: int = 10,
        time_mode: TimeMode | None = None,
        min_score: float | None = None,
    ) -> list[Hit]:
        """Find past turns by keywords and meaning and/or a time range.

        A time expression in the query ("yesterday", "last week") boosts or filters the
        turns inside the window it names, as ``search``'s ``time_mode`` says;
        ``min_score`` leaves out hits scoring below it (see ``search``).
        """
        if query is not None:
            check_query(query, self._memory.limits)
        check_filters(session_id=session_id)
        filters = TurnQuery(session_id=session_id, time_from=self._when(time_from),
                            time_to=self._when(time_to))
        limit = check_limit(limit)
        if query is None or not query.strip():
            turns = self._store.query_turns(self.user_id, filters, descending=True, limit=limit)
            return [Hit(score=1.0, turn=t, why={"time_only": 1.0}) for t in turns]
        return self._searcher(time_mode, min_score).search_turns(
            self.user_id, query, filters, limit, now=self._memory.clock())

    def recent_conversations(self, limit: int = 20) -> list[Turn]:
        """The latest turns across sessions, newest first."""
        return self._store.query_turns(self.user_id, TurnQuery(), descending=True,
                                       limit=check_limit(limit))

    def sessions(self) -> list[dict[str, Any]]:
        """Sessions with turn counts and first/last times, latest first."""
        return self._store.sessions(self.user_id)

    # tools ------------------------------------------------------------------------
    def log_tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        success: bool | None = None,
        duration_ms: float | None = None,
        error: str | None = None,
        session_id: str | None = None,
        learn_error: bool = True,
    ) -> ToolCall:
        """Record one tool call of the host agent. A failure also becomes ``error``
        knowledge (source ``error_auto``) unless ``learn_error=False``.

        An ``error`` means the call failed: ``success`` defaults to whether ``error`` is
        None, and ``success=True`` with an ``error`` is refused as a contradiction.

        Raises:
            InvalidInput: no name, arguments that are not a JSON object, a negative or
                non-finite ``duration_ms``, ``success=True`` with an ``error``, or text
                no store can keep.
        """
        check_name(name, "a tool call's name")
        error = check_optional_text(error, "error", self._memory.limits.max_turn_chars)
        if success is None:
            success = error is None
        elif not isinstance(success, bool):
            raise InvalidInput(f"success must be True, False or None, not {success!r:.60}")
        elif success and error is not None:
            raise InvalidInput("a tool call that succeeded has no error; pass success=False "
                               "(or leave success out) with an error")
        if duration_ms is not None:
            duration_ms = check_number(duration_ms, "duration_ms", 0, math.inf)
        event = self._event(Kind.TOOL_CALLED, {
            "name": name, "arguments": json_object(arguments, "arguments"),
            "success": success, "duration_ms": duration_ms, "error": error},
            session_id=check_optional_name(session_id, "session_id"))
        with self._store.transaction():
            self._store.append([event])
            if not success and learn_error:
                self.remember(f"Tool {name} failed: {error or 'unknown error'}", "error",
                              source="error_auto", entity=f"tool:{name}")
        return ToolCall(id=event.id, user_id=self.user_id, name=name,
                        arguments=event.payload["arguments"], success=success, ts=event.ts,
                        duration_ms=duration_ms, error=error, session_id=event.session_id,
                        agent_id=event.agent_id)

    def tool_errors(self, *, name: str | None = None, limit: int = 20) -> list[ToolCall]:
        """Failed tool calls, newest first."""
        check_filters(name=name)
        return self._store.query_tool_calls(self.user_id, name=name, success=False,
                                            limit=check_limit(limit))

    def tool_stats(self) -> list[dict[str, Any]]:
        """Per tool: calls, failures, success rate, mean duration, last call."""
        return self._store.tool_stats(self.user_id)

    tool_summary = tool_stats

    def requeue_extraction(self) -> int:
        """Queue again the turns whose extraction failed; returns how many."""
        ids = self._store.extraction_ids(self.user_id, "failed")
        if ids:
            self._store.append([self._event(Kind.TURNS_QUEUED, {"ids": ids})])
            self._memory._queued()
        return len(ids)

    # observability ----------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counts of items, turns, sessions, tool calls and events, and the modes on.

        With an LLM configured, ``llm_calls`` totals what it cost this user:
        ``{"calls", "tokens_in", "tokens_out", "errors"}`` (see ``llm_usage``).
        """
        counts = self._store.counts(self.user_id)
        counts["embedder"] = getattr(self._memory.embedder, "model_id", None)
        counts["llm"] = getattr(self._memory.llm, "model", None)
        if self._memory.llm is not None:
            usage = self.llm_usage()
            counts["llm_calls"] = {key: sum(row[key] for row in usage)
                                   for key in ("calls", "tokens_in", "tokens_out", "errors")}
        return counts

    def llm_usage(self) -> list[dict[str, Any]]:
        """LLM calls made for this user, per purpose and model: calls, tokens_in,
        tokens_out, errors, latency_ms (total)."""
        return self._store.llm_usage(self.user_id)

    def status(self) -> dict[str, Any]:
        """Which mode is on and what waits: ``mode`` (``llm+embedder``, ``llm``,
        ``embedder`` or ``none``), the ``llm`` and ``embedder`` in use, ``extraction``
        turn counts by state, ``embedding`` rows pending, and the ``skipped`` steps
        with why."""
        memory = self._memory
        backlog = self._store.backlog(self.user_id)
        parts = [name for name, on in (("llm", memory.llm), ("embedder", memory.embedder))
                 if on is not None]
        return {
            "mode": "+".join(parts) or "none",
            "llm": getattr(memory.llm, "model", None),
            "structured_output": getattr(memory.llm, "structured_output", None),
            "embedder": getattr(memory.embedder, "model_id", None),
            "extraction": {state: backlog[f"extraction_{state}"]
                           for state in ("pending", "done", "skipped", "failed")},
            "embedding": {"pending": backlog["embedding_pending"]},
            "skipped": dict(memory.skipped),
        }

    def activity_timeline(self, days: int = 30) -> list[dict[str, Any]]:
        """Events per day and kind over the last ``days``."""
        since = iso(self._memory.clock() - timedelta(days=check_days(days)))
        return [{"day": d, "kind": k, "count": c} for d, k, c in
                self._store.activity(self.user_id, since)]

    def recent_errors(self, limit: int = 20) -> dict[str, Any]:
        """Known ``error`` items and the latest failed tool calls."""
        return {"items": self.by_category("error", limit=limit),
                "tool_calls": self.tool_errors(limit=limit)}

    def entities(self) -> list[tuple[str, int]]:
        """Entities linked to active items, with counts."""
        return self._store.facets(self.user_id, "entity")

    def contexts(self) -> list[tuple[str, int]]:
        """Contexts of active items, with counts."""
        return self._store.facets(self.user_id, "context")

    # housekeeping -----------------------------------------------------------------
    def maintain(self) -> dict[str, Any]:
        """Background maintenance for this user: decay → reconcile → consolidate →
        prune, each capped (``MaintenanceOptions``) and logged.

        Returns ``{"decay": {"decayed"}, "reconcile": {"pairs_checked", "reinforced",
        "contradicted", "weakened", "neutral"}, "consolidate": {"consolidated",
        "extracted_items"}, "prune": {"turns", "tool_calls", "items"}, "skipped"}``;
        steps that need an LLM (or vectors) are skipped without one and say why.
        """
        return maintain_user(self._memory.parts, self.scope, self._memory.maintenance,
                             decay=self.apply_confidence_decay, prune=self.prune,
                             instructions=self._memory.extraction_instructions)

    def apply_confidence_decay(self, *, unused_days: int = 30, factor: float = 0.9) -> int:
        """Multiply confidence by ``factor`` for items unused for ``unused_days``.

        An item decays at most once per ``unused_days``, however often this runs.
        Returns how many items decayed.
        """
        if check_number(factor, "decay factor", 0, 1) == 0:
            raise InvalidInput("decay factor must be in (0, 1], not 0")
        cutoff = iso(self._memory.clock() - timedelta(days=check_days(unused_days,
                                                                      "unused_days")))
        recent = {i for e in self._store.events(self.user_id, kinds=[Kind.MEMORY_DECAYED],
                                                 since=cutoff) for i in e.payload["ids"]}
        self._memory.recalls.flush()  # decide on uses noted so far, applied
        ids = [i for i, _ in self._store.stale_items(self.user_id, cutoff) if i not in recent]
        if ids:
            self._store.append([self._event(Kind.MEMORY_DECAYED, ItemsScaled(tuple(ids), factor))])
        return len(ids)

    def prune(self, days: int = 90, *, min_confidence: float = 0.1) -> dict[str, int]:
        """Drop turns and tool calls older than ``days``, and items below
        ``min_confidence`` unused that long. The ledger keeps the events.

        Raises:
            InvalidInput: ``days`` negative or beyond ``MAX_DAYS``, or ``min_confidence``
                outside 0–1.
        """
        min_confidence = check_confidence(min_confidence)
        cutoff = iso(self._memory.clock() - timedelta(days=check_days(days)))
        self._memory.recalls.flush()  # decide on uses noted so far, applied
        found = self._store.prunable(self.user_id, cutoff, min_confidence)
        if any(found.values()):
            self._store.append([self._event(Kind.MEMORY_PRUNED, Pruned(
                items=found["items"], turns=found["turns"], tools=found["tools"]))])
        return {"turns": len(found["turns"]), "tool_calls": len(found["tools"]),
                "items": len(found["items"])}
