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

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, NamedTuple

from ..clock import Clock, iso, new_id
from ..errors import InvalidInput, NotFound
from ..store.base import (
    POSTINGS_CAP,
    MatchMode,
    Store,
    TurnQuery,
    iter_chunks,
    rare_and_common,
)
from ..types import CATEGORIES, SOURCES, START_CONFIDENCE, Event, Item, ItemQuery, Scope
from ..validation import (
    check_bool,
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
from .dedup import (
    Said,
    dedup_lookup,
    dedup_terms,
    dedup_triples,
    overlaps,
    prefix_size,
    rarest_marker,
    said,
    search_terms,
    twin_of,
)
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
from .projection import Update, apply_change, project

__all__ = ["Batch", "Draft", "ItemWriter"]

When = Callable[[str | datetime | None], str | None]
"""Reads a time the caller gave (ISO, natural language, a datetime) as ISO UTC."""

POSTINGS_TEXTS = 1_000
"""Texts answered from one read of their words' postings; a larger batch is read in
parts, so that the postings held at once stay bounded (1,000 texts of the write
benchmark held ~130,000 at 20,000 items)."""
DEDUP_CANDIDATES = 10
"""Keyword candidates one dedup lookup considers. A restatement shares more than 80% of
its words with the text, so BM25 ranks it at or near the top; a longer list mostly
adds rows that hold only common words (listed newest first), a scan that grows with
the list: at 100,000 items on PostgreSQL it took ~665 ms per lookup for 50, under 1 ms
for 10."""


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

    def own_turns(self, user_id: str, turn_ids: Sequence[str] | None) -> None:
        """Refuse turn ids that name no turn of ``user_id`` (``NotFound``): an item's
        provenance names its own user's turns."""
        if not turn_ids:
            return
        found = {turn.id for ids in iter_chunks(list(turn_ids)) for turn in
                 self.store.query_turns(user_id, TurnQuery(ids=tuple(ids)))}
        missing = [turn_id for turn_id in turn_ids if turn_id not in found]
        if missing:
            raise NotFound(f"no turn {missing[0]!r}")

    def twin(self, user_id: str, text: str, category: str, context: str, entity: str | None
             ) -> Item | None:
        """The active item ``text`` restates (``dedup.twin_of``), among the candidates
        ``_candidates`` finds for it."""
        cutoff, counts = self._word_counts(user_id, [text])
        found = self._candidates(user_id, [Wanted(text, category, context, entity,
                                                  dedup_terms(text, counts))], counts,
                                 cutoff)[0]
        return twin_of(text, category, context, entity, found)

    def _word_counts(self, user_id: str, texts: Iterable[str]) -> tuple[int, dict[str, int]]:
        """How many stored rows hold each word of ``texts``, and the count above which a
        word is common (``Store.term_counts``)."""
        words = {w for text in texts for w in search_terms(text)}
        return self.store.term_counts(user_id, "knowledge", sorted(words))

    def _candidates(self, user_id: str, wanted: Sequence[Wanted], counts: Mapping[str, int],
                    cutoff: int) -> list[list[Item]]:
        """For each text, the stored items it may restate: those with its exact text
        first, then the keyword candidates (``DEDUP_CANDIDATES``) of its category,
        context and entity that hold two of its rarest words (``dedup_terms``): a
        restatement holds more than 80% of its words, so it holds at least two of them.
        Rare words keep the postings read few, and two of them the rows scored (at
        20,000 items the BM25 top 10 of the rows holding any of the longest words took
        1.3 ms a lookup; this, 0.3–0.6).

        A text whose rarest number, date word or name (``rarest_marker``) is in at most
        ``DEDUP_CANDIDATES`` rows has for candidates the current items holding that
        word, read from its postings: ``restates`` asks a restatement to hold it, so
        they are every candidate there is. Of the others, those whose chosen words are
        each in at most ``POSTINGS_CAP`` rows (a single ``remember``'s too) are
        answered together from those words' postings (``Store.items_holding_two``):
        when no more than ``DEDUP_CANDIDATES`` current items of its kind hold two, they
        are the ranked lookup's rows exactly; when more do, those holding the most of
        the words, rarer words first. On a store that pairs a rare word with a common
        one without reading the common one's postings (SQLite), a text with two chosen
        words under the cap is answered there too, leaving out only the items that hold
        two common words and none of the others (restatements that drop a word merged
        as often: docs/retrieval.md, "Round fourteen"). Only the rest get a ranked
        lookup of their own (``_lookup``).

        Statements: one per text looked up alone (its keyword candidates); for the
        texts answered from postings, one per ``TERMS_PER_STATEMENT`` words read on
        SQLite (one in all on PostgreSQL) and one per 500 items holding them, once for
        the marked texts' words and once for the others' chosen words. Then one per
        500 texts for the items holding them exactly (by the content index) and one per
        500 candidates.
        ``counts``, ``cutoff``: ``_word_counts`` of the texts."""
        # A text with a number, date or name that few rows hold: its restatement holds
        # that word too (``restates``), so the rows holding it are every candidate there
        # is, read from its postings. Templated notes ("Work note 17 on the quarterly
        # budget") share every other word with thousands of rows.
        marked = {index: [rare[1]] for index, want in enumerate(wanted)
                  if (rare := rarest_marker(want.text, counts)) is not None
                  and rare[0] <= DEDUP_CANDIDATES}
        held = self._holding(user_id, wanted, marked)
        # Of the others, those the postings may answer: those whose chosen words are all
        # under the cap and, where the store pairs a rarer word with a common one
        # cheaply (``Store.items_holding_two``), those with two of three or more under it.
        pairs = not self.store.common_postings_costly
        held.update(self._holding(user_id, wanted, {
            index: want.terms for index, want in enumerate(wanted) if index not in held
            and ((under := sum(counts.get(term, 0) <= POSTINGS_CAP for term in want.terms))
                 == len(want.terms) or (pairs and rare_and_common(len(want.terms), under)))}))
        keyed = [found if (found := held.get(index)) is not None else [
            item_id for item_id, _ in self.store.keyword_search_items(
                user_id, *self._lookup(want, counts, cutoff), want.kind(), DEDUP_CANDIDATES)]
            for index, want in enumerate(wanted)]
        # The same texts (no LIMIT or ORDER BY the planner could prefer to walk instead);
        # twin_of checks category, context and entity.
        holding: dict[str, list[Item]] = {}
        for texts in iter_chunks(list(dict.fromkeys(want.text for want in wanted))):
            for item in self.store.query_items(user_id, ItemQuery(contents=tuple(texts)))[0]:
                holding.setdefault(item.content, []).append(item)
        exact = [holding.get(want.text, []) for want in wanted]
        known = {item.id: item for items in exact for item in items}
        missing = list(dict.fromkeys(i for ids in keyed for i in ids if i not in known))
        for ids in iter_chunks(missing):
            known.update((item.id, item) for item in self.store.query_items(
                user_id, ItemQuery(ids=tuple(ids)))[0])
        return [[known[i] for i in dict.fromkeys([item.id for item in same] + ids) if i in known]
                for same, ids in zip(exact, keyed, strict=True)]

    def _lookup(self, want: Wanted, counts: Mapping[str, int], cutoff: int
                ) -> tuple[list[str], MatchMode]:
        """The terms and mode of a text's ranked lookup. Where the store reads common
        words' postings one by one (``Store.common_postings_costly``): two of its chosen
        words, or one of the rarer ones (``dedup_lookup``). Elsewhere, for a text of
        six words or more, all of one triple of its rarest words (``dedup_triples``),
        else two of its chosen words.

        Triples read twice as many words' postings as two-of, which FTS5 reads whole
        and cheaply, and score far fewer rows; on PostgreSQL, which reads each posting
        as a row, they cost more than two-of's scoring (at 100,000 items 17.7 ms for six
        words and 28.1 for nine, against 14.9 and 26.6 for two of three and four)."""
        if self.store.common_postings_costly:
            terms, mode = dedup_lookup(want.terms, counts, cutoff)
            return list(terms), mode
        if (triples := dedup_triples(want.text, counts)) is not None:
            return list(triples), "triples"
        return list(want.terms), "two"

    def _holding(self, user_id: str, wanted: Sequence[Wanted],
                 lists: Mapping[int, Sequence[str]]) -> dict[int, list[str]]:
        """``Store.items_holding_two`` of the term lists of some texts (by their index in
        ``wanted``), ``POSTINGS_TEXTS`` texts a call; the texts it leaves to a ranked
        lookup are left out."""
        return {index: found for part in iter_chunks(list(lists), POSTINGS_TEXTS)
                for index, found in zip(part, self.store.items_holding_two(
                    user_id, [lists[index] for index in part], DEDUP_CANDIDATES,
                    [wanted[index].kind() for index in part]), strict=True)
                if found is not None}

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
        draft = self._draft(
            scope, content, category, domain=domain, source=source, confidence=confidence,
            context=context, entity=entity, sensitive=sensitive, due_at=due_at,
            metadata=metadata, valid_from=valid_from, reason=reason)
        merge = self.dedup if dedup is None else check_bool(dedup, "dedup")
        with self.store.writing_for(scope.user_id):
            now = self.now()
            twin = self.twin(scope.user_id, draft.text, draft.category, draft.context,
                             draft.entity) if merge else None
            events, item = _plan(scope, draft, twin, now)
            self.store.append(events)
            if twin is not None:
                if draft.text != twin.content:
                    self.written()
                return replace(self.require(scope.user_id, twin.id), written="merged")
        self.written()
        return replace(item, written="added")

    def remember_many(self, scope: Scope, entries: Iterable[str | Mapping[str, Any]], *,
                      dedup: bool | None = None) -> list[Item]:
        """Add many items in one transaction, each as ``remember`` would (see ``Batch``).

        Every entry is checked before anything is written: a bad one raises
        ``InvalidInput`` naming its index, and nothing is stored. Returns the items in
        input order, as stored when the call returns.
        """
        drafts = [self._entry(scope, index, entry)
                  for index, entry in enumerate(_check_entries(entries))]
        merge = self.dedup if dedup is None else check_bool(dedup, "dedup")
        if not drafts:
            return []
        with self.store.writing_for(scope.user_id):
            batch = Batch(scope, self.now(), [d.text for d in drafts])
            if merge:
                # The store's candidates of every entry at once: the batch's own items
                # are not in the store yet, so no lookup depends on the entries before.
                cutoff, counts = self._word_counts(scope.user_id, [d.text for d in drafts])
                wanted = [Wanted(d.text, d.category, d.context, d.entity,
                                 dedup_terms(d.text, counts)) for d in drafts]
                for draft, found in zip(drafts, self._candidates(
                        scope.user_id, wanted, counts, cutoff), strict=True):
                    batch.add(draft, batch.twin(draft, found))
            else:
                for draft in drafts:
                    batch.add(draft, None)
            self.store.append(batch.events)
            stored = {item.id: item for ids in iter_chunks(list(dict.fromkeys(batch.ids)))
                      for item in self.store.query_items(
                          scope.user_id, ItemQuery(ids=tuple(ids), include_superseded=True))[0]}
        if batch.rewrote:
            self.written()
        return [replace(stored[item_id], written=written)
                for item_id, written in zip(batch.ids, batch.written, strict=True)]

    def _entry(self, scope: Scope, index: int, entry: Mapping[str, Any]) -> Draft:
        """One entry of ``remember_many`` checked as ``remember`` checks its arguments."""
        try:
            unknown = sorted(set(entry) - _ENTRY_FIELDS)
            if unknown:
                raise InvalidInput(f"unknown field {unknown[0]!r} (known: "
                                   f"{', '.join(sorted(_ENTRY_FIELDS))})")
            if "content" not in entry:
                raise InvalidInput("content is required")
            return self._draft(scope, **entry)
        except InvalidInput as exc:
            raise InvalidInput(f"item {index}: {exc}") from exc

    def _draft(
        self, scope: Scope, content: Any, category: Any = "fact", *,
        domain: Any = None, source: Any = "user", confidence: Any = None,
        context: Any = None, entity: Any = None, sensitive: Any = False,
        due_at: Any = None, metadata: Any = None, valid_from: Any = None, reason: Any = None,
    ) -> Draft:
        """``remember``'s arguments checked and normalised (raises ``InvalidInput``)."""
        text, meta = clean_content(content, metadata)
        domain = check_optional_name(domain, "domain")
        reason = check_optional_text(reason, "reason")
        check_choice("category", category, CATEGORIES)
        check_choice("source", source, SOURCES)
        conf = START_CONFIDENCE[source] if confidence is None else check_confidence(confidence)
        return Draft(text=text, metadata=meta, category=category, domain=domain, source=source,
                     confidence=conf,
                     context=clean_context(scope.context if context is None else context),
                     entity=clean_entity(entity), sensitive=check_bool(sensitive, "sensitive"),
                     due=self.when(due_at), began=self.when(valid_from), reason=reason)

    def change(self, scope: Scope, item_id: str, build: Callable[[Item], dict[str, Any]], *,
               reason: str, source: str | None = None) -> Item:
        """Set the fields ``build(current item)`` returns (nothing to set: unchanged)."""
        with self.store.writing_for(scope.user_id):
            item = self.require(scope.user_id, item_id)
            if not item.active:   # an old version stays as it was; ``restore`` brings it back
                raise InvalidInput(f"memory {item.id!r} is not active; restore it first")
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
        context: str | None = None, entity: str | None = None, domain: str | None = None,
        confidence: float | None = None, sensitive: bool | None = None,
        due_at: str | datetime | None = None, source: str = "user", reason: str = "revised",
        turn_ids: Sequence[str] | None = None, at: str | datetime | None = None,
        clear: Collection[str] = (),
    ) -> Item:
        """Replace an active item by a new version that supersedes it. A field given as
        None is the old version's; ``clear`` names those to leave empty (``CLEARABLE``)."""
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
            domain=check_optional_name(domain, "domain"),
            confidence=None if confidence is None else check_confidence(confidence),
            sensitive=None if sensitive is None else check_bool(sensitive, "sensitive"),
            due=self.when(due_at), at=self.when(at), turn_ids=turn_ids,
            clear=frozenset(clear))
        with self.store.writing_for(scope.user_id):
            old = self.require(scope.user_id, item_id)
            self.own_turns(scope.user_id, turn_ids)
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
            self.own_turns(scope.user_id, turn_ids)
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


