"""Extraction (mem0-style): new turns and related items in, memory operations out.

``add_turns(..., infer=True)`` marks its turns ``pending`` in the store; that mark
*is* the queue, so a crash or restart loses nothing. A worker claims a batch (the
turns of one ``add_turns`` call) for a while, asks the LLM, and applies the answer's
ADD / UPDATE / DELETE / NOOP operations and the ``turns.extracted`` mark in one
transaction, after checking it still holds the claim: a batch is applied once, even
when a worker died mid-call and another took over after the claim expired.

A failed LLM call (invalid JSON, timeout, HTTP error after the provider's retries)
marks the turns ``failed`` with the error, so nothing blocks the queue;
``UserMemory.requeue_extraction()`` puts failed turns back. Operations that cannot be
applied (an id that was not shown, a DELETE over the limit, no content) or that fail
the guards (``guards.py``: a placeholder, what the assistant did, words the user never
said, an UPDATE that drops what it replaces without a reason) are logged to
``ledgermem.extraction``, listed in the ``turns.extracted`` event's ``problems`` and
skipped; the others are applied, with the user turns that ground them as ``turn_ids``.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..background import BackgroundWorker
from ..clock import iso, system_clock
from ..domain.events import Kind, new_event
from ..errors import InvalidInput, NotFound
from ..store.base import TurnQuery
from ..types import CATEGORIES, Item, ItemQuery, Scope, Turn
from ..validation import check_scope
from .calls import ask, llm_events
from .guards import (
    Checked,
    GuardOptions,
    Said,
    check_delete,
    check_fact,
    check_update,
    unquoted,
)
from .prompts import (
    ExtractionResult,
    Operation,
    entity_or_none,
    extraction_messages,
    time_or_none,
)

if TYPE_CHECKING:
    from .parts import PipelineParts

__all__ = ["ExtractionOptions", "ExtractionReport", "ExtractionWorker", "apply_operations",
           "extract", "target_of"]

log = logging.getLogger("ledgermem.extraction")


@dataclass(frozen=True)
class ExtractionOptions:
    """Tuning of extraction.

    Attributes:
        min_words: a batch with fewer words is marked ``skipped`` without a call.
        related_items: existing items shown to the model (hybrid search on the turns).
        max_deletes_per_turn: DELETEs applied per extraction call (one ``add_turns``
            batch, or ``max_turns_per_call`` turns of it); more are skipped.
        max_turns_per_call: a longer batch is extracted in several calls.
        claim_seconds: how long a worker holds a batch before another may take it over;
            longer than one LLM call with its retries.
        queue_batches: batches read from the queue at a time.
        background: extract in a daemon thread as turns arrive; False leaves the queue
            to ``flush()`` (batch jobs, or a CLI that must not call the model).
        guards: how strict the checks on each operation are (``guards.GuardOptions``).
    """

    min_words: int = 20
    related_items: int = 10
    max_deletes_per_turn: int = 1
    max_turns_per_call: int = 20
    claim_seconds: float = 300.0
    queue_batches: int = 16
    background: bool = True
    guards: GuardOptions = field(default_factory=GuardOptions)


@dataclass
class ExtractionReport:
    """What one extraction call did: ``outcome`` is ``done``, ``skipped``, ``failed``,
    or ``lost`` (another worker applied these turns meanwhile)."""

    turn_ids: list[str]
    outcome: str
    counts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    error: str | None = None


class _Rejected(Exception):
    """An operation that cannot be applied as asked."""


def extract(parts: PipelineParts, turns: Sequence[Turn], *, holder: str,
            options: ExtractionOptions, instructions: str | None) -> ExtractionReport:
    """Extract knowledge from ``turns`` (one user, claimed by ``holder``) and apply it,
    for the user, agent and session of the first turn (context ``global``)."""
    first, store = turns[0], parts.store
    scope = check_scope(Scope(first.user_id, first.agent_id, first.session_id))
    ids = [t.id for t in turns]
    words = sum(len(t.content.split()) for t in turns)
    if words < options.min_words:
        note = {"outcome": "skipped", "reason": f"{words} words, fewer than {options.min_words}"}
        return _settle(parts, scope, ids, holder, [], note)
    assert parts.llm is not None, "extraction needs an LLM"
    now = parts.clock()
    parts.embed_pending()  # items written a moment ago must be findable by meaning too
    hits = parts.searcher.search_items(first.user_id, "\n".join(t.content for t in turns),
                                       ItemQuery(), options.related_items, now=now)
    shown = {str(n): hit.item for n, hit in enumerate(hits, start=1) if hit.item is not None}
    messages = extraction_messages(turns, shown, instructions=instructions, now=turns[-1].ts)
    answer = ask(parts.llm, messages, ExtractionResult, purpose="extraction")
    if answer.value is None:
        log.warning("extraction of turns %s failed, marked failed: %s", ids, answer.error)
        return _settle(parts, scope, ids, holder, answer.calls,
                       {"outcome": "failed", "error": answer.error}, error=answer.error)
    result = answer.value
    with store.transaction():
        if not store.confirm_extraction(first.user_id, ids, holder):
            return _lost(parts, scope, ids, answer.calls)
        store.append(llm_events(scope, iso(now), answer.calls))
        counts, problems = apply_operations(parts, scope, result, shown, turns, options,
                                            instructions=messages[0]["content"])
        store.append([new_event(scope, iso(parts.clock()), Kind.TURNS_EXTRACTED,
                                {"ids": ids, "outcome": "done", **counts,
                                 **({"problems": problems} if problems else {})})])
    return ExtractionReport(ids, "done", counts, problems)


def _settle(parts: PipelineParts, scope: Scope, ids: list[str], holder: str, calls: Any,
            payload: dict[str, Any], error: str | None = None) -> ExtractionReport:
    ts = iso(parts.clock())
    with parts.store.transaction():
        if not parts.store.confirm_extraction(scope.user_id, ids, holder):
            return _lost(parts, scope, ids, calls)
        parts.store.append([*llm_events(scope, ts, calls), new_event(
            scope, ts, Kind.TURNS_EXTRACTED, {"ids": ids, **payload})])
    return ExtractionReport(ids, str(payload["outcome"]), error=error)


def _lost(parts: PipelineParts, scope: Scope, ids: list[str], calls: Any) -> ExtractionReport:
    log.info("turns %s were extracted by another worker meanwhile; answer dropped", ids)
    parts.store.append(llm_events(scope, iso(parts.clock()), calls))
    return ExtractionReport(ids, "lost")


def apply_operations(parts: PipelineParts, scope: Scope, result: ExtractionResult,
                     shown: Mapping[str, Item], turns: Sequence[Turn],
                     options: ExtractionOptions, *, instructions: str = ""
                     ) -> tuple[dict[str, int], list[str]]:
    """Check each operation (``guards``) and apply it in its own savepoint; one that
    fails is logged and skipped.

    Returns counts (``added``, ``updated``, ``deleted``, ``noop``, ``rejected``) and a
    line per skipped operation.
    """
    counts: Counter[str] = Counter({"added": 0, "updated": 0, "deleted": 0, "noop": 0,
                                    "rejected": 0})
    problems = [f"unreadable operation {bad}" for bad in result.rejected]
    touched: set[str] = set()
    said = Said([(t.id, t.role, t.content) for t in turns], instructions)
    at = turns[-1].ts
    for op in result.operations:
        if op.op == "DELETE" and counts["deleted"] >= options.max_deletes_per_turn:
            problems.append(f"DELETE {op.id}: more than {options.max_deletes_per_turn} "
                            "DELETE(s) in one extraction")
            continue
        try:
            with parts.store.transaction():
                counts[_apply(parts, scope, op, shown, touched, said, at,
                              options.guards)] += 1
        except (_Rejected, InvalidInput, NotFound) as exc:
            problems.append(f"{op.op} {op.id or ''}: {exc}".replace("  ", " "))
    counts["rejected"] = len(problems)
    for problem in problems:
        log.warning("extraction operation skipped: %s", problem)
    return dict(counts), problems


def _apply(parts: PipelineParts, scope: Scope, op: Operation, shown: Mapping[str, Item],
           touched: set[str], said: Said, at: str, guards: GuardOptions) -> str:
    """Check one operation and apply it through the writer; returns the count it adds
    to. Raises ``_Rejected`` for an operation that must not be applied."""
    if op.op == "NOOP":
        return "noop"
    if op.op == "ADD":
        checked = _passed(check_fact(op.content, op.reason, said, guards), op.sensitive)
        assert op.content is not None
        parts.writer.remember(scope, op.content, _category(op.category), source="llm_extract",
                              context=op.context or None, entity=entity_or_none(op.entity),
                              sensitive=op.sensitive, due_at=time_or_none(op.due_at, at),
                              valid_from=time_or_none(op.valid_from, at) or at,
                              metadata={"turn_ids": _provenance(checked, said)},
                              reason=checked.reason or _DEFAULT_REASON)
        return "added"
    target = target_of(op.id, shown)
    if target is None:
        raise _Rejected(f"id {op.id!r} was not among the items shown")
    if target.id in touched:
        raise _Rejected("a second operation on the same item")
    if op.op == "DELETE":
        checked = _passed(check_delete(target.content, op.reason, said, guards),
                          target.sensitive)
        touched.add(target.id)
        parts.writer.invalidate(scope, target.id, reason=checked.reason or _DEFAULT_REASON,
                                source="llm_extract", turn_ids=_provenance(checked, said), at=at)
        return "deleted"
    if op.content is not None and op.content.strip() == target.content:
        touched.add(target.id)
        return "noop"
    checked = _passed(check_update(op.content, op.reason, target.content, said, guards),
                      target.sensitive or op.sensitive)
    assert op.content is not None
    touched.add(target.id)
    parts.writer.revise(scope, target.id, op.content,
                        category=op.category if op.category in CATEGORIES else None,
                        context=op.context or None, entity=entity_or_none(op.entity),
                        sensitive=op.sensitive or None, due_at=time_or_none(op.due_at, at),
                        source="llm_extract", reason=checked.reason or _DEFAULT_REASON,
                        turn_ids=_provenance(checked, said),
                        at=time_or_none(op.valid_from, at) or at)
    return "updated"


_DEFAULT_REASON = "extracted from conversation"
"""The reason recorded when the model gave none worth keeping (``...``, a copy of the
content)."""


def _provenance(checked: Checked, said: Said) -> list[str]:
    """The turns a change came from: the user turns that ground it, or (grounding off)
    every turn of the batch."""
    return list(checked.turn_ids) or [turn_id for turn_id, _, _ in said.turns]


def _passed(checked: Checked, private: bool = False) -> Checked:
    """``checked`` when it passed; else ``_Rejected`` with its problem, which quotes no
    text when ``private`` (a sensitive item or fact: the problem is logged and kept in
    the ledger's ``problems``)."""
    if checked.problem is not None:
        raise _Rejected(unquoted(checked.problem) if private else checked.problem)
    return checked


_ALIAS = re.compile(r"^(?:(?:id|item|memory|alias|no|number)\b\s*[:#.]?\s*)?#?\s*\[?\s*"
                    r"(\d{1,4})\s*\]?\s*[.:)]?$", re.IGNORECASE)
_LINE = re.compile(r"^\[(\d{1,4})\]\s+\S")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2})?$")


