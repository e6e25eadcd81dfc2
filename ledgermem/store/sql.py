"""What the SQL backends share: the ledger projection and portable queries.

SQL here is written once, with ``?`` placeholders, in the subset SQLite and
PostgreSQL both accept; a backend rewrites placeholders in ``_sql`` and supplies
connections, full-text search, vector storage and migrations.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, fields
from datetime import datetime
from operator import itemgetter
from typing import Any, ClassVar, Literal

import numpy as np

from ..domain.projection import Add, Delete, Insert, Scale, project
from ..errors import SchemaMismatch
from ..types import Event, Item, ItemQuery, ToolCall, Turn
from .base import (
    POSTINGS_CAP,
    MatchMode,
    StoredKey,
    Table,
    TurnQuery,
    Vector,
    holding_two,
    iter_chunks,
    rare_and_common,
)
from .word_counts import WordCounts

Run = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
"""Executes one statement inside a write transaction and returns its rows."""

ITEM_COLUMNS = (
    "id", "user_id", "agent_id", "category", "content", "domain", "source", "confidence",
    "context", "entity", "sensitive", "due_at", "reminded_at", "superseded_by", "valid_from",
    "valid_to", "created_at", "updated_at", "last_used_at", "use_count", "metadata",
)
TURN_COLUMNS = (
    "id", "user_id", "agent_id", "session_id", "role", "name", "content", "ts",
    "consolidated_at", "metadata",
)
TOOL_COLUMNS = (
    "id", "user_id", "agent_id", "session_id", "name", "arguments", "success", "duration_ms",
    "error", "ts",
)
EVENT_COLUMNS = (
    "id", "ts", "user_id", "agent_id", "session_id", "kind", "subject_id", "payload",
    "visibility",
)
KEY_COLUMNS = (
    "key_id", "user_id", "agent_id", "label", "admin", "secret_hash", "created_at",
    "revoked_at",
)
SORTABLE = frozenset(
    {"created_at", "updated_at", "confidence", "last_used_at", "use_count", "category", "due_at"}
)
REDACTED = "[forgotten]"
PIPELINE_TABLES = ("llm_calls", "comparisons")
"""Views the write pipeline derives from ``llm.called`` and ``memory.compared`` events."""
_EMBED_TEXT = {"knowledge": "{t}content",
               "conversations": "coalesce({t}name || ': ', '') || {t}content"}
EMBED_TEXT = {table: text.format(t="") for table, text in _EMBED_TEXT.items()}
"""The text a row is embedded from, per table: a turn is embedded with its speaker's
name ("Caroline: I went to a support group"), since questions name people."""


def embed_text(table: str, alias: str) -> str:
    """``EMBED_TEXT[table]`` read from the row ``alias`` names: beside
    ``embedding_staging``, whose text column is ``content`` too, a bare column would be
    the staging row's."""
    return _EMBED_TEXT[table].format(t=f"{alias}.")
CONTEXT_TURNS = 2
"""Neighbouring turns on each side whose text is indexed with a turn."""
NEIGHBOUR_SMOOTHING = 0.5
"""Vector search scores a turn as cosine + this × its best neighbour's cosine: an
answer often sits in the turn next to the one that matches the question."""
APPEND_CHUNK = 400
"""Events (and rows of one view table) written by one multi-row statement: 400 rows
of 21 columns stay far below both drivers' limits on bound parameters."""
COMMON_TERM_MIN_ROWS = 1_000
COMMON_TERM_SHARE = 0.01
"""A keyword held by more rows than both of these (a count, a share of the rows) is
*common*. Rows that hold only common keywords are not BM25-ranked by an ``or`` search,
which would score every one of them (tens of thousands in a large scope), but come
after the rows holding a rarer keyword, newest first. Their BM25 weight is small
anyway (a term in 1% of rows has an idf of 4.6, one in 0.01% of 9.2)."""


TERMS_PER_STATEMENT = 200
"""Terms one statement counts (``term_counts``): a batch's words are counted in a few
statements, well under the drivers' limits on bound parameters."""


def common_term_rows(rows: int) -> int:
    """Rows a keyword may be in before it counts as common, in a corpus of ``rows``."""
    return max(COMMON_TERM_MIN_ROWS, int(COMMON_TERM_SHARE * rows))


def common_term_rows_sql(rows_sql: str) -> tuple[str, list[Any]]:
    """``common_term_rows`` as an SQL expression over ``rows_sql`` (an expression giving
    the corpus size), with its parameters: a store can count the corpus and the terms
    in one statement. CAST truncates toward zero, as ``int()`` does."""
    return (f"max(?, CAST(? * ({rows_sql}) AS INTEGER))",
            [COMMON_TERM_MIN_ROWS, COMMON_TERM_SHARE])


def _kind_matches(row: Sequence[Any], query: ItemQuery) -> bool:
    """Whether a row's (id, category, context, entity) passes ``query``'s filters on
    those three columns."""
    return ((query.category is None or query.category == row[1])
            and (query.context is None or query.context == row[2])
            and (query.entity is None or query.entity == row[3]))


def keyword_hits(
    terms: Sequence[str], mode: MatchMode, limit: int, *,
    bm25: Callable[[Sequence[str], MatchMode], list[tuple[str, float]]],
    common_terms: Callable[[Sequence[str]], set[str]],
    newest: Callable[[Sequence[str], MatchMode], list[str]],
) -> list[tuple[str, float]]:
    """The keyword search both stores run over their own primitives: ``and`` ranks the
    rows holding every term by BM25, ``two`` those holding two of them, ``triples``
    those holding all of one triple; ``or`` ranks by BM25 over the terms that are not
    common, then fills with the newest rows holding a common one (score 0). ``two`` of
    two terms is ``and`` (BM25 always), of one ``or``. When every term is common,
    ``and`` lists the rows holding them all newest first (score 0), as ``or`` does:
    ranking them could mean scoring thousands of rows, as many as a common term's.

    ``bm25(terms, mode)`` returns up to ``limit`` (id, score) best first,
    ``common_terms(terms)`` the common ones, ``newest(terms, mode)`` up to ``limit`` ids
    of rows holding any (``or``) or all (``and``) of ``terms``, newest first.
    """
    if mode == "triples" or (mode == "two" and len(terms) > 2):
        return bm25(terms, mode)
    if mode in ("and", "two") and len(terms) > 1:
        # Not for ``two``: dedup's lookup wants the shortest rows holding a short
        # text's words, which BM25 ranks first, not the newest.
        if mode == "two" or len(common_terms(terms)) < len(terms):
            return bm25(terms, "and")
        return [(doc_id, 0.0) for doc_id in newest(terms, "and")]
    common = common_terms(terms)
    rare = [term for term in terms if term not in common]
    found = bm25(rare, "or") if rare else []
    if len(found) < limit and common:
        seen = {doc_id for doc_id, _ in found}
        found += [(doc_id, 0.0) for doc_id in newest([t for t in terms if t in common], "or")
                  if doc_id not in seen]
    return found[:limit]


