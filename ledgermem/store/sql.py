"""What the SQL backends share: ``SQLStore``, which appends to the ledger and
projects its events into the views, built from the parts kept beside it.

SQL here is written once, with ``?`` placeholders, in the subset SQLite and
PostgreSQL both accept; a backend rewrites placeholders in ``_sql`` and supplies
connections, full-text search, vector storage and migrations.

The shared parts: ``sql_backend`` (the hooks a backend supplies, ``meta`` and
``api_keys``), ``sql_rows`` (columns, row decoding, filters as WHERE clauses),
``sql_keyword`` (keyword search over a backend's primitives, dedup's lookup),
``sql_reads`` (the views' queries) and ``sql_pipeline`` (extraction claims,
re-embedding).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..domain.projection import Add, Delete, Insert, Scale, project
from ..types import Event
from .base import iter_chunks
from .sql_backend import Run
from .sql_keyword import SQLKeywordLookup
from .sql_pipeline import SQLPipeline
from .sql_reads import SQLReads
from .sql_rows import (
    CONTEXT_TURNS,
    EMBED_TEXT,
    EVENT_COLUMNS,
    ITEM_COLUMNS,
    PIPELINE_TABLES,
    REDACTED,
    SORTABLE,
    TOOL_COLUMNS,
    TURN_COLUMNS,
    event_from_row,
    item_where_sql,
    marks,
    pk_text_values,
    spoken_day,
)
from .word_counts import WordCounts

__all__ = [
    "CONTEXT_TURNS",
    "EMBED_TEXT",
    "SORTABLE",
    "Run",
    "SQLStore",
    "item_where_sql",
    "spoken_day",
]

APPEND_CHUNK = 400
"""Events (and rows of one view table) written by one multi-row statement: 400 rows
of 21 columns stay far below both drivers' limits on bound parameters."""


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


class SQLStore(SQLKeywordLookup, SQLReads, SQLPipeline):
    """Ledger projection and the queries that read the same on every SQL backend."""

    _words: WordCounts
    """Dedup's kept word counts (``term_counts``), raised by the rows inserted here."""

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

    def _deleted(self, table: str, user_id: str, ids: Sequence[str]) -> None:
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


@dataclass
class _Rows:
    """New rows of one table and column list, waiting to be written together; for
    conversations, also each new turn's (user, session, id, ts)."""

    shape: tuple[str, tuple[str, ...]] | None = None
    values: list[list[Any]] = field(default_factory=list)
    turns: list[tuple[str, str | None, str, str]] = field(default_factory=list)