_ENTRY_FIELDS = frozenset({"content", "category", "domain", "source", "confidence", "context",
                           "entity", "sensitive", "due_at", "metadata", "valid_from", "reason"})
"""What an entry of ``remember_many`` may hold: ``remember``'s arguments but ``dedup``."""


class Wanted(NamedTuple):
    """What a dedup lookup looks for: a text, the scope of an item it may restate, and
    the words a restatement holds two of (``dedup_terms``)."""

    text: str
    category: str
    context: str
    entity: str | None
    terms: Sequence[str]

    def kind(self) -> ItemQuery:
        """The items it may restate: of its category, context and entity."""
        return ItemQuery(category=self.category, context=self.context, entity=self.entity)


@dataclass(frozen=True)
class Draft:
    """A checked ``remember`` request (times already read as ISO)."""

    text: str
    metadata: dict[str, Any]
    category: str
    domain: str | None
    source: str
    confidence: float
    context: str
    entity: str | None
    sensitive: bool
    due: str | None
    began: str | None
    reason: str | None


def _plan(scope: Scope, draft: Draft, twin: Item | None, now: str
          ) -> tuple[list[Event], Item]:
    """The events of one ``remember``: a merge into ``twin``, or a new item."""
    if twin is not None:
        return plan_merge(scope, twin, text=draft.text, confidence=draft.confidence,
                          sensitive=draft.sensitive, due=draft.due, metadata=draft.metadata,
                          source=draft.source, reason=draft.reason, now=now), twin
    item = Item(
        id=new_id(), user_id=scope.user_id, agent_id=scope.agent_id,
        category=draft.category, content=draft.text, domain=draft.domain,
        source=draft.source, confidence=draft.confidence, context=draft.context,
        entity=draft.entity, sensitive=draft.sensitive, due_at=draft.due, created_at=now,
        updated_at=now, valid_from=draft.began or now, metadata=draft.metadata,
    )
    return plan_add(scope, item, reason=draft.reason, now=now), item