def spoken_day(timestamp: str) -> str:
    """``2023-05-08T13:56:00+00:00`` → ``8 May 2023 Monday``: the day in words, so
    keyword search matches questions that name a date or month."""
    moment = datetime.fromisoformat(timestamp)
    return f"{moment.day} {moment:%B %Y %A}"


def _in_field_order(kind: type, columns: Sequence[str], last: str) -> Callable[[Any], Any]:
    """The values of a row of ``columns`` in the order of ``kind``'s fields, up to its
    field ``last`` (excluded): a search builds dozens of rows, and positional
    arguments cost half of keywords from a dict."""
    return itemgetter(*(columns.index(name) for name in _fields_before(kind, last)))


def _fields_before(kind: type, last: str) -> list[str]:
    names = [f.name for f in fields(kind)]
    return names[: names.index(last)]


def _metadata(raw: str | None) -> dict[str, Any]:
    return json.loads(raw) if raw and raw != "{}" else {}


_ITEM_VALUES = _in_field_order(Item, ITEM_COLUMNS, "metadata")
_ITEM_METADATA = ITEM_COLUMNS.index("metadata")
_ITEM_CONFIDENCE = _fields_before(Item, "metadata").index("confidence")
_ITEM_SENSITIVE = _fields_before(Item, "metadata").index("sensitive")
_TURN_VALUES = _in_field_order(Turn, TURN_COLUMNS, "metadata")
_TURN_METADATA = TURN_COLUMNS.index("metadata")
_TURN_NAME = TURN_COLUMNS.index("name")
_ITEM: Callable[..., Item] = Item   # built from positional values (not checkable)
_TURN: Callable[..., Turn] = Turn


def item_from_row(row: Sequence[Any]) -> Item:
    values = list(_ITEM_VALUES(row))
    # The driver's types (a 0/1 integer, a Decimal) as the item's.
    values[_ITEM_SENSITIVE] = bool(values[_ITEM_SENSITIVE])
    values[_ITEM_CONFIDENCE] = float(values[_ITEM_CONFIDENCE])
    return _ITEM(*values, metadata=_metadata(row[_ITEM_METADATA]))


def turn_from_row(row: Sequence[Any]) -> Turn:
    metadata = _metadata(row[_TURN_METADATA])
    name = row[_TURN_NAME]
    if name is not None:
        metadata.setdefault("name", name)
    return _TURN(*_TURN_VALUES(row), metadata=metadata)


def tool_from_row(row: Sequence[Any]) -> ToolCall:
    values = dict(zip(TOOL_COLUMNS, row, strict=True))
    values["arguments"] = json.loads(values["arguments"] or "{}")
    values["success"] = bool(values["success"])
    return ToolCall(**values)


def key_from_row(row: Sequence[Any]) -> StoredKey:
    key_id, user_id, agent_id, label, admin, secret_hash, created_at, revoked_at = row
    return StoredKey(key_id, user_id, agent_id, label, bool(admin), secret_hash, created_at,
                     revoked_at)


def event_from_row(row: Sequence[Any]) -> Event:
    values = dict(zip(EVENT_COLUMNS, row, strict=True))
    values["payload"] = json.loads(values["payload"])
    return Event(**values)


def embedded_table(table: str) -> str:
    """``table`` if it holds embeddings (a guard before it is put into SQL)."""
    if table not in ("knowledge", "conversations"):
        raise ValueError(f"no embedded table {table!r}")
    return table


def item_where_sql(user_id: str, query: ItemQuery, prefix: str = "", *,
                   by_id: bool = False, digest: bool = False) -> tuple[str, list[Any]]:
    """WHERE clause (without the keyword) for knowledge filters; ``prefix`` is a table alias.

    ``by_id`` says rows will also be picked by id: SQLite is then told (``+user_id``) not
    to scan the user's whole scope through the user index instead of looking ids up.
    ``digest``: an exact text is found by ``md5(content)`` (PostgreSQL's index, usable
    under row-level security) instead of a prefix of it (SQLite's).
    """
    p = prefix
    clauses: list[str] = [f"+{p}user_id = ?" if by_id else f"{p}user_id = ?"]
    params: list[Any] = [user_id]
    if not query.include_superseded:
        clauses.append(f"{p}superseded_by IS NULL AND {p}valid_to IS NULL")
    texts = (query.content,) if query.content is not None else query.contents
    if texts is not None and not texts:
        clauses.append("1 = 0")
    elif texts is not None and digest:
        clauses.append(f"md5({p}content) IN ({', '.join(['md5(?)'] * len(texts))}) AND "
                       f"{p}content IN ({marks(len(texts))})")
        params.extend([*texts, *texts])
    elif texts is not None:
        # The prefix lets an expression index find the row. `|| ''` keeps SQLite from
        # substituting the full text into the prefix expression, which hides the index.
        clauses.append(f"substr({p}content, 1, 64) IN ({marks(len(texts))}) AND "
                       f"{p}content || '' IN ({marks(len(texts))})")
        params.extend([*(text[:64] for text in texts), *texts])
    for column in ("category", "context", "entity", "source"):
        value = getattr(query, column)
        if value is not None:
            clauses.append(f"{p}{column} = ?")
            params.append(value)
    if query.sensitive is not None:
        clauses.append(f"{p}sensitive = ?")
        params.append(query.sensitive)
    if query.time_from is not None:
        clauses.append(f"{p}created_at >= ?")
        params.append(query.time_from)
    if query.time_to is not None:
        clauses.append(f"{p}created_at <= ?")
        params.append(query.time_to)
    if query.valid_from_min is not None:
        clauses.append(f"coalesce({p}valid_from, {p}created_at) >= ?")
        params.append(query.valid_from_min)
    if query.valid_from_max is not None:
        clauses.append(f"coalesce({p}valid_from, {p}created_at) <= ?")
        params.append(query.valid_from_max)
    if query.ids is not None:
        clauses.append(f"{p}id IN ({marks(len(query.ids)) or 'NULL'})")
        params.extend(query.ids)
    return " AND ".join(clauses), params


def turn_where_sql(user_id: str, query: TurnQuery, prefix: str = "", *,
                   by_id: bool = False) -> tuple[str, list[Any]]:
    """WHERE clause (without the keyword) for conversation filters (see ``item_where_sql``)."""
    p = prefix
    clauses: list[str] = [f"+{p}user_id = ?" if by_id else f"{p}user_id = ?"]
    params: list[Any] = [user_id]
    if query.session_id is not None:
        clauses.append(f"{p}session_id = ?")
        params.append(query.session_id)
    if query.role is not None:
        clauses.append(f"{p}role = ?")
        params.append(query.role)
    if query.time_from is not None:
        clauses.append(f"{p}ts >= ?")
        params.append(query.time_from)
    if query.time_to is not None:
        clauses.append(f"{p}ts <= ?")
        params.append(query.time_to)
    if query.ids is not None:
        clauses.append(f"{p}id IN ({marks(len(query.ids)) or 'NULL'})")
        params.extend(query.ids)
    return " AND ".join(clauses), params


