"""The queries that read the views alike on every SQL backend: items, turns and tool
calls by their filters, the observability counts, and the reads that move a ledger
and its vectors between stores.
"""

from __future__ import annotations

from typing import Any, Literal

from ..types import Event, Item, ItemQuery, ToolCall, Turn
from .base import Table, TurnQuery, Vector
from .sql_backend import SQLBackend
from .sql_rows import (
    EMBED_TEXT,
    EVENT_COLUMNS,
    ITEM_COLUMNS,
    SORTABLE,
    TOOL_COLUMNS,
    TURN_COLUMNS,
    embedded_table,
    event_from_row,
    item_from_row,
    item_where_sql,
    tool_from_row,
    turn_from_row,
    turn_where_sql,
    vector_of,
)


class SQLReads(SQLBackend):
    """Reads of the views, written once for both dialects."""

    # knowledge --------------------------------------------------------------------
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
