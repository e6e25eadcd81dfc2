"""PostgreSQL's vectors: pgvector columns, searched by an exact cosine ranking (turns
smoothed with their neighbours, as on SQLite) until a user's vectors outgrow
``exact_search_limit``, then by the HNSW index; and the embedding jobs that workers
claim across users.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..types import ItemQuery
from .base import Table, TurnQuery, Vector
from .pg_connection import _EVERY_USER, PostgresConnection
from .pg_keyword import CORPUS_TTL_S
from .sql_backend import Run
from .sql_rows import (
    CONTEXT_TURNS,
    EMBED_TEXT,
    NEIGHBOUR_SMOOTHING,
    embedded_table,
    item_where_sql,
    turn_where_sql,
)

EXACT_SEARCH_LIMIT = 10_000
"""Up to this many candidate vectors a search is exact; beyond it, HNSW."""
_COSINE = "coalesce(nullif(1 - (embedding <=> ?::vector), 'NaN'), 0)"
"""Cosine similarity, 0 for a zero vector (pgvector says NaN), as SQLite's dot product."""
EMBED_CLAIM: dict[str, int] = {"knowledge": 0x6C6B, "conversations": 0x6C63}
"""First key of the ``pg_try_advisory_xact_lock(EMBED_CLAIM[table], pk)`` by which a
worker claims a row to embed (the users' locks, ``USER_LOCK``, have a key of their own)."""
CLAIM_CANDIDATES = 8
"""A claim looks at this many times its size of the oldest rows without a vector, and
takes those no other worker holds."""