def target_of(given: str | None, shown: Mapping[str, Item]) -> Item | None:
    """The shown item an operation's ``id`` names, read leniently where it cannot be
    misread, else None.

    Accepted: the alias (``1``), the alias dressed up (``[1]``, ``#1``, ``item 1``,
    ``id: 1``, a copied item line ``[1] (fact; …) …``), the item's recorded time as
    shown (``2026-11-23 17:30``) when exactly one shown item has it, the item's content
    when exactly one shown item has it. Anything else (two numbers, a sentence, a
    date two items share) names no item: the operation is refused.
    """
    if not given:
        return None
    text = " ".join(given.split())
    if text in shown:
        return shown[text]
    found = _ALIAS.match(text) or _LINE.match(text)
    if found:
        return shown.get(found.group(1))
    if _DATE.match(text):
        dated = [i for i in shown.values() if i.created_at[:16].replace("T", " ")
                 .startswith(text.replace("T", " "))]
        return dated[0] if len(dated) == 1 else None
    same = [i for i in shown.values() if i.content.casefold() == text.casefold()]
    return same[0] if len(same) == 1 else None


def _category(value: str | None) -> str:
    return value if value in CATEGORIES else "fact"


class ExtractionWorker(BackgroundWorker):
    """Extracts pending turns in a daemon thread woken by ``notify``.

    ``flush()`` extracts everything pending in the caller's thread, waiting for
    batches another worker holds until that worker finishes or its claim expires.
    """

    def __init__(self, parts: PipelineParts, *, options: ExtractionOptions | None = None,
                 instructions: str | None = None) -> None:
        super().__init__()
        self.parts = parts
        self.options = options or ExtractionOptions()
        self.instructions = instructions
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # Wake up when a claim another worker held may have expired.
        self.idle_wake_s = self.options.claim_seconds

    thread_name = "ledgermem-extract"
    log_name = "ledgermem.extraction"

    def notify(self) -> None:
        """Turns were queued: extract them soon (in the background, if enabled)."""
        if self.options.background:
            super().notify()

    def pending(self) -> bool:
        """Whether any turn, of any user, waits for extraction."""
        return bool(self.parts.store.pending_extractions(1))

    def run_once(self) -> int:
        """Claim and extract the batches at the head of the queue; returns turns settled."""
        store, done = self.parts.store, 0
        now = system_clock()
        for user_id, ids in store.pending_extractions(
                self.options.queue_batches, claimable_at=iso(now), holder=self.holder):
            if self._stop.is_set():
                break
            now = system_clock()
            until = iso(now + timedelta(seconds=self.options.claim_seconds))
            if not store.claim_extraction(user_id, ids, self.holder, until, iso(now)):
                continue
            turns = store.query_turns(user_id, TurnQuery(ids=tuple(ids)))
            size = max(1, self.options.max_turns_per_call)
            for start in range(0, len(turns), size):
                report = extract(self.parts, turns[start:start + size], holder=self.holder,
                                 options=self.options, instructions=self.instructions)
                done += 0 if report.outcome == "lost" else len(report.turn_ids)
        return done

    def flush(self) -> int:
        """Extract everything pending; returns how many turns this worker settled."""
        total = 0
        with self._busy:
            while True:
                settled = self.run_once()
                total += settled
                if settled:
                    continue
                if not self.pending():
                    return total
                time.sleep(0.05)  # held by another worker: wait for it or its claim to lapse
