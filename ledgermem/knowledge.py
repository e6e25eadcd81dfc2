"""Knowledge items of one user: the ``UserKnowledge`` layer of ``UserMemory``.

Writes (``remember``, ``update``, ``forget``…), versions (``revise``, ``invalidate``,
``restore``) and reads (``get``, ``search``, ``search_all``, ``by_category``,
``history``…). The shared plumbing is in ``handle.py``; conversations, tool calls,
observability and housekeeping are in ``user_memory.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from .clock import iso, later
from .domain.events import FORGOTTEN, MEMORY_KINDS, Kind, new_event
from .domain.lineage import lineage
from .domain.planners import CLEARABLE
from .domain.projection import replay
from .errors import InvalidInput, NotFound
from .handle import TimeMode, UserHandle
from .pipeline.timeline import matches, rank_as_of, valid_at
from .retrieval.hybrid import Searcher, items_in, merge_hits
from .retrieval.rerank import rerank
from .store.base import TurnQuery
from .types import CATEGORIES, SOURCES, Event, Hit, Item, ItemQuery
from .validation import (
    check_bool,
    check_choice,
    check_confidence,
    check_days,
    check_filters,
    check_id,
    check_limit,
    check_optional_limit,
    check_optional_name,
    check_query,
    clean_content,
    clean_context,
    clean_entity,
    json_object,
    merge_metadata,
)

__all__ = ["UserKnowledge"]

_MATCHED = ("keyword_rank", "vector_rank")
"""``why`` keys that say a hit matched its query (see ``_recalled``)."""
_UNSET: Any = object()


class UserKnowledge(UserHandle):
    """What one user's memory knows: knowledge items, their versions and search.

    The knowledge layer of ``UserMemory``; every call is confined to ``scope.user_id``.
    """

    # knowledge: writes ------------------------------------------------------------
    def remember(
        self,
        content: str,
        category: str = "fact",
        *,
        domain: str | None = None,
        source: str = "user",
        confidence: float | None = None,
        context: str | None = None,
        entity: str | None = None,
        sensitive: bool = False,
        due_at: str | datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
        valid_from: str | datetime | None = None,
        reason: str | None = None,
        dedup: bool | None = None,
    ) -> Item:
        """Store a knowledge item verbatim, or refresh the item it restates.

        An active item of the same category, context and entity that this text
        restates — more than 80% of the words shared (Szymkiewicz–Simpson), and no
        negation, number, date or proper name in one that the other lacks — is
        updated instead of adding a second copy; the returned item's ``written`` says
        which happened (``"added"`` / ``"merged"``, its id is then the existing
        item's). ``dedup=False`` always adds (default: the Memory's ``dedup``).
        Content over 2,000 characters is cut and flagged in metadata. ``valid_from``
        is when the fact became true (default: now); ``reason`` is kept in the ledger
        entry (see ``history``).

        Raises:
            InvalidInput: empty content, unknown category or source, confidence
                outside 0–1, a malformed entity or an unreadable ``due_at``.
        """
        return self._writer.remember(
            self.scope, content, category, domain=domain, source=source,
            confidence=confidence, context=context, entity=entity, sensitive=sensitive,
            due_at=due_at, metadata=metadata, valid_from=valid_from, reason=reason,
            dedup=dedup)

    def remember_many(
        self, entries: Iterable[str | Mapping[str, Any]], *, dedup: bool | None = None
    ) -> list[Item]:
        """Store many knowledge items in one transaction; returns them in input order.

        Each entry is a text, or a dict of ``remember``'s arguments (``content``
        required; ``category``, ``domain``, ``source``, ``confidence``, ``context``,
        ``entity``, ``sensitive``, ``due_at``, ``metadata``, ``valid_from``,
        ``reason``). Each is deduplicated as ``remember`` would, against the stored
        items and the entries before it in the batch: an entry that restates one
        returns that item, ``written="merged"``. Every item is as stored when the call
        returns (two entries merged into one item return it twice). Embedding happens
        in the background, as after ``remember``.

        Example:
            >>> alice.remember_many(["Likes green tea",  # doctest: +SKIP
            ...                      {"content": "Allergic to nuts", "sensitive": True}])

        Raises:
            InvalidInput: a bad entry (as ``remember`` says), an unknown field or an
                entry that is neither a text nor a dict; the message names its index
                (``item 3: …``) and nothing is stored.
        """
        return self._writer.remember_many(self.scope, entries, dedup=dedup)

    def update(
        self,
        item_id: str,
        *,
        content: str = _UNSET,
        category: str = _UNSET,
        domain: str | None = _UNSET,
        confidence: float = _UNSET,
        context: str = _UNSET,
        entity: str | None = _UNSET,
        sensitive: bool = _UNSET,
        due_at: str | datetime | None = _UNSET,
        metadata: Mapping[str, Any] = _UNSET,
    ) -> Item:
        """Change only the given fields; ``updated_at`` is set, a new content drops the
        embedding (it is recomputed). Pass ``None`` to clear ``domain``, ``entity`` or
        ``due_at``."""
        fields: dict[str, Any] = {}
        content_meta: dict[str, Any] | None = None
        if content is not _UNSET:
            fields["content"], content_meta = clean_content(content, None)
        if category is not _UNSET:
            fields["category"] = check_choice("category", category, CATEGORIES)
        if domain is not _UNSET:
            fields["domain"] = check_optional_name(domain, "domain")
        if confidence is not _UNSET:
            fields["confidence"] = check_confidence(confidence)
        if context is not _UNSET:
            fields["context"] = clean_context(context)
        if entity is not _UNSET:
            fields["entity"] = clean_entity(entity)
        if sensitive is not _UNSET:
            fields["sensitive"] = check_bool(sensitive, "sensitive")
        if due_at is not _UNSET:
            fields["due_at"] = self._when(due_at)
            fields["reminded_at"] = None
        extra = None if metadata is _UNSET else json_object(metadata, "metadata")

        def build(item: Item) -> dict[str, Any]:
            changes = dict(fields)
            meta = item.metadata
            if content_meta is not None:
                meta = merge_metadata(meta, content_meta)
            if extra is not None:
                meta = {**meta, **extra}
            if meta != item.metadata:
                changes["metadata"] = meta
            if changes:
                changes["updated_at"] = self._now()
            return changes

        return self._writer.change(self.scope, item_id, build, reason="update")

    def update_confidence(self, item_id: str, confidence: float) -> Item:
        """Set confidence, clamped to 0–1."""
        if (isinstance(confidence, bool) or not isinstance(confidence, int | float)
                or confidence != confidence):
            raise InvalidInput("confidence must be a number")
        value = min(1.0, max(0.0, float(confidence)))
        return self._writer.change(
            self.scope, item_id, lambda _: {"confidence": value, "updated_at": self._now()},
            reason="confidence")

    def mark_reminded(self, item_id: str) -> Item:
        """Record that the user was reminded of a due item."""
        return self._writer.change(self.scope, item_id,
                                   lambda _: {"reminded_at": self._now()}, reason="reminded")

    def forget(self, item_id: str) -> None:
        """Delete an item and blank its text everywhere, the ledger included."""
        self._writer.forget(self.scope, item_id)

    def forget_by_source(self, source: str) -> int:
        """Forget every item (any state) that came from ``source``; returns how many."""
        check_choice("source", source, SOURCES)
        items, _ = self._store.query_items(self.user_id, ItemQuery(source=source,
                                                                   include_superseded=True))
        with self._store.transaction():
            for item in items:
                self.forget(item.id)
        return len(items)

    def forget_all(self) -> int:
        """Forget every knowledge item of this user (``/forget``), and what they said
        so far with it: the turns not consolidated yet stay in their sessions (the
        window still shows them, history keeps them) but are marked ``forgotten``, so
        neither idle consolidation nor queued extraction learns them again. Turns said
        afterwards are learnt as usual. One transaction; returns the items forgotten.
        """
        with self._store.writing_for(self.user_id):
            count = sum(self.forget_by_source(source) for source in SOURCES)
            open_ids = [turn.id for turn in self._store.query_turns(self.user_id, TurnQuery())
                        if turn.consolidated_at is None]
            if open_ids:
                self._store.append([new_event(
                    self.scope, self._now(), Kind.TURNS_EXTRACTED,
                    {"ids": open_ids, "outcome": FORGOTTEN, "reason": "forget all"})])
        return count

    def forget_user(self) -> int:
        """Erase every trace of this user, the ledger included. Returns events removed.

        An attached ``memory_index`` that can ``clear()`` is cleared too, so none of
        this user's text stays in it; views index again what they read from the ledger.
        """
        removed = self._store.delete_user(self.user_id)
        clear = getattr(self._memory.memory_index, "clear", None)
        if callable(clear):
            clear()
        return removed

    # knowledge: versions ----------------------------------------------------------
    def revise(
        self,
        item_id: str,
        content: str,
        *,
        category: str = _UNSET,
        context: str = _UNSET,
        entity: str | None = _UNSET,
        domain: str | None = _UNSET,
        confidence: float = _UNSET,
        sensitive: bool = _UNSET,
        due_at: str | datetime | None = _UNSET,
        source: str = "user",
        reason: str = "revised",
        turn_ids: Sequence[str] | None = None,
        at: str | datetime | None = None,
    ) -> Item:
        """Replace an active item by a new version (a new id) that supersedes it.

        The new version takes the given fields and the old one's for the rest; pass
        ``None`` to leave ``entity``, ``domain`` or ``due_at`` empty, as ``update`` does.
        Its confidence is the one given, else the old one's or its source's starting
        confidence, whichever is higher. The old version gets ``superseded_by`` and
        ``valid_to`` (``at``, default now) and stays in ``history``,
        ``get(..., as_of=…)`` and ``include_superseded`` searches; ``restore`` brings it
        back. Unlike ``update``, nothing is overwritten.
        """
        given: dict[str, Any] = {"category": category, "context": context, "entity": entity,
                                 "domain": domain, "confidence": confidence,
                                 "sensitive": sensitive, "due_at": due_at}
        clear = [name for name in CLEARABLE if given[name] is None]
        fields = {name: value for name, value in given.items()
                  if value is not _UNSET and name not in clear}
        for name in ("category", "context", "confidence", "sensitive"):
            if fields.get(name, _UNSET) is None:
                raise InvalidInput(f"{name} cannot be empty; leave it out to keep the old one")
        return self._writer.revise(
            self.scope, item_id, content, **fields, source=source, reason=reason,
            turn_ids=turn_ids, at=at, clear=clear)

    def invalidate(
        self, item_id: str, *, reason: str = "no longer true", source: str | None = None,
        turn_ids: Sequence[str] | None = None, at: str | datetime | None = None,
    ) -> Item:
        """Mark an active item as no longer true: ``valid_to`` is set (``at``, default
        now) and nothing is erased; ``restore`` brings it back."""
        return self._writer.invalidate(self.scope, item_id, reason=reason, source=source,
                                       turn_ids=turn_ids, at=at)

    def restore(self, item_id: str, *, reason: str = "restored") -> Item:
        """Make a superseded or invalidated version active again (undo).

        If newer versions replaced it, the active one of them is invalidated, so one
        version of the fact is active. Both changes are ledger events (``history``).
        An item that is already active is returned unchanged.
        """
        return self._writer.restore(self.scope, item_id, reason=reason)

    # knowledge: reads -------------------------------------------------------------
    def get(self, item_id: str, *, as_of: str | datetime | None = None) -> Item:
        """One item by id. Raises ``NotFound`` for ids outside this user's memory.

        With ``as_of``, the item as the ledger knew it at that time (its ``valid_to``
        and ``superseded_by`` say whether it was still true); ``NotFound`` if it was not
        known yet, or has been forgotten since.
        """
        check_id(item_id, "item id")
        if as_of is None:
            return self._require(item_id)
        item = self._known_at(as_of)[1].get(item_id)
        if item is None:
            raise NotFound(f"no memory {item_id!r} at {as_of}")
        return item

    def _known_at(self, as_of: str | datetime) -> tuple[str, dict[str, Item]]:
        moment = self._when(as_of)
        assert moment is not None
        return moment, replay(self._store.events(self.user_id, kinds=MEMORY_KINDS), moment)

    def search(
        self,
        query: str,
        *,
        category: str | None = None,
        context: str | None = None,
        entity: str | None = None,
        sensitive: bool | None = None,
        top_k: int | None = None,
        time_from: str | datetime | None = None,
        time_to: str | datetime | None = None,
        include_superseded: bool = False,
        touch: bool = True,
        as_of: str | datetime | None = None,
        time_mode: TimeMode | None = None,
        min_score: float | None = None,
    ) -> list[Hit]:
        """Find knowledge by keywords and meaning, best first.

        Filters apply before ranking. Each hit's ``why`` says how it ranked. Every item
        returned that matched the query gains +0.02 confidence and a use, applied in the
        background a moment later (``flush`` applies it now); ``touch=False`` to only
        look.

        A time expression in the query ("last week", "in May 2023", "3 days ago") is
        resolved against the clock (or ``as_of``) into a window; items that became true
        inside it rank higher (``time_mode="boost"``), or are the only ones returned
        (``"filter"``), or it is read as words (``"off"``). ``None``: as the Memory's
        ``SearchOptions`` say (``time_weight``, ``time_filter``).

        With ``as_of``, search what was known and true at that time, replayed from the
        ledger (``valid_from <= as_of < valid_to``), ranked by shared words; nothing is
        touched.

        Scores are on one scale across queries (1: found first by both the words and
        the meaning of the query); ``min_score`` (0–1) leaves out hits below it.
        """
        check_query(query, self._memory.limits)
        check_filters(context=context, sensitive=sensitive)
        if category is not None:
            check_choice("category", category, CATEGORIES)
        filters = ItemQuery(
            category=category, context=context, entity=clean_entity(entity),
            sensitive=sensitive, time_from=self._when(time_from), time_to=self._when(time_to),
            include_superseded=include_superseded,
        )
        searcher = self._searcher(time_mode, min_score)
        limit = searcher.options.limit if top_k is None else check_limit(top_k)
        if as_of is not None:
            return self._search_as_of(query, filters, limit, as_of, searcher)
        hits = searcher.search_items(self.user_id, query, filters, limit,
                                     now=self._memory.clock())
        if touch:
            self._recalled(hits)
        return hits

    recall = search

    def _search_as_of(self, query: str, filters: ItemQuery, limit: int,
                      as_of: str | datetime, searcher: Searcher) -> list[Hit]:
        moment, items = self._known_at(as_of)
        window = searcher.time_window(query, datetime.fromisoformat(moment))
        if window is not None and searcher.options.time_filter:
            filters = items_in(filters, window)
        pool = [item for item in items.values() if matches(item, filters)
                and (filters.include_superseded or valid_at(item, moment))]
        options = searcher.options
        if options.reranker is None:
            return rank_as_of(pool, query, window, options, limit)
        hits = rank_as_of(pool, query, window, options, max(limit, options.rerank_depth))
        return rerank(options.reranker, query, hits, options.rerank_depth)[:limit]

    def search_all(
        self,
        query: str,
        *,
        top_k: int | None = None,
        category: str | None = None,
        context: str | None = None,
        entity: str | None = None,
        session_id: str | None = None,
        time_from: str | datetime | None = None,
        time_to: str | datetime | None = None,
        time_mode: TimeMode | None = None,
        touch: bool = True,
        min_score: float | None = None,
    ) -> list[Hit]:
        """Search knowledge and past conversations at once: one list, best first.

        Each hit holds an ``item`` or a ``turn``; ``why`` has ``knowledge_rank`` or
        ``conversation_rank``, its rank in its own pipeline. The two pipelines run as
        ``search`` and ``search_conversations`` do, and their hits are merged by score
        (both on one scale, see ``search``; knowledge first on ties). A reranker, if
        configured, then reorders the merged list, where it sees both kinds together.
        ``category``, ``context`` and ``entity`` filter knowledge, ``session_id``
        conversations; ``time_from`` / ``time_to`` both (an item's ``created_at``, a
        turn's ``ts``); ``min_score`` both. Items returned are touched as by ``search``.
        The query is embedded once and knowledge keyword results are shared between the
        two pipelines.
        """
        check_query(query, self._memory.limits)
        check_filters(context=context, session_id=session_id)
        if category is not None:
            check_choice("category", category, CATEGORIES)
        searcher = self._searcher(time_mode, min_score)
        options = searcher.options
        limit = options.limit if top_k is None else check_limit(top_k)
        depth = limit if options.reranker is None else max(limit, options.rerank_depth)
        plain = (searcher if options.reranker is None
                 else searcher.with_options(reranker=None)).sharing()
        now = self._memory.clock()
        since, until = self._when(time_from), self._when(time_to)
        items = plain.search_items(self.user_id, query, ItemQuery(
            category=category, context=context, entity=clean_entity(entity),
            time_from=since, time_to=until), depth, now=now)
        turns = plain.search_turns(self.user_id, query, TurnQuery(
            session_id=session_id, time_from=since, time_to=until), depth, now=now)
        hits = merge_hits(items, turns)
        if options.reranker is not None:
            hits = [hit for hit in rerank(options.reranker, query, hits, options.rerank_depth)
                    if hit.score >= options.min_score]
        hits = hits[:limit]
        if touch:
            self._recalled([hit for hit in hits if hit.item is not None])
        return hits

    def _recalled(self, hits: Sequence[Hit]) -> None:
        """Note the items a search returned for recall bookkeeping (applied later, off
        the caller's path: ``domain.recall``). Only hits that matched the query's words
        or meaning count; one listed only for a time window or by a reranker does not."""
        self._memory.recalls.note(self.scope, [
            hit.id for hit in hits if hit.item is not None
            and any(key in hit.why for key in _MATCHED)])

    def by_category(self, category: str, *, limit: int | None = None) -> list[Item]:
        """Active items of one category, most recently updated first."""
        check_choice("category", category, CATEGORIES)
        return self._store.query_items(self.user_id, ItemQuery(category=category),
                                       limit=check_optional_limit(limit))[0]

    def by_entity(self, entity: str, *, limit: int | None = None) -> list[Item]:
        """Active items linked to an entity (``type:name``)."""
        return self._store.query_items(self.user_id, ItemQuery(entity=clean_entity(entity)),
                                       limit=check_optional_limit(limit))[0]

    def upcoming(self, days: float = 7) -> list[Item]:
        """Items due within ``days`` or overdue, not yet reminded (or reminded before
        their due date passed)."""
        days = check_days(days)
        now = self._memory.clock()
        # Held at the calendar's end: a clock days before year 10000 still looks ahead.
        horizon = iso(later(now, timedelta(days=days)))
        now_text = iso(now)
        return [
            item for item in self._store.due_items(self.user_id, horizon)
            if item.reminded_at is None
            or (item.due_at is not None and item.reminded_at < item.due_at <= now_text)
        ]

    def history(self, item_id: str) -> list[Event]:
        """Every ledger entry about an item and the versions it replaced or was
        replaced by (its lineage), oldest first, including after forgetting. Each
        entry's payload says what changed, ``source`` (who or what: user, llm_extract,
        reconcile…), ``turn_ids`` (the turns it came from) and ``reason`` (why)."""
        check_id(item_id, "item id")
        by_item = lineage(self._store, self.user_id, item_id)
        if not by_item.get(item_id):
            raise NotFound(f"no memory {item_id!r}")
        if len(by_item) == 1:
            return by_item[item_id]
        return sorted((e for events in by_item.values() for e in events),
                      key=lambda e: (e.ts, e.id))

    def all_knowledge(
        self,
        *,
        category: str | None = None,
        context: str | None = None,
        entity: str | None = None,
        sensitive: bool | None = None,
        source: str | None = None,
        sort: str = "updated_at",
        order: str = "desc",
        offset: int = 0,
        limit: int | None = 50,
        include_superseded: bool = False,
    ) -> dict[str, Any]:
        """A page of items with the total matching: ``{"items", "total", "offset", "limit"}``."""
        check_filters(context=context, sensitive=sensitive, sort=sort, offset=offset)
        if order not in ("asc", "desc"):
            raise InvalidInput("order must be 'asc' or 'desc'")
        if category is not None:
            check_choice("category", category, CATEGORIES)
        if source is not None:
            check_choice("source", source, SOURCES)
        query = ItemQuery(category=category, context=context, entity=clean_entity(entity),
                          sensitive=sensitive, source=source,
                          include_superseded=include_superseded)
        try:
            items, total = self._store.query_items(
                self.user_id, query, sort=sort, descending=order == "desc", offset=offset,
                limit=None if limit is None else check_limit(limit))
        except ValueError as exc:
            raise InvalidInput(str(exc)) from exc
        return {"items": items, "total": total, "offset": offset, "limit": limit}