def marks(count: int) -> str:
    """``count`` placeholders, comma-separated."""
    return ", ".join("?" * count)


def pk_text_values(count: int) -> str:
    """A VALUES list of ``count`` (pk, text) pairs: ``column1`` and ``column2``."""
    return ", ".join(["(CAST(? AS BIGINT), ?)"] * count)


_COLUMNS: dict[str, frozenset[str]] = {
    "knowledge": frozenset(ITEM_COLUMNS) | {"embedding"},
    "conversations": frozenset(TURN_COLUMNS) | {"day", "extraction", "extraction_batch",
                                                "extraction_claim", "extraction_claim_until"},
    "tool_history": frozenset(TOOL_COLUMNS),
    "llm_calls": frozenset({"id", "user_id", "ts", "purpose", "model", "tokens_in",
                            "tokens_out", "latency_ms", "outcome", "error"}),
    "comparisons": frozenset({"user_id", "item_a", "item_b", "outcome", "similarity", "ts"}),
}
"""The view columns the projection may write, per table."""
_JSON_COLUMNS = frozenset({"metadata", "arguments"})


def _column_value(column: str, value: Any) -> Any:
    return json.dumps(value or {}) if column in _JSON_COLUMNS else value


def _set_sql(values: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """``SET`` clauses (and their parameters) for an ``Update``'s values."""
    sets: list[str] = []
    params: list[Any] = []
    for column, value in values.items():
        if isinstance(value, Add) and value.cap is not None:
            sets.append(f"{column} = CASE WHEN {column} + ? > ? THEN ? ELSE {column} + ? END")
            params += [value.amount, value.cap, value.cap, value.amount]
        elif isinstance(value, Add):
            sets.append(f"{column} = {column} + ?")
            params.append(value.amount)
        elif isinstance(value, Scale):
            sets.append(f"{column} = {column} * ?")
            params.append(value.factor)
        else:
            sets.append(f"{column} = ?")
            params.append(_column_value(column, value))
    return ", ".join(sets), params


class SQLStore(ABC):
    """Ledger projection and the queries that read the same on every SQL backend."""

    url: str
    _words: WordCounts
    """Dedup's kept word counts (``term_counts``), raised by the rows inserted here."""
    common_postings_costly = False
    reads_beside = False

    # backend hooks ----------------------------------------------------------------
    @abstractmethod
    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only statement (placeholders ``?``) and return its rows."""

    @abstractmethod
    def _writing(self) -> AbstractContextManager[Run]:
        """A write transaction (nesting as a savepoint) yielding a statement runner."""

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._writing():
            yield

    def reading(self) -> AbstractContextManager[None]:
        """Several reads of this thread grouped, where the store gains by it (see
        ``PostgresStore.reading``); SQLite's reads are in-process calls already."""
        return nullcontext()

    def reading_beside(self) -> AbstractContextManager[bool]:
        """Nothing beside (``Store.reads_beside``), unless a backend says otherwise."""
        return nullcontext(False)

    def writing_for(self, user_id: str) -> AbstractContextManager[None]:
        """A write transaction in which reads of ``user_id``'s rows stay current until
        it ends: no other writer changes them in between. SQLite has one writer at a
        time anyway (``BEGIN IMMEDIATE``); PostgreSQL takes a per-user lock."""
        return self.transaction()

    def _in_ledger_order(self, run: Run, user_ids: Sequence[str]) -> None:
        """Make the writers of ``user_ids`` draw their ledger positions and change the
        views one transaction at a time, so the views change in ledger order. SQLite
        has one writer at a time already.

        Every transaction takes these before it locks a row of those users (an append,
        a claim, a forget): one that locked a row first and then waited for a user's
        lock could wait on a writer holding that lock and waiting for the row."""
        del run, user_ids

    # ledger -----------------------------------------------------------------------
    def append(self, events: Sequence[Event]) -> None:
        """Insert ``events`` into the ledger and project them, in one transaction. Per
        ``APPEND_CHUNK`` events: one multi-row INSERT of the events, and one of each run
        of new rows of a view table (``_apply``), so a batch costs statements per chunk,
        not per event."""
        with self._writing() as run:
            self._in_ledger_order(run, sorted({event.user_id for event in events}))
            for start in range(0, len(events), APPEND_CHUNK):
                chunk = events[start:start + APPEND_CHUNK]
                run(*self._insert_sql(run, "events", EVENT_COLUMNS, [(
                    event.id, event.ts, event.user_id, event.agent_id, event.session_id,
                    event.kind, event.subject_id, json.dumps(event.payload),
                    event.visibility) for event in chunk]))
                self._apply(run, chunk)

    def _apply(self, run: Run, events: Sequence[Event]) -> None:
        """Render the projection of ``events`` (``domain.projection``) as statements, in
        ledger order. Consecutive new rows of one table become one INSERT; an update or
        delete first writes the rows before it, so every change sees the ones before."""
        rows = _Rows()
        for event in events:
            uid = event.user_id
            for change in project(event):
                if isinstance(change, Insert):
                    values = {"user_id": uid, **change.values}
                    if change.table == "conversations":
                        values["day"] = spoken_day(values["ts"])
                    columns = tuple(c for c in values if c in _COLUMNS[change.table])
                    if rows.shape != (change.table, columns):
                        self._insert(run, rows)
                        rows = _Rows((change.table, columns))
                    rows.values.append([_column_value(c, values[c]) for c in columns])
                    if change.table == "conversations":
                        rows.turns.append((uid, event.session_id, values["id"], values["ts"]))
                    continue
                self._insert(run, rows)
                rows = _Rows()
                if isinstance(change, Delete):
                    for chunk in iter_chunks(change.ids):
                        self._changed(change.table, run(
                            self._delete_sql(change.table, len(chunk)), [uid, *chunk]))
                    self._deleted(change.table, uid, change.ids)
                    continue
                values = dict(change.values)
                if "embedding" in values and values["embedding"] is None:
                    values["emb_seq"] = None  # vector indexes drop a row without a number
                sets, params = _set_sql(values)
                for chunk in iter_chunks(change.ids):
                    self._changed(change.table, run(
                        self._update_sql(change.table, sets, tuple(values), len(chunk)),
                        [*params, uid, *chunk]))
        self._insert(run, rows)

    def _update_sql(self, table: str, sets: str, columns: Sequence[str], count: int) -> str:
        """The UPDATE of ``count`` of one user's rows of ``table`` by id: ``sets`` (of
        ``columns``), then the user and the ids as parameters. What it returns goes to
        ``_changed``."""
        del columns
        return f"UPDATE {table} SET {sets} WHERE user_id = ? AND id IN ({marks(count)})"

    def _delete_sql(self, table: str, count: int) -> str:
        """The DELETE of ``count`` of one user's rows of ``table`` by id (parameters: the
        user, the ids). What it returns goes to ``_changed``."""
        return f"DELETE FROM {table} WHERE user_id = ? AND id IN ({marks(count)})"

    def _deleted(self, table: str, user_id: str, ids: Sequence[str]) -> None:  # noqa: B027 (a hook)
        """Rows of ``table`` this transaction deleted (forget, prune): a backend that
        keeps an in-process index of them drops them once committed."""

    def _insert(self, run: Run, rows: _Rows) -> None:
        """Write a run of new rows of one table as one statement. New turns carry their
        neighbour text in it (``_neighbour_text``); the stored turns around them get
        theirs updated after."""
        if rows.shape is None or not rows.values:
            return
        table, columns = rows.shape
        values, around = rows.values, list[tuple[int, str]]()
        if rows.turns:
            texts, around = self._neighbour_text(run, rows)
            columns = (*columns, "context")
            values = [[*row, text] for row, text in zip(values, texts, strict=True)]
        conflict = (" ON CONFLICT (user_id, item_a, item_b) DO NOTHING"
                    if table == "comparisons" else "")
        returning = self._insert_returning.get(table)
        written = run(*self._insert_sql(
            run, table, columns, values,
            conflict + (f" RETURNING {returning}" if returning else "")))
        if returning:
            self._changed(table, written)
        self._words.inserted(table, columns, values)
        for start in range(0, len(around), APPEND_CHUNK):
            chunk = around[start:start + APPEND_CHUNK]
            self._changed("conversations", run(self._context_sql(len(chunk)),
                                               [value for pair in chunk for value in pair]))

    def _context_sql(self, count: int) -> str:
        """The UPDATE of ``count`` stored turns' neighbour text (parameters: each turn's
        ``pk`` and text). What it returns goes to ``_changed``."""
        return (f"UPDATE conversations SET context = v.column2 FROM (VALUES "
                f"{pk_text_values(count)}) AS v WHERE conversations.pk = v.column1")

    def _insert_sql(self, run: Run, table: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]], suffix: str = "") -> tuple[str, list[Any]]:
        """One INSERT of ``rows`` (values of ``columns``, in order) into ``table``, with
        ``suffix`` (ON CONFLICT, RETURNING) after: a multi-row VALUES list."""
        del run
        return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                + ", ".join([f"({marks(len(columns))})"] * len(rows)) + suffix,
                [value for row in rows for value in row])

    _insert_returning: ClassVar[Mapping[str, str]] = {}
    """Per table, what an INSERT of its rows returns to ``_changed`` (nothing: none)."""

    def _changed(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        """What a projected INSERT (``_insert_returning``), UPDATE (``_update_sql``,
        ``_context_sql``) or DELETE (``_delete_sql``) of ``table``'s rows returned."""
        del table, rows

    def _neighbour_text(self, run: Run, rows: _Rows
                        ) -> tuple[list[str], list[tuple[int, str]]]:
        """The neighbour text of each new turn of ``rows``, and (pk, text) of every
        stored turn whose neighbours they change.

        A turn's ``context`` holds the text of up to ``CONTEXT_TURNS`` turns on each
        side in its session; keyword search weighs it lightly, so a short reply ("Yes,
        in May!") can be found by what it answers. Per session, three reads of the
        stored turns around and among the new ones; the new turns are placed among
        them as they will be stored (by ``ts``, after stored turns of the same ``ts``,
        in the order given), so each row is written once with its text, not inserted
        and then updated (on PostgreSQL an update rewrites the row's postings)."""
        n = CONTEXT_TURNS
        content = rows.shape[1].index("content") if rows.shape else 0
        sessions: dict[tuple[str, str | None], list[int]] = {}
        for index, (user_id, session_id, _, _) in enumerate(rows.turns):
            sessions.setdefault((user_id, session_id), []).append(index)
        texts = [""] * len(rows.turns)
        around: list[tuple[int, str]] = []
        where = "FROM conversations WHERE user_id = ? AND session_id = ? AND ts"
        for (user_id, session_id), indexes in sessions.items():
            first = min(rows.turns[i][3] for i in indexes)
            last = max(rows.turns[i][3] for i in indexes)
            stored = (
                run(f"SELECT ts, pk, content {where} < ? ORDER BY ts DESC, pk DESC LIMIT ?",
                    [user_id, session_id, first, 2 * n])[::-1]
                + run(f"SELECT ts, pk, content {where} >= ? AND ts <= ? ORDER BY ts, pk",
                      [user_id, session_id, first, last])
                + run(f"SELECT ts, pk, content {where} > ? ORDER BY ts, pk LIMIT ?",
                      [user_id, session_id, last, 2 * n]))
            # (ts, new?, order, new turn's index or -1 with the stored pk, text)
            window = sorted(
                [(row[0], 0, int(row[1]), -1, str(row[2])) for row in stored]
                + [(rows.turns[i][3], 1, i, i, str(rows.values[i][content])) for i in indexes])
            new = [position for position, row in enumerate(window) if row[3] >= 0]
            touched = sorted({j for i in new
                              for j in range(max(0, i - n), min(len(window), i + n + 1))})
            for i in touched:
                text = "\n".join(window[j][4] for j in range(
                    max(0, i - n), min(len(window), i + n + 1)) if j != i)
                if window[i][3] >= 0:
                    texts[window[i][3]] = text
                else:
                    around.append((window[i][2], text))
        return texts, around

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
        clauses: list[str] = ["user_id = ?"]
        params: list[Any] = [user_id]
        if subject_id is not None:
            clauses.append("subject_id = ?")
            params.append(subject_id)
        if kinds:
            clauses.append(f"kind IN ({marks(len(kinds))})")
            params.extend(kinds)
        if since is not None:
            clauses.append("ts >= ?")
            params.append(since)
        if until is not None:
            clauses.append("ts <= ?")
            params.append(until)
        sql = (f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE {' AND '.join(clauses)} "
               "ORDER BY seq")
        if limit is not None:
            sql = (f"SELECT * FROM ({sql.replace('ORDER BY seq', 'ORDER BY seq DESC')} "
                   f"LIMIT {int(limit)}) AS recent")
            rows = self._read(sql, params)[::-1]
        else:
            rows = self._read(sql, params)
        return [event_from_row(row) for row in rows]

    def redact(self, user_id: str, subject_id: str) -> None:
        with self._writing() as run:
            self._in_ledger_order(run, [user_id])  # the user's lock before any row's
            rows = run("SELECT seq, payload FROM events WHERE user_id = ? AND subject_id = ?",
                       [user_id, subject_id])
            for seq, payload in rows:
                run("UPDATE events SET payload = ? WHERE seq = ?",
                    [json.dumps(_redacted(json.loads(payload))), seq])
            if rows:  # a reembed in progress (or killed) holds a staged copy of the text
                run("DELETE FROM embedding_staging WHERE id = ?", [subject_id])
        self._words.forget(user_id)   # no word of the redacted text stays in this process

    def delete_user(self, user_id: str) -> int:
        with self._writing() as run:
            self._in_ledger_order(run, [user_id])
            for table in ("knowledge", "conversations"):  # staged copies of their text
                run(f"DELETE FROM embedding_staging WHERE table_name = '{table}' AND id IN "
                    f"(SELECT id FROM {table} WHERE user_id = ?)", [user_id])
            for table in ("knowledge", "conversations", "tool_history", *PIPELINE_TABLES):
                run(f"DELETE FROM {table} WHERE user_id = ?", [user_id])
            count = run("SELECT count(*) FROM events WHERE user_id = ?", [user_id])[0][0]
            run("DELETE FROM events WHERE user_id = ?", [user_id])
        self._words.forget(user_id)
        return int(count)

    def rebuild(self) -> None:
        with self._writing() as run:
            kept = self._embedding_cache(run)
            # A damaged full-text index would make the deletes below fail: realign it first.
            self._rebuild_fts(run)
            for table in ("knowledge", "conversations", "tool_history", *PIPELINE_TABLES):
                run(f"DELETE FROM {table}", [])
            last = 0
            while True:
                rows = run(f"SELECT seq, {', '.join(EVENT_COLUMNS)} FROM events WHERE seq > ? "
                           "ORDER BY seq LIMIT 1000", [last])
                if not rows:
                    break
                self._apply(run, [event_from_row(row[1:]) for row in rows])
                last = rows[-1][0]
            self._restore_embeddings(run, kept)
            self._rebuild_fts(run)

    @abstractmethod
    def _embedding_cache(self, run: Run) -> Any:
        """Read vectors worth keeping across a rebuild (keyed by table and text)."""

    @abstractmethod
    def _restore_embeddings(self, run: Run, kept: Any) -> None:
        """Put kept vectors back on rows whose text did not change."""

    @abstractmethod
    def _rebuild_fts(self, run: Run) -> None:
        """Rebuild full-text indexes from the views."""

    # knowledge --------------------------------------------------------------------
    def items_holding_two(self, user_id: str, term_lists: Sequence[Sequence[str]],
                          limit: int, queries: Sequence[ItemQuery] | None = None
                          ) -> list[list[str] | None]:
        lists = [list(dict.fromkeys(terms)) for terms in term_lists]
        postings = {term: set(pks) for term, pks in self._postings(
            user_id, sorted({t for terms in lists for t in terms}), POSTINGS_CAP).items()}
        rare = [[t for t in terms if len(postings.get(t, ())) <= POSTINGS_CAP]
                for terms in lists]
        # A list with a term past the cap: the rows holding one of its other terms and
        # one of those (``_holding_both``), where the store can tell them apart cheaply.
        mixed = [index for index, terms in enumerate(lists)
                 if rare_and_common(len(terms), len(rare[index]))]
        both = dict(zip(mixed, self._holding_both(user_id, [
            (rare[index], [t for t in lists[index] if t not in rare[index]])
            for index in mixed]) if mixed else [], strict=True))
        held: list[Counter[int] | None] = []
        for index, terms in enumerate(lists):
            if len(rare[index]) == len(terms):
                held.append(holding_two([postings.get(term, set()) for term in terms]))
            elif (also := both.get(index)) is not None:   # as if one term, held by those
                held.append(holding_two([*(postings.get(t, set()) for t in rare[index]), also]))
            else:
                held.append(None)
        # Other users' and superseded rows hold words too: only the user's current
        # items (of the list's query) count towards ``limit``, as the ranked lookup
        # filters before its LIMIT.
        rows: dict[int, tuple[Any, ...]] = {}
        where, params = item_where_sql(user_id, ItemQuery(), by_id=self._hint_ids)
        for chunk in iter_chunks(sorted({pk for pks in held if pks for pk in pks})):
            rows.update((row[0], row[1:]) for row in self._read(
                f"SELECT pk, id, category, context, entity FROM knowledge WHERE pk IN "
                f"({marks(len(chunk))}) AND {where}", [*chunk, *params]))
        found: list[list[str] | None] = []
        for index, pks in enumerate(held):
            if pks is None:
                found.append(None)
                continue
            query = queries[index] if queries is not None else ItemQuery()
            kept = [pk for pk in pks if pk in rows and _kind_matches(rows[pk], query)]
            if len(kept) > limit:
                # Rarer words weigh more, as in BM25: among items holding as many of the
                # terms, those whose held terms are in the fewest rows (a common term a
                # row holds counts as past the cap).
                also = both.get(index)
                weights = [(also, math.log(POSTINGS_CAP + 1))] if also is not None else []
                weights += [(postings.get(t, set()), math.log(len(postings.get(t, ())) or 1))
                            for t in rare[index]]
                rarity = {pk: sum(weight for rows, weight in weights if pk in rows)
                          for pk in kept}
                kept.sort(key=lambda pk: (-pks[pk], rarity[pk], -pk))
                kept = kept[:limit]
            else:
                kept.sort(key=lambda pk: (-pks[pk], -pk))
            found.append([rows[pk][0] for pk in kept])
        return found

    def _holding_both(self, user_id: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]
                      ) -> list[set[int] | None]:
        """For each pair of term lists, the ``pk`` of the knowledge rows holding a term of
        the first and one of the second (the user's at least, as ``_postings``), or None
        where the backend cannot find them without reading the second's postings
        (the default)."""
        return [None] * len(pairs)

    @abstractmethod
    def _postings(self, user_id: str, terms: Sequence[str], cap: int
                  ) -> dict[str, list[int]]:
        """For each of ``terms``, the ``pk`` of up to ``cap + 1`` knowledge rows holding it
        (as keyword search matches it), the user's at least; rows of other users may be
        among them."""

    def get_item(self, user_id: str, item_id: str) -> Item | None:
        rows = self._read(f"SELECT {', '.join(ITEM_COLUMNS)} FROM knowledge "
                          "WHERE user_id = ? AND id = ?", [user_id, item_id])
        return item_from_row(rows[0]) if rows else None

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
        if sort not in SORTABLE:
            raise ValueError(f"cannot sort by {sort!r}")
        where, params = item_where_sql(user_id, query, digest=self._digest_text,
                                       by_id=self._hint_ids and query.ids is not None)
        direction = "DESC" if descending else "ASC"
        nulls = "NULLS LAST" if descending else "NULLS FIRST"    # SQLite's order, everywhere
        sql = (f"SELECT {', '.join(ITEM_COLUMNS)} FROM knowledge WHERE {where} "
               f"ORDER BY {sort} {direction} {nulls}, pk {direction}")
        if limit is not None:
            sql += f" LIMIT {int(limit)} OFFSET {int(offset)}"
        elif offset:
            sql += f" {self._unlimited} OFFSET {int(offset)}"
        items = [item_from_row(row) for row in self._read(sql, params)]
        if limit is None or (len(items) < limit and (items or not offset)):
            return items, offset + len(items)     # the page is the last one
        total = self._read(f"SELECT count(*) FROM knowledge WHERE {where}", params)[0][0]
        return items, int(total)

    _hint_ids = False
    """Whether the dialect reads ``+column`` as "do not use an index for this"."""

    _digest_text = False
    """Whether exact texts are looked up by ``md5(content)`` (see ``item_where_sql``)."""

    _unlimited = ""
    """What stands for "no LIMIT" before an OFFSET in this dialect."""

    def due_items(self, user_id: str, until: str) -> list[Item]:
        rows = self._read(
            f"SELECT {', '.join(ITEM_COLUMNS)} FROM knowledge WHERE user_id = ? AND "
            "superseded_by IS NULL AND valid_to IS NULL AND due_at IS NOT NULL AND due_at <= ? "
            "ORDER BY due_at", [user_id, until])
        return [item_from_row(row) for row in rows]

    # conversations ----------------------------------------------------------------
    def query_turns(
        self, user_id: str, query: TurnQuery, *, descending: bool = False,
        limit: int | None = None,
    ) -> list[Turn]:
        where, params = turn_where_sql(user_id, query,
                                       by_id=self._hint_ids and query.ids is not None)
        direction = "DESC" if descending else "ASC"
        sql = (f"SELECT {', '.join(TURN_COLUMNS)} FROM conversations WHERE {where} "
               f"ORDER BY ts {direction}, pk {direction}")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [turn_from_row(row) for row in self._read(sql, params)]

    def sessions(self, user_id: str) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT session_id, count(*), min(ts), max(ts), "
            "sum(CASE WHEN consolidated_at IS NULL THEN 1 ELSE 0 END) FROM conversations "
            "WHERE user_id = ? GROUP BY session_id ORDER BY max(ts) DESC", [user_id])
        return [{"session_id": r[0], "turns": int(r[1]), "first_ts": r[2], "last_ts": r[3],
                 "unconsolidated": int(r[4])} for r in rows]

    # tools ------------------------------------------------------------------------
    def query_tool_calls(
        self, user_id: str, *, name: str | None = None, success: bool | None = None,
        since: str | None = None, limit: int | None = None,
    ) -> list[ToolCall]:
        clauses: list[str] = ["user_id = ?"]
        params: list[Any] = [user_id]
        for column, value in (("name", name), ("success", success)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            clauses.append("ts >= ?")
            params.append(since)
        sql = (f"SELECT {', '.join(TOOL_COLUMNS)} FROM tool_history WHERE "
               f"{' AND '.join(clauses)} ORDER BY ts DESC, id DESC")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [tool_from_row(row) for row in self._read(sql, params)]

    def tool_stats(self, user_id: str) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT name, count(*), sum(CASE WHEN success THEN 0 ELSE 1 END), avg(duration_ms), "
            "max(ts) FROM tool_history WHERE user_id = ? GROUP BY name ORDER BY count(*) DESC, "
            "name", [user_id])
        return [{"name": r[0], "calls": int(r[1]), "failures": int(r[2]),
                 "success_rate": round(1 - int(r[2]) / int(r[1]), 4),
                 "avg_duration_ms": None if r[3] is None else round(float(r[3]), 3),
                 "last_ts": r[4]} for r in rows]

    # observability ----------------------------------------------------------------
    def counts(self, user_id: str) -> dict[str, Any]:
        one = self._read(
            "SELECT "
            "(SELECT count(*) FROM knowledge WHERE user_id = ? AND superseded_by IS NULL "
            "AND valid_to IS NULL), "
            "(SELECT count(*) FROM knowledge WHERE user_id = ?), "
            "(SELECT count(*) FROM knowledge WHERE user_id = ? AND embedding IS NULL), "
            "(SELECT count(*) FROM conversations WHERE user_id = ?), "
            "(SELECT count(DISTINCT session_id) FROM conversations WHERE user_id = ?), "
            "(SELECT count(*) FROM tool_history WHERE user_id = ?), "
            "(SELECT count(*) FROM events WHERE user_id = ?)", [user_id] * 7)[0]
        by_category = self.facets(user_id, "category")
        return {"items": int(one[0]), "items_total": int(one[1]),
                "items_unembedded": int(one[2]), "turns": int(one[3]), "sessions": int(one[4]),
                "tool_calls": int(one[5]), "events": int(one[6]),
                "by_category": dict(by_category)}

    def facets(self, user_id: str, column: Literal["entity", "context", "category"]) -> list[
        tuple[str, int]
    ]:
        if column not in ("entity", "context", "category"):
            raise ValueError(f"no facet {column!r}")
        rows = self._read(
            f"SELECT {column}, count(*) FROM knowledge WHERE user_id = ? AND superseded_by IS NULL "
            f"AND valid_to IS NULL AND {column} IS NOT NULL GROUP BY {column} "
            f"ORDER BY count(*) DESC, {column}", [user_id])
        return [(r[0], int(r[1])) for r in rows]

    def activity(self, user_id: str, since: str) -> list[tuple[str, str, int]]:
        rows = self._read(
            "SELECT substr(ts, 1, 10), kind, count(*) FROM events WHERE user_id = ? AND ts >= ? "
            "GROUP BY substr(ts, 1, 10), kind ORDER BY 1, 2", [user_id, since])
        return [(r[0], r[1], int(r[2])) for r in rows]

    def stale_items(self, user_id: str, before: str) -> list[tuple[str, float]]:
        rows = self._read(
            "SELECT id, confidence FROM knowledge WHERE user_id = ? AND superseded_by IS NULL "
            "AND valid_to IS NULL AND coalesce(last_used_at, created_at) < ?", [user_id, before])
        return [(r[0], float(r[1])) for r in rows]

    def prunable(self, user_id: str, before: str, min_confidence: float) -> dict[str, list[str]]:
        turns = self._read("SELECT id FROM conversations WHERE user_id = ? AND ts < ?",
                           [user_id, before])
        tools = self._read("SELECT id FROM tool_history WHERE user_id = ? AND ts < ?",
                           [user_id, before])
        items = self._read(
            "SELECT id FROM knowledge WHERE user_id = ? AND confidence < ? AND "
            "coalesce(last_used_at, updated_at) < ?", [user_id, min_confidence, before])
        return {"turns": [r[0] for r in turns], "tools": [r[0] for r in tools],
                "items": [r[0] for r in items]}

    def user_ids(self) -> list[str]:
        return [r[0] for r in self._read("SELECT DISTINCT user_id FROM events ORDER BY 1")]

    # moving between stores --------------------------------------------------------
    def ledger(self, after_seq: int, limit: int) -> list[tuple[int, Event]]:
        rows = self._read(f"SELECT seq, {', '.join(EVENT_COLUMNS)} FROM events WHERE seq > ? "
                          "ORDER BY seq LIMIT ?", [int(after_seq), int(limit)])
        return [(int(r[0]), event_from_row(r[1:])) for r in rows]

    def stored_embeddings(self, table: Table, after_id: str, limit: int
                          ) -> list[tuple[str, str, Vector, str]]:
        name = embedded_table(table)
        rows = self._read(
            f"SELECT id, {EMBED_TEXT[name]}, embedding, embedding_model FROM {name} "
            "WHERE id > ? AND embedding IS NOT NULL ORDER BY id LIMIT ?",
            [after_id, int(limit)])
        return [(r[0], r[1], vector_of(r[2]), r[3]) for r in rows]

    def user_counts(self) -> dict[str, dict[str, int]]:
        keys = ("events", "items", "turns", "tool_calls", "vectors")
        counts: dict[str, dict[str, int]] = {}
        for key, sql in zip(keys, (
                "SELECT user_id, count(*) FROM events GROUP BY user_id",
                "SELECT user_id, count(*) FROM knowledge GROUP BY user_id",
                "SELECT user_id, count(*) FROM conversations GROUP BY user_id",
                "SELECT user_id, count(*) FROM tool_history GROUP BY user_id",
                "SELECT user_id, count(*) FROM (SELECT user_id FROM knowledge WHERE embedding "
                "IS NOT NULL UNION ALL SELECT user_id FROM conversations WHERE embedding IS "
                "NOT NULL) AS embedded GROUP BY user_id"), strict=True):
            for user_id, count in self._read(sql):
                counts.setdefault(user_id, dict.fromkeys(keys, 0))[key] = int(count)
        return dict(sorted(counts.items()))

    # write pipeline ---------------------------------------------------------------
    def pending_extractions(
        self, limit: int, *, claimable_at: str | None = None, holder: str | None = None
    ) -> list[tuple[str, list[str]]]:
        pending = "extraction = 'pending'"
        params: list[Any] = []
        if claimable_at is not None:
            pending += (" AND (extraction_claim_until IS NULL OR extraction_claim_until < ? "
                        "OR extraction_claim = ?)")
            params += [claimable_at, holder or ""]
        batches = self._read(
            f"SELECT user_id, extraction_batch FROM conversations WHERE {pending} "
            "GROUP BY user_id, extraction_batch ORDER BY min(pk) LIMIT ?", [*params, limit])
        if not batches:
            return []
        rows = self._read(
            f"SELECT user_id, extraction_batch, id FROM conversations WHERE {pending} AND "
            f"extraction_batch IN ({marks(len(batches))}) ORDER BY pk",
            [*params, *(b for _, b in batches)])
        grouped: dict[tuple[str, str], list[str]] = {(u, b): [] for u, b in batches}
        for user_id, batch, turn_id in rows:
            if (user_id, batch) in grouped:
                grouped[(user_id, batch)].append(turn_id)
        return [(user_id, ids) for (user_id, _), ids in grouped.items() if ids]

    def claim_extraction(self, user_id: str, ids: Sequence[str], holder: str, until: str,
                         now: str) -> bool:
        return self._mark_claim(
            user_id, ids, holder, until,
            "(extraction_claim_until IS NULL OR extraction_claim_until < ? OR "
            "extraction_claim = ?)", [now, holder])

    def confirm_extraction(self, user_id: str, ids: Sequence[str], holder: str) -> bool:
        return self._mark_claim(user_id, ids, holder, None, "extraction_claim = ?", [holder])

    def _mark_claim(self, user_id: str, ids: Sequence[str], holder: str, until: str | None,
                    condition: str, params: list[Any]) -> bool:
        """Set the claim on every turn of ``ids`` that is pending and meets ``condition``,
        all or none; an UPDATE (not a SELECT) so PostgreSQL locks the rows it checks."""
        wanted = sorted(set(ids))
        if not wanted:
            return False
        keep = "extraction_claim_until" if until is None else "?"
        try:
            with self._writing() as run:
                # The user's lock before the rows': the claim's transaction appends
                # events next (extraction), and a writer holding the user's lock may
                # be waiting for these rows.
                self._in_ledger_order(run, [user_id])
                got = run(
                    f"UPDATE conversations SET extraction_claim = ?, extraction_claim_until = "
                    f"{keep} WHERE user_id = ? AND extraction = 'pending' AND {condition} AND "
                    f"id IN ({marks(len(wanted))}) RETURNING id",
                    [holder, *([] if until is None else [until]), user_id, *params, *wanted])
                if len(got) != len(wanted):
                    raise _NotAll
        except _NotAll:
            return False
        return True

    def extraction_ids(self, user_id: str, state: str) -> list[str]:
        rows = self._read("SELECT id FROM conversations WHERE user_id = ? AND extraction = ? "
                          "ORDER BY pk", [user_id, state])
        return [r[0] for r in rows]

    def backlog(self, user_id: str) -> dict[str, int]:
        counts = dict.fromkeys(("pending", "done", "skipped", "failed"), 0)
        for state, count in self._read(
                "SELECT extraction, count(*) FROM conversations WHERE user_id = ? AND "
                "extraction IS NOT NULL GROUP BY extraction", [user_id]):
            counts[state] = int(count)
        unembedded = self._read(
            "SELECT (SELECT count(*) FROM knowledge WHERE user_id = ? AND embedding IS NULL), "
            "(SELECT count(*) FROM conversations WHERE user_id = ? AND embedding IS NULL)",
            [user_id, user_id])[0]
        return {**{f"extraction_{k}": v for k, v in counts.items()},
                "embedding_pending": int(unembedded[0]) + int(unembedded[1])}

    def item_vectors(self, user_id: str) -> list[tuple[str, Vector]]:
        rows = self._read(
            "SELECT id, embedding FROM knowledge WHERE user_id = ? AND superseded_by IS NULL "
            "AND valid_to IS NULL AND embedding IS NOT NULL ORDER BY pk", [user_id])
        return [(r[0], vector_of(r[1])) for r in rows]

    def compared_pairs(self, user_id: str) -> set[tuple[str, str]]:
        rows = self._read("SELECT item_a, item_b FROM comparisons WHERE user_id = ?", [user_id])
        return {(r[0], r[1]) for r in rows}

    def llm_usage(self, user_id: str) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT purpose, model, count(*), sum(tokens_in), sum(tokens_out), "
            "sum(CASE WHEN outcome = 'ok' THEN 0 ELSE 1 END), sum(latency_ms) FROM llm_calls "
            "WHERE user_id = ? GROUP BY purpose, model ORDER BY purpose, model", [user_id])
        return [{"purpose": r[0], "model": r[1], "calls": int(r[2]), "tokens_in": int(r[3]),
                 "tokens_out": int(r[4]), "errors": int(r[5]),
                 "latency_ms": round(float(r[6]), 3)} for r in rows]

    # embeddings -------------------------------------------------------------------
    @abstractmethod
    def _vector_param(self, vector: Vector) -> Any:
        """A vector as this driver stores it (BLOB bytes, a pgvector value…)."""

    def _check_live_model(self, run: Run, model: str) -> None:
        """Refuse vectors of a model the store has moved away from (after ``reembed``)."""
        live = run("SELECT value FROM meta WHERE key = 'embedding_model'", [])
        if live and live[0][0] != model:
            raise SchemaMismatch(f"{self.url} now uses {live[0][0]}; restart with that "
                                 f"embedder instead of {model}")

    def unstaged(self, table: Table, model: str, limit: int) -> list[tuple[str, str]]:
        name = embedded_table(table)
        rows = self._read(
            f"SELECT id, {EMBED_TEXT[name]} AS text FROM {name} AS t WHERE NOT EXISTS ("
            "SELECT 1 FROM embedding_staging AS s WHERE s.table_name = ? AND s.id = t.id "
            f"AND s.model = ? AND s.content = {embed_text(name, 't')}) ORDER BY pk LIMIT ?",
            [name, model, limit])
        return [(r[0], r[1]) for r in rows]

    def stage_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> None:
        name = embedded_table(table)
        with self._writing() as run:
            for row_id, text, vector in rows:
                run("INSERT INTO embedding_staging (table_name, id, model, content, vector) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (table_name, id, model) DO UPDATE "
                    "SET content = excluded.content, vector = excluded.vector",
                    [name, row_id, model, text, self._vector_param(vector)])

    def promote_staged(self, model: str, dimensions: int) -> bool:
        with self._writing() as run:
            for table in ("knowledge", "conversations"):
                if run(f"SELECT 1 FROM {table} AS t WHERE NOT EXISTS (SELECT 1 FROM "
                       "embedding_staging AS s WHERE s.table_name = ? AND s.id = t.id AND "
                       f"s.model = ? AND s.content = {embed_text(table, 't')}) LIMIT 1",
                       [table, model]):
                    return False
            for table in ("knowledge", "conversations"):
                sequence, params = self._emb_seq_sql(run, table)
                run(f"UPDATE {table} SET embedding = s.vector, embedding_model = s.model, "
                    f"emb_seq = {sequence} FROM embedding_staging AS s WHERE "
                    f"s.table_name = ? AND s.id = {table}.id AND s.model = ?",
                    [*params, table, model])
            run("DELETE FROM embedding_staging", [])
            self.set_meta("embedding_model", model)
            self.set_meta("embedding_dimensions", str(dimensions))
        return True

    def _emb_seq_sql(self, run: Run, table: str) -> tuple[str, list[Any]]:
        """SQL (and its parameters) giving each row of ``table`` that an UPDATE embeds
        a new, increasing embedding sequence number."""
        raise NotImplementedError

    # API keys ---------------------------------------------------------------------
    def add_api_key(self, key: StoredKey) -> None:
        with self._writing() as run:
            run(f"INSERT INTO api_keys ({', '.join(KEY_COLUMNS)}) VALUES ({marks(8)})",
                [key.key_id, key.user_id, key.agent_id, key.label, key.admin,
                 key.secret_hash, key.created_at, key.revoked_at])

    def api_key(self, key_id: str) -> StoredKey | None:
        rows = self._read(f"SELECT {', '.join(KEY_COLUMNS)} FROM api_keys WHERE key_id = ?",
                          [key_id])
        return key_from_row(rows[0]) if rows else None

    def api_keys(self, user_id: str | None = None, *, admin: bool | None = None
                 ) -> list[StoredKey]:
        where: list[str] = ["1 = 1"]
        params: list[Any] = []
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        if admin is not None:
            where.append("admin = ?")
            params.append(admin)
        rows = self._read(f"SELECT {', '.join(KEY_COLUMNS)} FROM api_keys WHERE "
                          f"{' AND '.join(where)} ORDER BY created_at, key_id", params)
        return [key_from_row(row) for row in rows]

    def revoke_api_key(self, key_id: str, at: str) -> bool:
        with self._writing() as run:
            return bool(run("UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND "
                            "revoked_at IS NULL RETURNING 1", [at, key_id]))

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", [key])
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._writing() as run:
            run("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                "value = excluded.value", [key, value])

    def claim_meta(self, values: Mapping[str, str]) -> dict[str, str | None]:
        keys = list(values)
        with self._writing() as run:
            self._claiming(run)
            found: dict[str, str] = {str(key): str(value) for key, value in run(
                f"SELECT key, value FROM meta WHERE key IN ({marks(len(keys))})", keys)}
            if not found:
                for key, value in values.items():
                    self.set_meta(key, value)
                found = dict(values)
        return {key: found.get(key) for key in keys}

    @abstractmethod
    def _claiming(self, run: Run) -> None:
        """Keep other claims out of this transaction until it ends."""


_TEXT_KEYS = frozenset({"content", "previous", "metadata", "entity", "domain"})


def _redacted(payload: Any) -> Any:
    """The payload with the text of every content-bearing field blanked."""
    if isinstance(payload, dict):
        return {k: _blank(v) if k in _TEXT_KEYS else _redacted(v) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_redacted(v) for v in payload]
    return payload


def _blank(value: Any) -> Any:
    if isinstance(value, dict):
        return {}
    return None if value is None else REDACTED


def vector_of(value: Any) -> Vector:
    """A stored embedding as float32: a BLOB (SQLite) or an array-like (pgvector)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return np.frombuffer(value, dtype=np.float32)
    return np.asarray(value, dtype=np.float32)


@dataclass
class _Rows:
    """New rows of one table and column list, waiting to be written together; for
    conversations, also each new turn's (user, session, id, ts)."""

    shape: tuple[str, tuple[str, ...]] | None = None
    values: list[list[Any]] = field(default_factory=list)
    turns: list[tuple[str, str | None, str, str]] = field(default_factory=list)


class _NotAll(Exception):
    """Some turns of a claim were taken or done meanwhile: undo the claim."""