class Batch:
    """The plan of one ``remember_many``: the items it adds or merges, as they will
    stand, so each entry is checked against the store *and* the entries before it,
    as a run of ``remember`` calls would check it.

    Items the batch touched are indexed so that finding the earlier entries an entry
    may restate reads only those that can: the ones holding its rarest number, date
    word or name, or those sharing a word with its first few (prefix filtering),
    whichever are fewer.
    Every earlier entry it restates is found, a shorter one too; the store's lookup
    of one call at a time (``ItemWriter._candidates``) can miss a shorter stored text
    holding none of the text's rarest words ("likes oat milk" for "likes oat milk in
    strong black coffee").

    Args:
        scope: whose items.
        now: the batch's time.
        texts: every entry's text: the batch's words are ordered by how many entries
            hold them, rarest first, once for the batch.
    """

    def __init__(self, scope: Scope, now: str, texts: Sequence[str] = ()) -> None:
        self.scope, self.now = scope, now
        held = Counter(word for text in texts for word in said(text).words)
        self._rank: dict[str, tuple[int, str]] = {word: (n, word) for word, n in held.items()}
        self.events: list[Event] = []
        self.ids: list[str] = []
        self.written: list[Literal["added", "merged"]] = []
        self.rewrote = False
        """Whether some text was added or changed (embedding has work)."""
        self._items: dict[str, Item] = {}
        self._by_word: dict[str, list[str]] = {}
        self._by_prefix: dict[str, list[str]] = {}
        self._by_token: dict[str, list[str]] = {}
        self._by_text: dict[str, list[str]] = {}
        self._said: dict[str, Said] = {}
        self._prefixes: dict[str, list[str]] = {}

    def twin(self, draft: Draft, stored: Sequence[Item]) -> Item | None:
        """The item ``draft`` restates among ``stored`` (as this batch left them) and
        the items this batch added or changed."""
        same = self._by_text.get(draft.text, [])
        mine = said(draft.text)
        # Of two texts that overlap, the smaller holds a word of the other among its
        # first ``prefix_size`` words in the batch's order: the earlier items whose
        # first words hold one of this text's, and those holding one of its first
        # words, are every item that overlaps it.
        lists = [self._by_prefix.get(word, ()) for word in mine.words]
        lists += [self._by_word.get(word, ()) for word in self._prefix(draft.text, mine.words)]
        # A restatement also holds each of the text's numbers, dates and names
        # (``restates``): the items holding the rarest of them are every candidate too.
        # Whichever list is shorter is read: templated notes ("work note 17 on …")
        # share every other word; a sentence's capitalised first word may be common.
        rarest = min(((self._holders(marker), marker) for marker in mine.markers
                      if marker != "¬"), default=None)
        if rarest is not None and rarest[0] < sum(map(len, lists)):
            lists = [self._by_word.get(rarest[1], ()), self._by_token.get(rarest[1], ())]
        near = dict.fromkeys(same)
        for ids in lists:
            near.update(dict.fromkeys(ids))
        # The overlap test first: only a few of the items sharing a word pass it.
        ours = [self._items[item_id] for item_id in near
                if item_id in same or overlaps(mine.words, self._said[item_id].words)]
        return twin_of(draft.text, draft.category, draft.context, draft.entity,
                       [self._items.get(item.id, item) for item in stored] + ours)

    def _holders(self, token: str) -> int:
        """How many items hold ``token`` (lower-cased), as ``restates`` looks for it."""
        return len(self._by_word.get(token, ())) + len(self._by_token.get(token, ()))

    def _prefix(self, text: str, words: frozenset[str]) -> list[str]:
        """``words`` (``text``'s) first ``prefix_size`` in the batch's order (fewest
        entries first), sorted once per text."""
        prefix = self._prefixes.get(text)
        if prefix is None:
            rank = self._rank
            prefix = self._prefixes[text] = sorted(
                words, key=lambda word: rank.get(word, (0, word)))[:prefix_size(len(words))]
        return prefix

    def add(self, draft: Draft, twin: Item | None) -> None:
        """Plan ``draft`` (merged into ``twin``, or new) and note the item it leaves."""
        events, item = _plan(self.scope, draft, twin, self.now)
        self.events += events
        if twin is not None:    # a new item's one event inserts it as planned
            changed = {item.id: item}
            for event in events:
                for change in project(event):
                    if isinstance(change, Update) and change.table == "knowledge":
                        apply_change(changed, change)
            item = changed[item.id]
        self._items[item.id] = item
        known = self._said[item.id] = said(item.content)
        for word in known.words:
            self._by_word.setdefault(word, []).append(item.id)
        for word in self._prefix(item.content, known.words):
            self._by_prefix.setdefault(word, []).append(item.id)
        for token in known.tokens - known.words:    # "prod-db-1", "o'brien"
            self._by_token.setdefault(token, []).append(item.id)
        self._by_text.setdefault(item.content, []).append(item.id)
        self.ids.append(item.id)
        self.written.append("added" if twin is None else "merged")
        self.rewrote = self.rewrote or twin is None or draft.text != twin.content



def _check_entries(entries: Any) -> list[Mapping[str, Any]]:
    """``remember_many``'s argument as a list of mappings (a bare text is its content)."""
    if isinstance(entries, str | bytes | Mapping) or not isinstance(entries, Iterable):
        raise InvalidInput("entries must be a list of texts or of dicts with 'content'")
    checked: list[Mapping[str, Any]] = []
    for index, entry in enumerate(entries):
        if isinstance(entry, str):
            entry = {"content": entry}
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"item {index}: expected a text or a dict with 'content', "
                               f"not {type(entry).__name__}")
        checked.append(entry)
    return checked

