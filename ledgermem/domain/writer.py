"""The one write path for knowledge items: plan inside the transaction, then append.

``ItemWriter`` is what both the per-user handle and the background pipeline
(extraction, consolidation) write through. Each operation opens the store's write
transaction for the user (``Store.writing_for``: SQLite's ``BEGIN IMMEDIATE``, a
per-user advisory lock on PostgreSQL), reads the rows it depends on *inside* it,
hands them to a pure planner (``planners.py``) that checks them and turns the request
into ledger events, and appends those — so a check can
never be overtaken by another writer between reading and writing (eight threads
revising one item leave one active version). The writer needs only built parts
(store, clock, a time parser, a hook for new text); it never sees the ``Memory``
facade.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..clock import Clock, iso, new_id
from ..errors import NotFound
from ..store.base import Store
from ..types import CATEGORIES, SOURCES, START_CONFIDENCE, Item, ItemQuery, Scope
from ..validation import (
    check_choice,
    check_confidence,
    check_id,
    check_ids,
    check_optional_name,
    check_optional_text,
    clean_content,
    clean_context,
    clean_entity,
)
from .dedup import dedup_terms, twin_of
from .lineage import lineage
from .planners import (
    Revision,
    plan_add,
    plan_change,
    plan_forget,
    plan_invalidate,
    plan_merge,
    plan_restore,
    plan_revise,
)

__all__ = ["ItemWriter"]

When = Callable[[str | datetime | None], str | None]
"""Reads a time the caller gave (ISO, natural language, a datetime) as ISO UTC."""

DEDUP_CANDIDATES = 50
"""Keyword candidates one dedup lookup considers."""


class ItemWriter:
    """Writes knowledge items of any user through ledger events (see module docs).

    Args:
        store: the store written to.
        clock: the time source.
        when: parses the times callers give (``due_at``, ``at``, ``valid_from``).
        written: called after a write that added or changed text (wakes embedding).
        dedup: whether ``remember`` merges restatements by default.
    """

    def __init__(self, store: Store, clock: Clock, when: When,
                 written: Callable[[], None] = lambda: None, *, dedup: bool = True) -> None:
        self.store = store
        self.clock = clock
        self.when = when
        self.written = written
        self.dedup = dedup

    def now(self) -> str:
        return iso(self.clock())

    # reads inside a write ---------------------------------------------------------
    def require(self, user_id: str, item_id: str) -> Item:
        item = self.store.get_item(user_id, check_id(item_id, "item id"))
        if item is None:
            raise NotFound(f"no memory {item_id!r}")
        return item

    def twin(self, user_id: str, text: str, category: str, context: str, entity: str | None
             ) -> Item | None:
        """The active item ``text`` restates (``dedup.twin_of``): one keyword lookup of
        candidates and one batched read of them, whatever their number."""
        found = self.store.keyword_search_items(
            user_id, list(dedup_terms(text)), "or",
            ItemQuery(category=category, context=context, entity=entity), DEDUP_CANDIDATES)
        # The same text, by the content index (no LIMIT or ORDER BY the planner could
        # prefer to walk instead); twin_of checks category, context and entity.
        same = self.store.query_items(user_id, ItemQuery(content=text))[0]
        ids = tuple(dict.fromkeys([i.id for i in same] + [item_id for item_id, _ in found]))
        if not ids:
            return None
        rows = {i.id: i for i in self.store.query_items(user_id, ItemQuery(ids=ids))[0]}
        return twin_of(text, category, context, entity,
                       [rows[i] for i in ids if i in rows])

    # writes -----------------------------------------------------------------------
    def remember(
        self, scope: Scope, content: str, category: str = "fact", *,
        domain: str | None = None, source: str = "user", confidence: float | None = None,
        context: str | None = None, entity: str | None = None, sensitive: bool = False,
        due_at: str | datetime | None = None, metadata: Mapping[str, Any] | None = None,
        valid_from: str | datetime | None = None, reason: str | None = None,
        dedup: bool | None = None,
    ) -> Item:
        """Add an item, or refresh the active one it restates (see ``dedup``)."""
        text, meta = clean_content(content, metadata)
        domain = check_optional_name(domain, "domain")
        reason = check_optional_text(reason, "reason")
        check_choice("category", category, CATEGORIES)
        check_choice("source", source, SOURCES)
        conf = START_CONFIDENCE[source] if confidence is None else check_confidence(confidence)
        ctx = clean_context(context or scope.context)
        ent = clean_entity(entity)
        due, began = self.when(due_at), self.when(valid_from)
        merge = self.dedup if dedup is None else bool(dedup)
        with self.store.writing_for(scope.user_id):
            now = self.now()
            twin = self.twin(scope.user_id, text, category, ctx, ent) if merge else None
            if twin is not None:
                self.store.append(plan_merge(
                    scope, twin, text=text, confidence=conf, sensitive=bool(sensitive),
                    due=due, metadata=meta, source=source, reason=reason, now=now))
                if text != twin.content:
                    self.written()
                return replace(self.require(scope.user_id, twin.id), written="merged")
            item = Item(
                id=new_id(), user_id=scope.user_id, agent_id=scope.agent_id,
                category=category, content=text, domain=domain, source=source,
                confidence=conf, context=ctx, entity=ent, sensitive=bool(sensitive),
                due_at=due, created_at=now, updated_at=now, valid_from=began or now,
                metadata=meta,
            )
            self.store.append(plan_add(scope, item, reason=reason, now=now))
        self.written()
        return replace(item, written="added")

    def change(self, scope: Scope, item_id: str, build: Callable[[Item], dict[str, Any]], *,
               reason: str, source: str | None = None) -> Item:
        """Set the fields ``build(current item)`` returns (nothing to set: unchanged)."""
        with self.store.writing_for(scope.user_id):
            item = self.require(scope.user_id, item_id)
            changes = build(item)
            if not changes:
                return item
            self.store.append(plan_change(scope, item, changes, now=self.now(),
                                          reason=reason, source=source))
            if "content" in changes:
                self.written()
            return self.require(scope.user_id, item.id)

    def forget(self, scope: Scope, item_id: str) -> None:
        """Delete an item and blank its text everywhere, the ledger included."""
        with self.store.writing_for(scope.user_id):
            item = self.require(scope.user_id, item_id)
            self.store.append(plan_forget(scope, item, now=self.now()))
            self.store.redact(scope.user_id, item.id)

    def revise(
        self, scope: Scope, item_id: str, content: str, *, category: str | None = None,
        context: str | None = None, entity: str | None = None, sensitive: bool | None = None,
        due_at: str | datetime | None = None, source: str = "user", reason: str = "revised",
        turn_ids: Sequence[str] | None = None, at: str | datetime | None = None,
    ) -> Item:
        """Replace an active item by a new version that supersedes it."""
        text, meta = clean_content(content, None)
        check_choice("source", source, SOURCES)
        reason = check_optional_text(reason, "reason") or "revised"
        turn_ids = check_ids(turn_ids, "turn_ids")
        revision = Revision(
            text=text, metadata=meta, source=source, reason=reason,
            category=None if category is None else check_choice("category", category,
                                                                CATEGORIES),
            context=None if context is None else clean_context(context),
            entity=None if entity is None else clean_entity(entity),
            sensitive=None if sensitive is None else bool(sensitive),
            due=self.when(due_at), at=self.when(at), turn_ids=turn_ids)
        with self.store.writing_for(scope.user_id):
            old = self.require(scope.user_id, item_id)
            events, new = plan_revise(scope, old, revision, new_id=new_id(), now=self.now())
            self.store.append(events)
        self.written()
        return new

    def invalidate(
        self, scope: Scope, item_id: str, *, reason: str = "no longer true",
        source: str | None = None, turn_ids: Sequence[str] | None = None,
        at: str | datetime | None = None,
    ) -> Item:
        """Mark an active item as no longer true (``valid_to``); nothing is erased."""
        reason = check_optional_text(reason, "reason") or "no longer true"
        source = check_optional_name(source, "source")
        turn_ids = check_ids(turn_ids, "turn_ids")
        moment = self.when(at)
        with self.store.writing_for(scope.user_id):
            item = self.require(scope.user_id, item_id)
            self.store.append(plan_invalidate(scope, item, reason=reason, source=source,
                                              turn_ids=turn_ids, at=moment, now=self.now()))
            return self.require(scope.user_id, item.id)

    def restore(self, scope: Scope, item_id: str, *, reason: str = "restored") -> Item:
        """Make a superseded or invalidated version active again; any other version of
        the fact that is active (newer or older) is invalidated, so one stays active."""
        reason = check_optional_text(reason, "reason") or "restored"
        with self.store.writing_for(scope.user_id):
            item = self.require(scope.user_id, item_id)
            if item.active:
                return item
            self.store.append(plan_restore(scope, item,
                                           self._active_versions(scope.user_id, item),
                                           reason=reason, now=self.now()))
            return self.require(scope.user_id, item.id)

    def _active_versions(self, user_id: str, item: Item) -> list[Item]:
        """The other versions of ``item``'s fact (newer or older) that are active."""
        others = tuple(v for v in lineage(self.store, user_id, item.id) if v != item.id)
        if not others:
            return []
        return [v for v in self.store.query_items(user_id, ItemQuery(ids=others))[0]
                if v.active]
