"""The ``Store`` protocol: what every backend (SQLite, PostgreSQL) implements.

``Store`` is the sum of small role protocols, so a part of the library can say which
role it needs: ``Ledger`` (the events, the truth), ``ItemReader`` and ``TurnReader``
(the views), ``TextIndex`` and ``EmbeddingIndex`` (search), ``JobQueue`` (work for the
background workers), ``KeyStore`` (the server's API keys, hashed) and ``Admin``
(settings, statistics, lifecycle).

The ledger (``events``) is the truth. ``append`` writes events and, in the same
transaction, applies each one to the views (knowledge, conversations, tool history);
``rebuild`` re-derives every view from the ledger. Reads are always filtered by
``user_id`` inside the store, so no caller can forget to.

Whose rows a method touches is declared on it (``RowScope``): ``@scoped_to_user``
(the user given as its first argument, ``user_id``), ``@scoped_to_events`` (the users
of the events it is given), ``@across_users`` (maintenance) or ``@unscoped`` (no user
rows). PostgreSQL enforces the declaration with row-level security; a method without
one is refused when ``PostgresStore`` is defined, and fails ``test_store_protocol``.

Score contract: ``keyword_search_*`` return ``(id, score)`` pairs best first, where a
larger score is better (BM25 on both: FTS5's on SQLite, the same formula in SQL on
PostgreSQL with corpus statistics per user); scores are only
comparable within one call. Ranking across retrievers happens above the store, on
ranks (reciprocal rank fusion), so both backends rank the same way.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from ..types import Event, Item, ItemQuery, ToolCall, Turn

__all__ = [
    "POSTINGS_CAP",
    "ROLES",
    "Admin",
    "EmbeddingIndex",
    "ItemReader",
    "JobQueue",
    "KeyStore",
    "Ledger",
    "RowScope",
    "Store",
    "StoredKey",
    "TextIndex",
    "TurnQuery",
    "TurnReader",
    "across_users",
    "declaring",
    "holding_two",
    "protocol_methods",
    "rare_and_common",
    "row_scope",
    "scoped_to_events",
    "scoped_to_user",
    "unscoped",
]

Vector = npt.NDArray[np.float32]
MatchMode = Literal["and", "or", "two", "triples"]
Table = Literal["knowledge", "conversations"]
POSTINGS_CAP = 1_000
"""Rows holding one term that ``items_holding_two`` reads; a list with a term in more
rows is left to ``keyword_search_items`` (dedup picks rare words, mostly far under it)."""


@dataclass(frozen=True)
class TurnQuery:
    """Filters for conversation turns. ``None`` means any."""

    session_id: str | None = None
    time_from: str | None = None
    time_to: str | None = None
    role: str | None = None
    ids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StoredKey:
    """An API key as the store keeps it: never the key itself, only its hash.

    ``user_id`` is None only for an admin key; ``agent_id`` binds a user's key to one
    agent. ``secret_hash`` is the hex SHA-256 of the key's secret part.
    """

    key_id: str
    user_id: str | None
    agent_id: str | None
    label: str
    admin: bool
    secret_hash: str
    created_at: str
    revoked_at: str | None = None


# whose rows a method touches ----------------------------------------------------------
class RowScope(enum.Enum):
    """Whose rows a store method reads or writes: on PostgreSQL, the rows row-level
    security lets the call see."""

    USER = "user"
    """One user's: the user given as the method's first argument, ``user_id``."""
    EVENTS = "events"
    """The users of the events given as its first argument (``append``)."""
    ALL_USERS = "all users"
    """Every user's: maintenance, background work and moving data between stores."""
    NONE = "none"
    """No user's rows: store-wide settings and transaction boundaries (the calls made
    inside a transaction bring their own scope)."""


_F = TypeVar("_F", bound=Callable[..., Any])
_SCOPE_ATTRIBUTE = "__row_scope__"


def declaring(scope: RowScope) -> Callable[[_F], _F]:
    """A decorator declaring ``scope`` on a method; a method takes one scope only."""

    def declare(method: _F) -> _F:
        declared = row_scope(method)
        if declared is not None and declared is not scope:
            raise TypeError(f"{method.__qualname__} declares two row scopes: "
                            f"{declared.value} and {scope.value}")
        setattr(method, _SCOPE_ATTRIBUTE, scope)
        return method

    return declare


