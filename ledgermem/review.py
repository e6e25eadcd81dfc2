"""The review queue: nothing proposed is stored until a person approves it.

A proposer (the system-discovery bootstrap, an agent's self-improvement loop, a
reflection, an import) hands ``propose`` its ``Finding``s; each becomes a
``proposal.made`` event in the user's ledger and nothing else. The projection gives
those events no rows, so a proposal is never searched, listed as knowledge or shown in
a prompt. A person then decides, and every decision is a ``proposal.decided`` event:

- ``approve``: the item is written through the usual writer (``ItemWriter.remember``:
  dedup, validation, ``memory.added``), with the proposal's id in its metadata and
  ledger reason; ``edit_and_approve`` does so with the person's changes;
- ``reject``: no item, and the proposal's text (content, entity, why) is blanked in the
  ledger as ``forget`` blanks an item's, so a rejected finding about someone's private
  life does not linger.

The queue is a fold over the user's ``proposal.*`` events (``fold_proposals``); it is
read inside the write transaction that acts on it, so two people approving at once
make one item. Forgetting an item made from a proposal blanks the proposal too, and
``forget_all`` and ``forget_user`` take pending proposals with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from .clock import new_id
from .domain.events import PROPOSAL_KINDS, Kind, ProposalDecided, ProposalMade
from .errors import InvalidInput, NotFound
from .knowledge import UserKnowledge
from .types import CATEGORIES, PROPOSAL_STATUSES, SOURCES, Event, Finding, Item, Proposal
from .validation import (
    check_bool,
    check_choice,
    check_confidence,
    check_id,
    check_name,
    check_offset,
    check_optional_limit,
    check_optional_text,
    clean_content,
    clean_context,
    clean_entity,
)

__all__ = ["EDITABLE", "MAX_WHY_CHARS", "StatusFilter", "UserReview", "fold_proposals"]

StatusFilter = Literal["pending", "approved", "edited", "rejected", "decided", "all"]
STATUS_FILTERS: tuple[str, ...] = (*PROPOSAL_STATUSES, "decided", "all")
EDITABLE = ("content", "category", "context", "entity", "sensitive", "confidence")
"""The fields a reviewer may change when approving (``edit_and_approve``)."""
MAX_WHY_CHARS = 2_000
"""Longest ``why`` a finding may carry."""
MAX_FINDINGS = 10_000
"""Most findings one ``propose`` call takes."""
RESET_REASON = "bootstrap reset"
FORGET_ALL_REASON = "forget all"


def fold_proposals(events: Iterable[Event]) -> dict[str, Proposal]:
    """The queue as ``events`` (a user's ``proposal.*`` events in ledger order) leave
    it: proposal id → ``Proposal``, in the order proposed. A decision about a proposal
    the events do not hold (a partial import) is ignored."""
    found: dict[str, Proposal] = {}
    for event in events:
        pid = event.subject_id
        if pid is None:
            continue
        data = event.payload
        if event.kind == Kind.PROPOSAL_MADE:
            meta = data.get("metadata") or {}
            found[pid] = Proposal(
                id=pid, content=str(data.get("content", "")),
                category=str(data.get("category", "fact")),
                context=str(data.get("context", "global")),
                source=str(data.get("source", "discovery")),
                confidence=float(data.get("confidence", 0.4)),
                proposer=str(data.get("proposer", "")), proposed_at=event.ts,
                entity=data.get("entity"), sensitive=bool(data.get("sensitive", False)),
                why=str(meta.get("why", "")), key=meta.get("key"))
        elif event.kind == Kind.PROPOSAL_DECIDED and pid in found:
            decision = data.get("decision")
            if decision in ("approved", "edited", "rejected"):
                found[pid] = dataclasses.replace(
                    found[pid], status=decision, decided_at=event.ts,
                    item_id=data.get("item_id"), changes=dict(data.get("changes") or {}))
    return found


def _identity(category: str, context: str, entity: str | None, content: str,
              key: str | None) -> str:
    """What makes two findings the same: their key, else their text and fields."""
    return f"key\0{key}" if key else f"text\0{category}\0{context}\0{entity}\0{content}"


def _of(proposal: Proposal) -> str:
    return _identity(proposal.category, proposal.context, proposal.entity,
                     proposal.content, proposal.key)


class UserReview(UserKnowledge):
    """The review queue of one user (the review layer of ``UserMemory``, see the
    module docs). Every call is confined to ``scope.user_id``."""

    # proposing --------------------------------------------------------------------
    def propose(self, findings: Iterable[Finding | Mapping[str, Any]], *,
                proposer: str = "api") -> list[Proposal]:
        """Put findings in the review queue; nothing becomes knowledge.

        Args:
            findings: ``Finding``s, or mappings with its fields (``content`` required;
                ``category``, ``context``, ``entity``, ``sensitive``, ``confidence``,
                ``source``, ``why``, ``key`` optional).
            proposer: who proposes (``bootstrap``, ``reflection``, ``import``…),
                shown to the reviewer.

        Returns:
            The proposal standing for each finding, in order: a new pending one, or
            the pending or approved one already queued for the same finding (the same
            ``key``, else the same text, category, context and entity), in which case
            nothing is appended. A rejected finding left nothing to match, so it can
            be proposed again.

        Raises:
            InvalidInput: a finding that is not one, empty content, an unknown category
                or source, confidence outside 0–1, a malformed entity, a bad proposer;
                nothing is proposed then.
        """
        who = check_name(proposer, "proposer")
        cleaned = [self._clean_finding(finding) for finding in _listed(findings)]
        with self._store.writing_for(self.user_id):
            queue = self._queue()
            standing = {_of(p): p for p in queue.values() if p.status != "rejected"}
            now = self._now()
            result, events = [], []
            for made in cleaned:
                same = standing.get(_identity(made.category, made.context, made.entity,
                                              made.content, made.metadata.get("key")))
                if same is None:
                    event = self._event(Kind.PROPOSAL_MADE,
                                        dataclasses.replace(made, proposer=who),
                                        subject_id=new_id(), ts=now)
                    events.append(event)
                    same = fold_proposals([event])[str(event.subject_id)]
                    standing[_of(same)] = same
                result.append(same)
            if events:
                self._store.append(events)
        return result

    def _clean_finding(self, finding: Any) -> ProposalMade:
        """A finding checked as ``remember`` would check the item, as its payload."""
        if isinstance(finding, Finding):
            fields = dataclasses.asdict(finding)
        elif isinstance(finding, Mapping):
            known = {f.name for f in dataclasses.fields(Finding)}
            unknown = sorted(str(k) for k in finding if k not in known)
            if unknown:
                raise InvalidInput(f"a finding has no field {', '.join(unknown)}; it has "
                                   f"{', '.join(sorted(known))}")
            fields = {**dataclasses.asdict(Finding(content="")), **finding}
        else:
            raise InvalidInput(f"a finding must be a Finding or a mapping, not "
                               f"{type(finding).__name__}")
        text, _ = clean_content(fields["content"], None)
        meta: dict[str, Any] = {}
        why = check_optional_text(fields["why"], "why", MAX_WHY_CHARS)
        if why:
            meta["why"] = why
        if fields["key"] is not None:
            meta["key"] = check_name(fields["key"], "a finding's key")
        check_bool(fields["sensitive"], "sensitive")
        context = fields["context"]
        return ProposalMade(
            content=text, category=check_choice("category", fields["category"], CATEGORIES),
            context=clean_context(self.scope.context if context is None else context),
            source=check_choice("source", fields["source"], SOURCES),
            confidence=check_confidence(fields["confidence"]), proposer="",
            sensitive=fields["sensitive"], entity=clean_entity(fields["entity"]),
            metadata=meta)

    # reading ----------------------------------------------------------------------
    def proposals(self, status: StatusFilter = "pending", *, source: str | None = None,
                  limit: int | None = None, offset: int = 0) -> list[Proposal]:
        """The review queue, oldest first.

        Args:
            status: ``pending`` (default), ``approved``, ``edited``, ``rejected``,
                ``decided`` (any of the three) or ``all``.
            source: only proposals of this item source (``discovery``…).
            limit: at most this many.
            offset: skip this many first.

        Raises:
            InvalidInput: an unknown status or source, a bad limit or offset.
        """
        check_choice("status", status, STATUS_FILTERS)
        if source is not None:
            check_choice("source", source, SOURCES)
        count = check_optional_limit(limit)
        start = check_offset(offset)
        found = [p for p in self._queue().values()
                 if (status == "all" or p.status == status
                     or (status == "decided" and p.status != "pending"))
                 and (source is None or p.source == source)]
        return found[start:] if count is None else found[start:start + count]

    def proposal(self, proposal_id: str) -> Proposal:
        """One proposal by id, whatever its status.

        Raises:
            NotFound: no such proposal for this user.
        """
        pid = check_id(proposal_id, "proposal id")
        found = self._queue().get(pid)
        if found is None:
            raise NotFound(f"no proposal {pid!r}")
        return found

    # deciding ---------------------------------------------------------------------
    def approve(self, ids: str | Sequence[str], *,
                edits: Mapping[str, Mapping[str, Any]] | None = None) -> list[Proposal]:
        """Approve pending proposals: each becomes a knowledge item (written as
        ``remember`` writes, so a restatement of an active item refreshes it), with
        the proposal's source, confidence and sensitive flag and its id in the item's
        metadata (``proposal_id``); the decision is a ledger event.

        Args:
            ids: proposal ids (one, or a list), or ``"all"`` for every pending one.
            edits: proposal id → the fields the reviewer changes (see
                ``edit_and_approve``); such a proposal is ``edited``.

        Returns:
            The decided proposals, in the order given, each with its ``item_id``.

        Raises:
            NotFound: an id that is no proposal of this user.
            InvalidInput: no ids, a proposal already decided, a bad edit; nothing is
                approved then.
        """
        with self._store.writing_for(self.user_id):
            chosen = self._pending(ids)
            changes = self._edits(chosen, edits or {})
            now = self._now()
            decided, events = [], []
            for proposal in chosen:
                change = changes.get(proposal.id, {})
                item = self._approved_item(proposal, change)
                decision: Literal["approved", "edited"] = "edited" if change else "approved"
                events.append(self._event(
                    Kind.PROPOSAL_DECIDED,
                    ProposalDecided(decision, item_id=item.id, changes=change),
                    subject_id=proposal.id, ts=now))
                decided.append(dataclasses.replace(
                    proposal, status=decision, decided_at=now, item_id=item.id,
                    changes=dict(change)))
            if events:
                self._store.append(events)
        return decided

    def edit_and_approve(
        self, proposal_id: str, *, content: str | None = None, category: str | None = None,
        context: str | None = None, entity: str | None = None, sensitive: bool | None = None,
        confidence: float | None = None,
    ) -> Proposal:
        """Approve one pending proposal with changes (None: as proposed; an empty
        ``entity`` clears it). A sensitive proposal stays sensitive: clear the flag on
        the item afterwards (``update``) if it must be shown in prompts.

        Raises:
            NotFound, InvalidInput: as ``approve``; no change given is an
                ``InvalidInput`` too (use ``approve``).
        """
        given = {"content": content, "category": category, "context": context,
                 "entity": entity, "sensitive": sensitive, "confidence": confidence}
        change = {name: value for name, value in given.items() if value is not None}
        if not change:
            raise InvalidInput("nothing to change: give content, category, context, "
                               "entity, sensitive or confidence (or use approve)")
        pid = check_id(proposal_id, "proposal id")
        return self.approve([pid], edits={pid: change})[0]

    def reject(self, ids: str | Sequence[str]) -> list[Proposal]:
        """Reject pending proposals: no item is made, and each proposal's text (its
        content, entity and why) is blanked in the ledger, as ``forget`` blanks an
        item's; the decision is a ledger event.

        Args:
            ids: proposal ids (one, or a list), or ``"all"`` for every pending one.

        Returns:
            The rejected proposals as the ledger now holds them (text blanked).

        Raises:
            NotFound: an id that is no proposal of this user.
            InvalidInput: no ids, or a proposal already decided; nothing is rejected
                then.
        """
        with self._store.writing_for(self.user_id):
            chosen = self._pending(ids)
            self._discard(chosen, reason=None)
            queue = self._queue()
        return [queue[p.id] for p in chosen]

    def reset_discovery(self) -> dict[str, int]:
        """Undo the system-discovery bootstrap: forget every item of source
        ``discovery`` (any version; text blanked everywhere, their proposals' too) and
        reject every pending ``discovery`` proposal. One transaction.

        Returns:
            ``{"items": forgotten, "proposals": rejected}``.
        """
        with self._store.writing_for(self.user_id):
            items = self.forget_by_source("discovery")
            pending = [p for p in self._queue().values()
                       if p.status == "pending" and p.source == "discovery"]
            self._discard(pending, reason=RESET_REASON)
        return {"items": items, "proposals": len(pending)}

    # forgetting takes proposals along -----------------------------------------------
    def forget(self, item_id: str) -> None:
        """Delete an item and blank its text everywhere, the ledger included (and the
        proposal it was approved from, if any)."""
        with self._store.writing_for(self.user_id):
            item = self._require(item_id)
            super().forget(item_id)
            if "proposal_id" in item.metadata:
                for proposal in self._queue().values():
                    if proposal.item_id == item.id:
                        self._store.redact(self.user_id, proposal.id)

    def forget_all(self) -> int:
        """Forget every knowledge item of this user (``/forget``), and what they said
        so far with it: the turns not consolidated yet stay in their sessions (the
        window still shows them, history keeps them) but are marked ``forgotten``, so
        neither idle consolidation nor queued extraction learns them again. Pending
        proposals are rejected (their text blanked). Turns said afterwards are learnt
        as usual. One transaction; returns the items forgotten.
        """
        with self._store.writing_for(self.user_id):
            count = super().forget_all()
            self._discard([p for p in self._queue().values() if p.status == "pending"],
                          reason=FORGET_ALL_REASON)
        return count

    # plumbing ---------------------------------------------------------------------
    def _queue(self) -> dict[str, Proposal]:
        return fold_proposals(self._store.events(self.user_id, kinds=PROPOSAL_KINDS))

    def _pending(self, ids: Any) -> list[Proposal]:
        """The pending proposals ``ids`` names (``"all"``: every pending one), read in
        the caller's write transaction."""
        queue = self._queue()
        if ids == "all":
            return [p for p in queue.values() if p.status == "pending"]
        if isinstance(ids, str):
            ids = [ids]
        if isinstance(ids, bytes) or not isinstance(ids, Sequence) or not ids:
            raise InvalidInput(f"give proposal ids (a list, one id, or 'all'), not {ids!r:.60}")
        chosen = []
        for pid in dict.fromkeys(check_id(i, "proposal id") for i in ids):
            proposal = queue.get(pid)
            if proposal is None:
                raise NotFound(f"no proposal {pid!r}")
            if proposal.status != "pending":
                raise InvalidInput(f"proposal {pid} was already {proposal.status}")
            chosen.append(proposal)
        return chosen

    def _edits(self, chosen: Sequence[Proposal], edits: Any) -> dict[str, dict[str, Any]]:
        """The reviewer's changes per proposal, checked (values as the item takes
        them), without those that change nothing."""
        if not isinstance(edits, Mapping):
            raise InvalidInput(f"edits must map proposal ids to changes, not {edits!r:.60}")
        by_id = {p.id: p for p in chosen}
        checked: dict[str, dict[str, Any]] = {}
        for pid, change in edits.items():
            if pid not in by_id:
                raise InvalidInput(f"edits name proposal {pid!r}, which is not being "
                                   "approved")
            if not isinstance(change, Mapping):
                raise InvalidInput(f"the edits of {pid} must be a mapping of fields")
            proposal = by_id[pid]
            cleaned = {name: self._edited(proposal, name, value)
                       for name, value in change.items()}
            cleaned = {name: value for name, value in cleaned.items()
                       if value != getattr(proposal, name)}
            if cleaned:
                checked[pid] = cleaned
        return checked

    def _edited(self, proposal: Proposal, name: Any, value: Any) -> Any:
        if name not in EDITABLE:
            raise InvalidInput(f"a proposal's {name!r} cannot be edited; the editable "
                               f"fields are {', '.join(EDITABLE)}")
        if name == "content":
            return clean_content(value, None)[0]
        if name == "category":
            return check_choice("category", value, CATEGORIES)
        if name == "context":
            return clean_context(value)
        if name == "entity":
            return None if value in (None, "") else clean_entity(value)
        if name == "confidence":
            return check_confidence(value)
        check_bool(value, "sensitive")
        if proposal.sensitive and not value:
            raise InvalidInput(f"proposal {proposal.id} is sensitive and stays so; clear the "
                               "flag on the item afterwards (update) if you must")
        return value

    def _approved_item(self, proposal: Proposal, change: Mapping[str, Any]) -> Item:
        final = dataclasses.replace(proposal, **change)
        return self._writer.remember(
            self.scope, final.content, final.category, source=final.source,
            confidence=final.confidence, context=final.context, entity=final.entity,
            sensitive=final.sensitive,
            metadata={"proposal_id": proposal.id, "proposer": proposal.proposer},
            reason=f"approved proposal {proposal.id} ({proposal.proposer})")

    def _discard(self, proposals: Sequence[Proposal], *, reason: str | None) -> None:
        """Reject ``proposals`` (pending, read in the caller's transaction) and blank
        their text in the ledger."""
        if not proposals:
            return
        now = self._now()
        self._store.append([self._event(Kind.PROPOSAL_DECIDED,
                                        ProposalDecided("rejected", reason=reason),
                                        subject_id=p.id, ts=now) for p in proposals])
        for proposal in proposals:
            self._store.redact(self.user_id, proposal.id)


def _listed(findings: Any) -> list[Any]:
    if isinstance(findings, str | bytes | Mapping | Finding) or not isinstance(
            findings, Iterable):
        raise InvalidInput("findings must be a list of findings")
    listed = list(findings)
    if len(listed) > MAX_FINDINGS:
        raise InvalidInput(f"at most {MAX_FINDINGS:,} findings at a time, not {len(listed):,}")
    return listed