class PostgresVectors(PostgresConnection):
    """Vector search and embedding jobs (``PostgresStore``'s)."""

    exact_search_limit = EXACT_SEARCH_LIMIT
    _many: dict[tuple[str, str], tuple[int, bool, float]]

    def _approximate(self, run: Run, table: str, user_id: str, limit: int) -> bool:
        """Whether this user has too many vectors for an exact search; if so, the
        transaction is set up for an HNSW scan that keeps going until enough rows
        pass the filters (pgvector's iterative scan). The answer is kept
        ``CORPUS_TTL_S``, or until this process writes the user's rows (the count
        read up to ``exact_search_limit`` rows each search: 10,001 at 100,000 turns);
        a stale one only picks the other of two valid searches."""
        limit_rows, now = self.exact_search_limit, time.monotonic()
        known = self._many.get((table, user_id))
        if known is not None and known[0] == limit_rows and known[2] > now:
            many = known[1]
        else:
            many = run(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE user_id = ? AND "
                       "embedding IS NOT NULL LIMIT ?) AS c",
                       [user_id, limit_rows + 1])[0][0] > limit_rows
            if len(self._many) >= 10_000:
                self._many.clear()
            self._many[(table, user_id)] = (limit_rows, many, now + CORPUS_TTL_S)
        if many:
            run("SELECT set_config('hnsw.ef_search', ?, true), "
                "set_config('hnsw.iterative_scan', 'strict_order', true)",
                [str(min(1000, max(40, limit)))])
        return bool(many)

    def vector_search_items(
        self, user_id: str, vector: Vector, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Items by cosine similarity, the filters in the same query: exact while the
        user's vectors are few (a full ranking, as on SQLite), else by HNSW."""
        q = np.asarray(vector, dtype=np.float32)
        dims = int(q.shape[0])
        where, params = item_where_sql(user_id, query)
        source = f"FROM knowledge WHERE {where} AND vector_dims(embedding) = {dims}"
        with self._writing() as run:
            if self._approximate(run, "knowledge", user_id, limit):
                rows = run(
                    f"SELECT id, 1 - d FROM (SELECT id, embedding::vector({dims}) <=> "
                    f"?::vector({dims}) AS d {source} ORDER BY d LIMIT ?) AS s "
                    "WHERE d <> 'NaN' ORDER BY d", [q, *params, limit])
            else:
                rows = run(
                    f"SELECT id, {_COSINE} AS score {source} ORDER BY score DESC, pk LIMIT ?",
                    [q, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def vector_search_turns(
        self, user_id: str, vector: Vector, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        """Turns by cosine plus ``NEIGHBOUR_SMOOTHING`` × the best cosine among the
        ``CONTEXT_TURNS`` turns on each side in the session, as on SQLite. Exact while
        the user's vectors are few; else ``_turns_near``."""
        q = np.asarray(vector, dtype=np.float32)
        dims = int(q.shape[0])
        nearest = max(limit * 4, 64)
        with self._writing() as run:
            if self._approximate(run, "conversations", user_id, nearest):
                return self._turns_near(run, user_id, q, query, nearest, limit)
            where, params = turn_where_sql(user_id, query, prefix="c.")
            around = ", ".join(f"{f}(cos, {k}) OVER w" for f in ("lag", "lead")
                               for k in range(1, CONTEXT_TURNS + 1))
            # The filters' columns ride along instead of a join back to the table: under
            # a generic plan with stale statistics PostgreSQL chose a nested loop that
            # recomputed the window per row (seconds instead of milliseconds).
            keys = "pk, id, user_id, session_id, role, ts"
            rows = run(
                f"WITH scored AS (SELECT {keys}, CASE WHEN vector_dims(embedding) "
                f"= {dims} THEN {_COSINE} END AS cos FROM conversations WHERE user_id = ?), "
                f"c AS (SELECT {keys}, cos + ? * coalesce(greatest({around}), 0) "
                "AS score FROM scored WINDOW w AS (PARTITION BY session_id "
                f"ORDER BY ts, pk)) SELECT c.id, c.score FROM c WHERE c.score IS NOT NULL "
                f"AND {where} ORDER BY c.score DESC, c.pk LIMIT ?",
                [q, user_id, NEIGHBOUR_SMOOTHING, *params, limit])
        return [(r[0], float(r[1])) for r in rows]

    def _turns_near(self, run: Run, user_id: str, q: Vector, query: TurnQuery, nearest: int,
                    limit: int) -> list[tuple[str, float]]:
        """The approximate ranking of ``vector_search_turns``: the HNSW index's
        ``nearest`` turns that pass the filters, each scored with its ``CONTEXT_TURNS``
        neighbours on each side, read by the session index; and those neighbours, each
        scored with the nearest turns beside it, as a turn can rank by its neighbour's
        cosine as well as its own.

        Scoring every turn of the nearest turns' sessions instead read tens of
        thousands of rows when sessions are long (a session holds a channel's whole
        conversation): 0.37 s a search at 100,000 turns in sessions of 100."""
        dims = int(q.shape[0])
        cos = f"CASE WHEN vector_dims(embedding) = {dims} THEN {_COSINE} END"
        filters, params = turn_where_sql(user_id, query)
        where, where_params = turn_where_sql(user_id, query, prefix="c.")
        side = ("(SELECT pk, {cos} AS cos FROM conversations WHERE user_id = ? AND "
                "session_id = h.session_id AND (ts, pk) {op} (h.ts, h.pk) "
                "ORDER BY ts {order}, pk {order} LIMIT {n})")
        sides = " UNION ALL ".join(
            side.format(cos=cos, op=op, order=order, n=CONTEXT_TURNS)
            for op, order in (("<", "DESC"), (">", "ASC")))
        rows = run(
            f"WITH hits AS MATERIALIZED (SELECT pk, session_id, ts, {cos} AS cos FROM "
            f"conversations WHERE {filters} AND vector_dims(embedding) = {dims} "
            f"ORDER BY embedding::vector({dims}) <=> ?::vector({dims}) LIMIT ?), "
            "around AS MATERIALIZED (SELECT h.pk AS hit, h.cos AS hit_cos, n.pk, n.cos "
            f"FROM hits AS h CROSS JOIN LATERAL ({sides}) AS n), "
            "scored AS (SELECT h.pk, h.cos + ? * coalesce(m.best, 0) AS score FROM hits AS h "
            "LEFT JOIN (SELECT hit, max(cos) AS best FROM around GROUP BY hit) AS m "
            "ON m.hit = h.pk UNION ALL "
            "SELECT a.pk, max(a.cos) + ? * max(a.hit_cos) FROM around AS a WHERE a.pk NOT "
            "IN (SELECT pk FROM hits) GROUP BY a.pk) "
            f"SELECT c.id, s.score FROM scored AS s JOIN conversations AS c ON c.pk = s.pk "
            f"WHERE s.score IS NOT NULL AND {where} ORDER BY s.score DESC, c.pk LIMIT ?",
            [q, *params, q, nearest, q, user_id, q, user_id,
             NEIGHBOUR_SMOOTHING, NEIGHBOUR_SMOOTHING, *where_params, limit])
        return [(r[0], float(r[1])) for r in rows]

    # embeddings (maintenance across users) ----------------------------------------
    def pending_embeddings(self, table: Table, limit: int) -> list[tuple[str, str]]:
        """Rows without a vector that no worker has claimed (see
        ``claim_pending_embeddings``)."""
        return [(r[0], r[1]) for r in self._read(_pending_sql(table),
                                                 [limit * CLAIM_CANDIDATES, limit])]

    @contextmanager
    def claim_pending_embeddings(self, table: Table, limit: int
                                 ) -> Iterator[list[tuple[str, str]]]:
        """Claim up to ``limit`` rows without a vector for this worker alone.

        The claim is an advisory lock per row (``EMBED_CLAIM``), held until the block
        ends, so concurrent workers claim disjoint rows; call ``set_embeddings`` inside
        the block to commit the vectors with the claim. A worker that dies or raises
        releases its claim with its transaction. The rows themselves are not locked:
        a write to one (a restatement's refresh, a revision, a forget, recall
        bookkeeping) never waits for the model, as it did under ``FOR UPDATE`` (up to
        460 ms); ``set_embeddings`` writes a vector only where the text is still the
        one embedded.

        Example:
            >>> with store.claim_pending_embeddings("knowledge", 64) as rows:  # doctest: +SKIP
            ...     store.set_embeddings("knowledge", embed(rows), model)
        """
        # RowScope.ALL_USERS again: the wrapper's scope ends before this block runs.
        with self._scope(_EVERY_USER), self._writing() as run:
            yield [(r[0], r[1]) for r in run(_pending_sql(table),
                                             [limit * CLAIM_CANDIDATES, limit])]

    def set_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> int:
        name = embedded_table(table)
        done = 0
        with self._writing() as run:
            self._check_live_model(run, model)
            for row_id, text, vector in sorted(rows, key=lambda row: row[0]):
                done += len(run(
                    f"UPDATE {name} SET embedding = ?, embedding_model = ?, emb_seq = "
                    f"nextval('embedding_seq') WHERE id = ? AND {EMBED_TEXT[name]} = ? "
                    "RETURNING 1", [np.asarray(vector, dtype=np.float32), model, row_id, text]))
        return done

    def _vector_param(self, vector: Vector) -> Any:
        return np.asarray(vector, dtype=np.float32)

    def _emb_seq_sql(self, run: Run, table: str) -> tuple[str, list[Any]]:
        return "nextval('embedding_seq')", []

    def clear_embeddings(self) -> None:
        with self._writing() as run:
            for table in ("knowledge", "conversations"):
                run(f"UPDATE {table} SET embedding = NULL, embedding_model = NULL, "
                    "emb_seq = NULL WHERE embedding IS NOT NULL", [])


def _pending_sql(table: str) -> str:
    """Rows still without a vector, oldest first, skipping those another worker holds
    (``EMBED_CLAIM``). The lock is tried in the outer query, row by row as its LIMIT
    pulls them, so it is taken only on the rows returned; no ORDER BY there, which would
    try every candidate before sorting."""
    return (f"SELECT id, text FROM (SELECT pk, id, {EMBED_TEXT[embedded_table(table)]} "
            f"AS text FROM {table} WHERE embedding IS NULL ORDER BY pk LIMIT ?) AS pending "
            f"WHERE pg_try_advisory_xact_lock({EMBED_CLAIM[table]}, "
            "(pk % 2147483647)::integer) LIMIT ?")

