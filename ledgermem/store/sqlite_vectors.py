"""SQLite's vectors: embeddings stored as BLOBs, searched by an in-process index of
each user's vectors (``vector_index``) that a vector file beside the database
(``vector_file``) lets a new process map instead of reading every BLOB.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..types import ItemQuery
from . import vector_file
from .base import Table, TurnQuery, Vector, iter_chunks
from .sql import SQLStore
from .sql_backend import Run
from .sql_rows import (
    CONTEXT_TURNS,
    EMBED_TEXT,
    NEIGHBOUR_SMOOTHING,
    embedded_table,
    item_where_sql,
    marks,
    turn_where_sql,
)
from .vector_index import UserVectors, VectorIndex

FEW_PASS_SHARE = 0.1
FEW_PASS_ROWS = 10_000
"""A vector search whose first slice of best rows had fewer than ``FEW_PASS_SHARE`` of
them pass its filters reads every row that passes (when at most ``FEW_PASS_ROWS`` do)
and ranks those, instead of checking ever larger slices (``SQLiteStore._filtered``)."""


class SQLiteVectors(SQLStore):
    """Embeddings and vector search (``SQLiteStore``'s)."""

    path: Path
    _indexes: dict[str, VectorIndex]

    def pending_embeddings(self, table: Table, limit: int) -> list[tuple[str, str]]:
        rows = self._read(
            f"SELECT id, {EMBED_TEXT[table]} FROM {embedded_table(table)} WHERE embedding IS NULL "
            "ORDER BY pk LIMIT ?", [limit])
        return [(r[0], r[1]) for r in rows]

    @contextmanager
    def claim_pending_embeddings(self, table: Table, limit: int
                                 ) -> Iterator[list[tuple[str, str]]]:
        # No lock: holding SQLite's write lock while a model runs would stall every
        # writer. Two workers may embed the same row; set_embeddings is idempotent.
        yield self.pending_embeddings(table, limit)

    def set_embeddings(
        self, table: Table, rows: Sequence[tuple[str, str, Vector]], model: str
    ) -> int:
        name = embedded_table(table)
        done = 0
        with self._writing() as run:
            self._check_live_model(run, model)
            seq = self._next_emb_seq(run, len(rows))
            for row_id, text, vector in rows:
                seq += 1
                blob = np.asarray(vector, dtype=np.float32).tobytes()
                done += len(run(f"UPDATE {name} SET embedding = ?, embedding_model = ?, "
                                f"emb_seq = ? WHERE id = ? AND {EMBED_TEXT[name]} = ? RETURNING 1",
                                [blob, model, seq, row_id, text]))
        return done

    def _next_emb_seq(self, run: Run, count: int) -> int:
        """Reserve ``count`` embedding sequence numbers; returns the one before the first.

        The counter only grows (even when vectors are cleared), so another process's
        index, which reads vectors past the last number it saw, never misses any.
        """
        row = run("SELECT value FROM meta WHERE key = 'emb_seq'", [])
        start = int(row[0][0]) if row else int(run(
            "SELECT max(coalesce((SELECT max(emb_seq) FROM knowledge), 0), "
            "coalesce((SELECT max(emb_seq) FROM conversations), 0))", [])[0][0])
        run("INSERT INTO meta (key, value) VALUES ('emb_seq', ?) ON CONFLICT (key) DO UPDATE "
            "SET value = excluded.value", [str(start + count)])
        return start

    vector_file_rows: int | None = 10_000
    """Scopes with at least this many vectors keep them in a vector file beside the
    database (``vector_file``), so a new process maps them instead of reading every
    BLOB; smaller ones load in well under a second. None: never."""

    def _vectors(self, table: Table, user_id: str, dims: int) -> UserVectors:
        """This user's index, topped up with vectors written since it was last read."""
        index = self._indexes[table]
        with index.lock:
            block = index.users.get(user_id)
            if block is None or block.matrix.shape[1] != dims:
                block = index.users[user_id] = self._open_vectors(table, user_id, dims)
            rows = self._read(
                f"SELECT emb_seq, id, embedding FROM {embedded_table(table)} WHERE user_id = ? AND "
                "emb_seq > ? ORDER BY emb_seq", [user_id, block.cursor])
            if rows:
                block.upsert([r[1] for r in rows], [r[2] for r in rows], [r[0] for r in rows])
                block.cursor = int(rows[-1][0])
            self._persist_vectors(table, user_id, block)
            return block

    def _stored_seqs(self, table: Table, user_id: str, cursor: int, *, aggregate: bool
                     ) -> list[tuple[Any, ...]]:
        """The user's ``emb_seq`` numbers up to ``cursor`` (count and sum when
        ``aggregate``), from the ``(user_id, emb_seq)`` index alone: no BLOB is read."""
        what = "count(*), coalesce(sum(emb_seq), 0)" if aggregate else "emb_seq"
        return self._read(f"SELECT {what} FROM {embedded_table(table)} WHERE user_id = ? AND "
                          "emb_seq IS NOT NULL AND emb_seq <= ?", [user_id, cursor])

    def _open_vectors(self, table: Table, user_id: str, dims: int) -> UserVectors:
        """The user's vector file when it matches the store, else an empty block (which
        the caller fills from the BLOBs).

        The check is exact and reads no BLOB: the file must be of the store's model and
        dimension, written at or below the store's ``emb_seq`` counter (a store rolled
        back to an older copy is not the one it was written for), and the numbers the
        store holds up to the file's cursor must be ones the file accounts for; rows
        the store no longer holds (forgotten, pruned, re-embedded) stop scoring.
        Numbers are unique and only grow, so the store's numbers up to the cursor can
        only lose members: count and sum agreeing means the sets are equal.
        """
        if self.vector_file_rows is None:
            return UserVectors(dims)
        path = vector_file.file_for(vector_file.vectors_dir(self.path), table, user_id)
        loaded = vector_file.read(path, table)
        if loaded is None or loaded.dims != dims:
            return UserVectors(dims)
        if (loaded.counter > int(self.get_meta("emb_seq") or 0)
                or loaded.model != (self.get_meta("embedding_model") or "")):
            return UserVectors(dims)
        block = UserVectors.mapped(loaded.matrix, loaded.ids, loaded.seqs, loaded.ghosts,
                                   loaded.cursor)
        count, total = self._stored_seqs(table, user_id, block.cursor, aggregate=True)[0]
        if (int(count), int(total)) != block.accounted():
            stored = np.asarray([r[0] for r in self._stored_seqs(
                table, user_id, block.cursor, aggregate=False)], dtype=np.int64)
            if not block.retain(stored):
                return UserVectors(dims)
            block.file_rows = 0  # holds rows the store no longer has: write it again
        return block

    def _persist_vectors(self, table: Table, user_id: str, block: UserVectors) -> None:
        """Write the user's vector file when the scope is large enough and the file is
        missing, holds removed rows or misses many rows. Only rows the store still
        holds are written, and a file that a concurrent forget made stale is removed."""
        # Runs on every vector search: the checks that need no pass over the rows first.
        if self.vector_file_rows is None or block.count < self.vector_file_rows or (
                block.file_rows and block.count - block.file_rows
                < max(5_000, block.file_rows // 10)):
            return
        if int(block.alive[: block.count].sum()) < self.vector_file_rows:
            return
        stored = np.asarray([r[0] for r in self._stored_seqs(
            table, user_id, block.cursor, aggregate=False)], dtype=np.int64)
        if not block.retain(stored):
            block.file_rows = block.count  # missed rows (never in one store): no file
            return
        path = vector_file.file_for(vector_file.vectors_dir(self.path), table, user_id)
        if not vector_file.write(
                path, table, model=self.get_meta("embedding_model") or "",
                matrix=block.matrix[: block.count], keep=block.alive[: block.count],
                seqs=block.seqs[: block.count], ghosts=block.ghosts, ids=block.ids,
                cursor=block.cursor, counter=int(self.get_meta("emb_seq") or 0)):
            block.file_rows = block.count  # read-only location: do not try on every search
            return
        # A forget that committed after the numbers above were read may have removed
        # the file before it was renamed into place: then this file holds that row.
        count, total = self._stored_seqs(table, user_id, block.cursor, aggregate=True)[0]
        if (int(count), int(total)) != block.accounted():
            path.unlink(missing_ok=True)
        block.file_rows = block.count

    def _forget_vectors(self, user_id: str, row_id: str | None = None) -> None:
        """After a forget: remove the user's vector files, and stop scoring the row
        (``row_id``) or drop the user's blocks (the whole user)."""
        for table, index in self._indexes.items():
            vector_file.discard(vector_file.vectors_dir(self.path), table, user_id)
            with index.lock:
                block = index.users.get(user_id)
                if block is None:
                    continue
                if row_id is None:
                    del index.users[user_id]
                else:
                    block.forget([row_id])
                    block.file_rows = 0

    def _discard_vector_files(self) -> None:
        """Every vector file is stale (vectors cleared or another model promoted)."""
        vector_file.discard_all(vector_file.vectors_dir(self.path))

    def _turn_neighbours(self, user_id: str, block: UserVectors) -> None:
        """Give ``block`` each turn's neighbours in its session (positions, -1 for none);
        recomputed only when the block changed, and then only for the sessions of the
        rows it gained since (a turn added to a conversation changes its session's
        neighbours, no other's). A block that lost rows (``forget``, ``retain``) has
        none, and gets every session's anew."""
        key = (block.count, block.cursor)
        known = block.neighbours
        if known is not None and block.neighbours_key == key:
            return
        if known is None or len(known) > block.count or (
                block.count - len(known) > block.count // 4):
            rows = self._read("SELECT id, session_id FROM conversations WHERE user_id = ? "
                              "ORDER BY session_id, ts, pk", [user_id])
            neighbours = np.full((block.count, 2 * CONTEXT_TURNS), -1, dtype=np.intp)
        else:
            sessions = sorted({row[0] for ids in iter_chunks(block.ids[len(known):block.count])
                               for row in self._read(
                                   "SELECT DISTINCT session_id FROM conversations WHERE "
                                   f"+user_id = ? AND id IN ({', '.join('?' * len(ids))})",
                                   [user_id, *ids])})
            rows = [row for part in iter_chunks(sessions) for row in self._read(
                "SELECT id, session_id FROM conversations WHERE user_id = ? AND session_id "
                f"IN ({', '.join('?' * len(part))}) ORDER BY session_id, ts, pk",
                [user_id, *part])]
            neighbours = np.concatenate([known, np.full(
                (block.count - len(known), known.shape[1]), -1, dtype=np.intp)])
        # The turns read, in session order: each one's position in the block (-1: no
        # vector) and its session's number; then, per offset, the turn that far away in
        # the same session (whole arrays: a loop per turn took 0.5 s at 100,000).
        position = block.position
        at = np.fromiter((position.get(row[0], -1) for row in rows), dtype=np.intp,
                         count=len(rows))
        session = np.cumsum(np.fromiter(
            (n == 0 or row[1] != rows[n - 1][1] for n, row in enumerate(rows)), dtype=bool,
            count=len(rows)))
        here = np.flatnonzero(at >= 0)
        neighbours[at[here]] = -1
        offsets = [o for o in range(-CONTEXT_TURNS, CONTEXT_TURNS + 1) if o]
        for slot, offset in enumerate(offsets):
            there = here + offset
            inside = (there >= 0) & (there < len(rows))
            inside[inside] = session[there[inside]] == session[here[inside]]
            neighbours[at[here[inside]], slot] = at[there[inside]]
        block.neighbours, block.neighbours_key = neighbours, key

    def _vector_search(self, table: Table, user_id: str, vector: Vector, where: str,
                       params: list[Any], limit: int) -> list[tuple[str, float]]:
        """Cosine ranking of the user's vectors (exact, or in two stages for a large
        scope: ``UserVectors.shortlist``), then the SQL filters on growing slices of
        that ranking until ``limit`` rows pass (or every row was tried).

        Turns are scored with their neighbours (see ``NEIGHBOUR_SMOOTHING``)."""
        query = np.asarray(vector, dtype=np.float32)
        block = self._vectors(table, user_id, query.shape[0])
        if block.count == 0:
            return []
        smoothing = NEIGHBOUR_SMOOTHING if table == "conversations" else 0.0
        with self._indexes[table].lock:
            if smoothing:
                self._turn_neighbours(user_id, block)
            scores = block.shortlist(query, smoothing=smoothing)
            exact = scores is None
            if scores is None:
                scores = block.scores(query, smoothing)
        found = self._filtered(table, block, scores, where, params, limit)
        if len(found) < limit and not exact:  # filters left too few of the shortlist
            with self._indexes[table].lock:
                scores = block.scores(query, smoothing)
            found = self._filtered(table, block, scores, where, params, limit)
        return found

    def _filtered(self, table: Table, block: UserVectors, scores: Any, where: str,
                  params: list[Any], limit: int) -> list[tuple[str, float]]:
        """The best-scored rows that pass the SQL filters, reading growing slices of
        the ranking until ``limit`` rows pass (or every scored row was tried); when few
        of the first slice pass (``FEW_PASS_SHARE``), those of the rows that pass.

        Rows are looked up by the ``emb_seq`` of the vector scored, through the
        ``(user_id, emb_seq)`` index: only a row that still holds that vector passes
        (one deleted, or rewritten and not embedded again yet, by this process or
        another, does not: as on PostgreSQL, whose search reads the stored vector).
        Unfiltered, the index alone answers; by id, each row cost a probe of the id
        index and one of the table (0.38 → 0.15 ms for 75 rows of a LoCoMo search)."""
        found: list[tuple[str, float]] = []
        # Most rows pass (the filters are the caller's; dead rows never score): a first
        # slice of 1.5 × limit, growing 4× while too few pass. Checking 4 × limit ids
        # first cost 1.6 ms of a 100,000-item search.
        start, step = 0, max(limit + limit // 2, 32)
        while len(found) < limit and start < block.count:
            best = block.best(scores, start, start + step)
            best = best[np.isfinite(scores[best])]
            if not len(best):
                break
            chunk, seqs = best.tolist(), block.seqs[best].tolist()
            keep = {r[0] for r in self._read(
                f"SELECT emb_seq FROM {table} INDEXED BY {table}_emb WHERE {where} "
                f"AND emb_seq IN ({marks(len(seqs))})", [*params, *seqs])}
            ids = block.ids
            found += [(ids[i], score) for i, seq, score
                      in zip(chunk, seqs, scores[best].tolist(), strict=True) if seq in keep]
            if (not start and step < block.count
                    and len(found) < min(limit, FEW_PASS_SHARE * len(chunk))):
                # Few rows pass: slices would check most of the scope to find them
                # (3.6 s at 100,000 items for a filter no row passes). ``+emb_seq``:
                # the filters' index, not a walk of the user's rows by vector number.
                passing = self._read(f"SELECT emb_seq FROM {table} WHERE {where} AND "
                                     f"+emb_seq IS NOT NULL LIMIT {FEW_PASS_ROWS + 1}", params)
                if len(passing) <= FEW_PASS_ROWS:
                    return _best_of(block, scores, [r[0] for r in passing], limit)
            start += step
            step *= 4
        return found[:limit]

    def vector_search_items(
        self, user_id: str, vector: Vector, query: ItemQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = item_where_sql(user_id, query)
        return self._vector_search("knowledge", user_id, vector, where, params, limit)

    def vector_search_turns(
        self, user_id: str, vector: Vector, query: TurnQuery, limit: int
    ) -> list[tuple[str, float]]:
        where, params = turn_where_sql(user_id, query)
        return self._vector_search("conversations", user_id, vector, where, params, limit)

    def _vector_param(self, vector: Vector) -> Any:
        return np.asarray(vector, dtype=np.float32).tobytes()

    def promote_staged(self, model: str, dimensions: int) -> bool:
        if not super().promote_staged(model, dimensions):
            return False
        for index in self._indexes.values():
            index.reset()
        self._discard_vector_files()
        return True

    def _emb_seq_sql(self, run: Run, table: str) -> tuple[str, list[Any]]:
        top = int(run(f"SELECT coalesce(max(pk), 0) FROM {table}", [])[0][0])
        return f"? + {table}.pk", [self._next_emb_seq(run, top)]

    def clear_embeddings(self) -> None:
        with self._writing() as run:
            for table in ("knowledge", "conversations"):
                run(f"UPDATE {table} SET embedding = NULL, embedding_model = NULL, "
                    "emb_seq = NULL", [])
        for index in self._indexes.values():
            index.reset()
        self._discard_vector_files()

    def _embedding_cache(self, run: Run) -> list[tuple[str, str, bytes, str, int]]:
        return [
            (table, *row)
            for table in ("knowledge", "conversations")
            for row in run(f"SELECT id, embedding, embedding_model, emb_seq FROM {table} "
                           "WHERE embedding IS NOT NULL", [])
        ]

    def _restore_embeddings(self, run: Run, kept: Any) -> None:
        """Vectors go back on the rows they were made for (the text is the same: any
        later content change had already cleared them)."""
        for table, row_id, blob, model, seq in kept:
            run(f"UPDATE {table} SET embedding = ?, embedding_model = ?, emb_seq = ? "
                "WHERE id = ?", [blob, model, seq, row_id])


def _best_of(block: UserVectors, scores: Any, seqs: Sequence[int], limit: int
             ) -> list[tuple[str, float]]:
    """The ``limit`` best-scored rows of ``block`` among those holding the vectors
    numbered ``seqs``, as (id, score), best first."""
    rows = np.flatnonzero(np.isin(block.seqs[: block.count], np.asarray(seqs, dtype=np.int64))
                          & np.isfinite(scores[: block.count]))
    rows = rows[np.argsort(-scores[rows], kind="stable")][:limit]
    return [(block.ids[i], float(scores[i])) for i in rows]