scoped_to_user = declaring(RowScope.USER)
"""Declares ``RowScope.USER``: the method touches the rows of its first argument's user."""
scoped_to_events = declaring(RowScope.EVENTS)
"""Declares ``RowScope.EVENTS``: the method touches the rows of its events' users."""
across_users = declaring(RowScope.ALL_USERS)
"""Declares ``RowScope.ALL_USERS``: the method works on every user's rows."""
unscoped = declaring(RowScope.NONE)
"""Declares ``RowScope.NONE``: the method touches no user's rows itself."""


def row_scope(method: object) -> RowScope | None:
    """The row scope declared on ``method``, or None when it declares none."""
    scope = getattr(method, _SCOPE_ATTRIBUTE, None)
    return scope if isinstance(scope, RowScope) else None


# roles ---------------------------------------------------------------------------------
@runtime_checkable
class Ledger(Protocol):
    """The events, append-only: the truth every view is derived from."""

    @scoped_to_events
    def append(self, events: Sequence[Event]) -> None:
        """Append events and apply them to the views, atomically."""

    @unscoped
    def transaction(self) -> AbstractContextManager[None]:
        """Group several ``append`` calls into one atomic write (nests)."""

    @unscoped
    def reading(self) -> AbstractContextManager[None]:
        """Group this thread's reads (a search's several calls) into one round of the
        store's own overhead, where it has one: one transaction on PostgreSQL."""

    reads_beside: bool
    """Whether reads in a helper thread run beside the caller's (PostgreSQL: in a
    server process of their own), so that a search runs its vector search in the
    thread that embedded its query while its keyword searches run (``reading_beside``).
    Not SQLite: its reads are this process's CPU, which a search keeps busy already
    (measured: docs/retrieval.md, round seventeen)."""

    @unscoped
    def reading_beside(self) -> AbstractContextManager[bool]:
        """``reading`` for a helper thread: it yields whether the helper got a
        connection of its own at once (never waiting for one, which a caller waiting
        for the helper might hold). False on a store without ``reads_beside``."""

    @unscoped
    def writing_for(self, user_id: str) -> AbstractContextManager[None]:
        """A ``transaction`` in which no other writer changes ``user_id``'s rows, so a
        check read inside it still holds when the write that depends on it lands."""

    @scoped_to_user
    def events(
        self,
        user_id: str,
        *,
        subject_id: str | None = None,
        kinds: Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        """Ledger entries of one user in append order."""

    @across_users
    def ledger(self, after_seq: int, limit: int) -> list[tuple[int, Event]]:
        """(seq, event) of every user's events after ``after_seq``, in ledger order."""

    @across_users
    def user_ids(self) -> list[str]:
        """Every user with at least one event (for maintenance across users)."""

    @scoped_to_user
    def redact(self, user_id: str, subject_id: str) -> None:
        """Blank the text of every event about ``subject_id`` (forgetting)."""

    @scoped_to_user
    def delete_user(self, user_id: str) -> int:
        """Remove every row of one user, the ledger included. Returns events removed."""

    @across_users
    def rebuild(self) -> None:
        """Re-derive every view and index from the ledger (all users)."""

    @unscoped
    def vacuum(self) -> None:
        """Rewrite the store's files so that the bytes of deleted rows leave the disk
        (SQLite ``VACUUM``, which ``delete_user`` runs itself; PostgreSQL
        ``VACUUM FULL`` of every table, which takes each table's exclusive lock while
        it runs and needs the tables' owner)."""

    @unscoped
    def settle(self) -> None:
        """Bring the store's own statistics up to date after a bulk load (an import, a
        migration, a rebuild), as the database's background maintenance would some
        while later: PostgreSQL runs ``VACUUM (ANALYZE)`` on the tables that hold
        users' rows, so the planner knows their sizes and index-only scans of the
        keyword postings read no table page (right after a load of 100,000 items its
        ``remember`` ran at half the speed); SQLite has nothing to do. Inside a
        transaction it does nothing: the rows are not committed yet."""


@runtime_checkable
class ItemReader(Protocol):
    """The knowledge view: items as the ledger's events left them."""

    @scoped_to_user
    def get_item(self, user_id: str, item_id: str) -> Item | None:
        """One item of this user, or None."""

    @scoped_to_user
    def query_items(
        self,
        user_id: str,
        query: ItemQuery,
        *,
        sort: str = "updated_at",
        descending: bool = True,
        offset: int = 0,
        limit: int | None = None,
    ) -> tuple[list[Item], int]:
        """Items matching the filters, and how many match in all."""

    @scoped_to_user
    def due_items(self, user_id: str, until: str) -> list[Item]:
        """Active items with ``due_at`` at or before ``until``."""

    @scoped_to_user
    def stale_items(self, user_id: str, before: str) -> list[tuple[str, float]]:
        """(id, confidence) of active items unused since ``before``."""

    @scoped_to_user
    def facets(self, user_id: str, column: Literal["entity", "context", "category"]) -> list[
        tuple[str, int]
    ]:
        """Distinct values of a knowledge column with item counts (active items)."""

    @scoped_to_user
    def compared_pairs(self, user_id: str) -> set[tuple[str, str]]:
        """Item pairs (smaller id first) reconciliation has already compared."""


@runtime_checkable
class TurnReader(Protocol):
    """The conversation and tool-history views."""

    @scoped_to_user
    def query_turns(
        self, user_id: str, query: TurnQuery, *, descending: bool = False,
        limit: int | None = None,
    ) -> list[Turn]:
        """Turns matching the filters, ordered by time."""

    @scoped_to_user
    def sessions(self, user_id: str) -> list[dict[str, Any]]:
        """One row per session: id, turns, first and last timestamps."""

    @scoped_to_user
    def query_tool_calls(
        self, user_id: str, *, name: str | None = None, success: bool | None = None,
        since: str | None = None, limit: int | None = None,
    ) -> list[ToolCall]:
        """Logged tool calls, newest first."""

    @scoped_to_user
    def tool_stats(self, user_id: str) -> list[dict[str, Any]]:
        """Per tool name: calls, failures, mean duration, last call."""


@runtime_checkable
class TextIndex(Protocol):
    """Full-text search over the views (see the score contract above)."""

    common_postings_costly: bool
    """Whether a search pays for a common word's postings one by one (PostgreSQL reads
    them as rows of ``<table>_terms``), so that dedup asks for one of a text's rarer
    words rather than two of them and the common ones (``dedup.dedup_lookup``). FTS5
    reads a word's compressed doclist whole: there two-of cost less with one common
    word (2.6 ms against 5.7 at 100,000 items, cold, where PostgreSQL took 29 ms
    against 17), and with two or more the rarer words gained 5–10% of ``remember_many``
    but missed more restatements (6 of 2,400 against 2)."""

    @scoped_to_user
    def keyword_search_items(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Full-text search over knowledge content and entity, best first.

        ``and``: the rows holding every term, by BM25 (newest first, score 0, when every
        term is common). ``two``: the rows holding at least two of the terms (one, when
        only one is given), by BM25. ``triples``: the rows holding every term of one of
        the terms' consecutive triples (the first three, the next three, …; a last
        group may be shorter), by BM25 over all the terms. ``or``: the rows holding some
        term: by BM25 over the terms that are not common (``sql_keyword.COMMON_TERM_SHARE``),
        then the newest rows holding a common term (score 0).
        """

    @scoped_to_user
    def term_counts(self, user_id: str, table: Table, terms: Sequence[str]
                    ) -> tuple[int, dict[str, int]]:
        """How many rows hold each of ``terms``, counted as keyword search counts them
        (SQLite: in the whole file; PostgreSQL: this user's rows), each count stopping
        past the cut-off above which a term is common; returns (cut-off, counts). A
        term's count above the cut-off makes it common. Dedup uses them to pick a
        text's rarest words: each word's count is kept a minute (``WordCounts``) and
        raised by the rows this process inserts, so another process's writes show once
        a count expires (a stale count costs the lookup speed, not its answer)."""

    @scoped_to_user
    def items_holding_two(self, user_id: str, term_lists: Sequence[Sequence[str]],
                          limit: int, queries: Sequence[ItemQuery] | None = None
                          ) -> list[list[str] | None]:
        """For each list of terms, the ids of up to ``limit`` of the user's current items
        (of the category, context and entity its ``queries`` entry names) holding two
        of them (every one, when fewer than three are given), as
        ``keyword_search_items`` in ``two`` mode matches words: most terms first; past
        ``limit``, those whose terms are in the fewest rows (as BM25 weighs rarer
        words more) ahead; then newest.

        A term in more than ``POSTINGS_CAP`` rows is not read. Where the store can tell
        the rows holding one of a list's other terms and one such term apart without
        reading its postings (SQLite's FTS5 steps through its doclist), a list of
        three or more with two others is answered from them, leaving out only the
        rows holding two such terms and none of the rest. Any other list with such a
        term gets None (ask ``keyword_search_items`` for its best).

        Every list is answered from the same postings, read once: dedup's lookups for a
        whole ``remember_many`` batch in a few statements instead of one per text."""

    @scoped_to_user
    def keyword_search_turns(
        self, user_id: str, terms: Sequence[str], mode: MatchMode, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Full-text search over turns (content, speaker, neighbours, day in words);
        modes as ``keyword_search_items``."""


@runtime_checkable
class EmbeddingIndex(Protocol):
    """Vectors kept with the rows, searched by cosine, and swapped for a new model's.
    Derived data: writing them appends no ledger event."""

    @scoped_to_user
    def vector_search_items(
        self, user_id: str, vector: Vector, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Items by cosine similarity to ``vector`` (filters applied first), best first."""

    @scoped_to_user
    def vector_search_turns(
        self, user_id: str, vector: Vector, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Turns by cosine similarity to ``vector`` (filters applied first), best first."""

    @scoped_to_user
    def item_vectors(self, user_id: str) -> list[tuple[str, Vector]]:
        """(id, vector) of this user's active items that have an embedding."""

    @across_users
    def set_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> int:
        """Store vectors for (id, text it was made from, vector) rows; a row whose text
        changed meanwhile is skipped. Returns rows set."""

    @across_users
    def stored_embeddings(self, table: Table, after_id: str, limit: int
                          ) -> list[tuple[str, str, Vector, str]]:
        """(id, text it was made from, vector, model) of rows, any user, that have a
        vector, ordered by id, starting after ``after_id``."""

    @across_users
    def unstaged(self, table: Table, model: str, limit: int) -> list[tuple[str, str]]:
        """(id, text) of rows with no staged vector of ``model`` for their current text."""

    @across_users
    def stage_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> None:
        """Keep vectors of a new model aside until ``promote_staged``."""

    @across_users
    def promote_staged(self, model: str, dimensions: int) -> bool:
        """Atomically make the staged vectors of ``model`` the live ones and record the
        model; False (nothing changed) while some row still lacks a staged vector."""

    @across_users
    def clear_embeddings(self) -> None:
        """Drop every stored vector (when the embedding model changes)."""


@runtime_checkable
class JobQueue(Protocol):
    """Work waiting for the background workers: rows to embed, turns to extract from.
    Claims are scheduling state, not memory: no ledger event."""

    @across_users
    def pending_embeddings(self, table: Table, limit: int) -> list[tuple[str, str]]:
        """(id, text) of rows, any user, that have no embedding yet."""

    @across_users
    def claim_pending_embeddings(self, table: Table, limit: int
                                 ) -> AbstractContextManager[list[tuple[str, str]]]:
        """Like ``pending_embeddings``, but other workers skip the rows while the block
        runs (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite has one writer anyway)."""

    @across_users
    def pending_extractions(
        self, limit: int, *, claimable_at: str | None = None, holder: str | None = None
    ) -> list[tuple[str, list[str]]]:
        """Turns waiting for extraction, any user: ``(user_id, turn ids)`` per batch (the
        turns of one ``add_turns`` call), oldest batch first. With ``claimable_at`` only
        batches no other worker holds at that time (unclaimed, expired, or ``holder``'s)."""

    @scoped_to_user
    def claim_extraction(self, user_id: str, ids: Sequence[str], holder: str, until: str,
                         now: str) -> bool:
        """Claim pending turns for ``holder`` until ``until`` (all or none); False when
        another worker holds one of them past ``now`` or one is no longer pending."""

    @scoped_to_user
    def confirm_extraction(self, user_id: str, ids: Sequence[str], holder: str) -> bool:
        """Inside the transaction that applies an extraction: lock the turns and say
        whether every one is still pending and claimed by ``holder``."""

    @scoped_to_user
    def extraction_ids(self, user_id: str, state: str) -> list[str]:
        """Ids of this user's turns in one extraction state (``failed``, …), oldest first."""

    @scoped_to_user
    def backlog(self, user_id: str) -> dict[str, int]:
        """Turns by extraction state (``extraction_pending`` / ``_done`` / ``_skipped`` /
        ``_failed``) and rows still waiting for a vector (``embedding_pending``)."""


@runtime_checkable
class KeyStore(Protocol):
    """The REST server's API keys, stored hashed, so that every server process on one
    database accepts the same keys. Keys are looked up before any user is known, so
    these methods touch no user's rows (``unscoped``): the table is not a view of the
    ledger, and neither ``rebuild`` nor ``delete_user`` touches it."""

    @unscoped
    def add_api_key(self, key: StoredKey) -> None:
        """Store a new key (its id must be new)."""

    @unscoped
    def api_key(self, key_id: str) -> StoredKey | None:
        """The key with this id, revoked or not, or None."""

    @unscoped
    def api_keys(self, user_id: str | None = None, *, admin: bool | None = None
                 ) -> list[StoredKey]:
        """Keys by creation time (then id), revoked ones included: of one user when ``user_id``
        is given, and only admin (or only user) keys when ``admin`` is True (False)."""

    @unscoped
    def revoke_api_key(self, key_id: str, at: str) -> bool:
        """Mark a key revoked at ``at``; False when no such key is live."""


@runtime_checkable
class Admin(Protocol):
    """Where the store lives, its settings, statistics, and its lifecycle."""

    url: str

    @unscoped
    def get_meta(self, key: str) -> str | None:
        """A store-wide setting (embedding model id, dimension)."""

    @unscoped
    def set_meta(self, key: str, value: str) -> None:
        """Record a store-wide setting."""

    @unscoped
    def claim_meta(self, values: Mapping[str, str]) -> dict[str, str | None]:
        """Record ``values`` when none of their keys is recorded yet, all in one
        transaction that no other claim interleaves with; returns what is recorded for
        those keys afterwards (ours, or what another process recorded first)."""

    @scoped_to_user
    def counts(self, user_id: str) -> dict[str, Any]:
        """Row counts for ``stats``."""

    @scoped_to_user
    def activity(self, user_id: str, since: str) -> list[tuple[str, str, int]]:
        """(day, event kind, count) since a time."""

    @scoped_to_user
    def llm_usage(self, user_id: str) -> list[dict[str, Any]]:
        """Per purpose and model: calls, tokens_in, tokens_out, errors, latency_ms (sum)."""

    @scoped_to_user
    def prunable(self, user_id: str, before: str, min_confidence: float) -> dict[str, list[str]]:
        """Ids of turns, tool calls and low-confidence items older than ``before``."""

    @across_users
    def user_counts(self) -> dict[str, dict[str, int]]:
        """Per user: ``events``, ``items`` (superseded and invalidated included),
        ``turns``, ``tool_calls`` and ``vectors`` (rows with an embedding)."""

    @unscoped
    def close(self) -> None:
        """Release connections."""


@runtime_checkable
class Store(Ledger, ItemReader, TurnReader, TextIndex, EmbeddingIndex, JobQueue, KeyStore,
            Admin, Protocol):
    """A storage backend: every role. Code that needs only some roles may ask for those."""


ROLES: tuple[type[Any], ...] = (Ledger, ItemReader, TurnReader, TextIndex, EmbeddingIndex,
                                JobQueue, KeyStore, Admin)
"""The role protocols ``Store`` is made of; each method belongs to exactly one."""


def protocol_methods() -> dict[str, Callable[..., Any]]:
    """Every method of ``Store`` by name, as its role declares it (with its row scope)."""
    return {name: member for role in ROLES for name, member in vars(role).items()
            if not name.startswith("_") and callable(member)}


_V = TypeVar("_V")


def rare_and_common(terms: int, rare: int) -> bool:
    """Whether a dedup lookup's ``terms`` words, ``rare`` of them rare (the others
    common), are asked for as one of the rare ones or a rare one with a common one,
    not two of them all: more than two words, at least two rare and at least one
    common. A restatement lacks at most ``n // 5`` of a text's ``n`` words, so it holds
    two of any ``n // 5 + 2`` of them and one of any ``n // 5 + 1``: with one common
    word among the chosen, one of the rare ones finds it as surely; with more, asking
    for two rare ones at least keeps it ranked above the rows holding one."""
    return terms > 2 and 2 <= rare < terms


def holding_two(holders: Sequence[Iterable[_V]]) -> Counter[_V]:
    """Keyword mode ``two`` over rows already found: of the rows holding each term (one
    collection per distinct term, a row once in each), those holding two of the terms
    (every one, when fewer than three), with how many they hold.

    One pass over the terms' rows: each term's rows are looked up among those of the
    terms before it, so a row is counted only when it is found again, and no term's
    rows need be a set first (a batch's texts hold ~400 postings each and two of them
    ~20 rows)."""
    if len(holders) < 2:
        return Counter(dict.fromkeys(holders[0], 1) if holders else {})
    seen: set[_V] = set()
    again: list[set[_V]] = []
    for rows in holders:
        again.append(seen.intersection(rows))
        seen.update(rows)
    return Counter({row: found + 1 for row, found in
                    Counter(chain.from_iterable(again)).items()})


def iter_chunks(values: Sequence[_V], size: int = 500) -> Iterator[Sequence[_V]]:
    """Slices of at most ``size`` values (keeps ``IN (...)`` lists under bind limits)."""
    for start in range(0, len(values), size):
        yield values[start : start + size]
