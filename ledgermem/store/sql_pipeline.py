"""What the SQL stores share for the work done beside a caller: batches of turns
waiting for extraction and the claims on them, the write pipeline's bookkeeping, and
re-embedding through the ``embedding_staging`` table.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from ..errors import SchemaMismatch
from .base import Table, Vector
from .sql_backend import Run, SQLBackend
from .sql_rows import EMBED_TEXT, embed_text, embedded_table, marks, vector_of


class SQLPipeline(SQLBackend):
    """Extraction claims and embedding staging, written once for both dialects."""

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


class _NotAll(Exception):
    """Some turns of a claim were taken or done meanwhile: undo the claim."""
