"""The in-process vector index of the SQLite store: exact cosine search with numpy.

The stored BLOBs are the truth; this index is derived from them. A user's vectors
are loaded on that user's first vector search and topped up incrementally from the
rows whose ``emb_seq`` grew since (including rows written by other processes).

Scoring runs with one BLAS thread. A query's scoring comes right after its
embedding, and on a small machine BLAS worker threads then compete with the
embedder's (both spin while they wait for work): measured on 2 cores, a
single-threaded product scored 8k × 384 in 1.2 ms against 4.4 ms threaded, and
kept the next query embedding at its 8 ms instead of spikes past 100 ms.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

__all__ = ["UserVectors", "VectorIndex"]

Vector = npt.NDArray[np.float32]

APPROXIMATE_ROWS = 20_000
"""Scopes with at least this many rows are ranked in two stages (``shortlist``);
smaller ones exactly, which costs under 3 ms there."""
SHORTLIST = 2_000
"""Rows the sign-bit stage passes on to exact scoring."""
LEAD_ROWS = 500
"""Of a shortlist ranked with neighbours (turns), the best rows whose neighbours are
scored exactly too (``UserVectors.shortlist``)."""

_blas_lock = threading.Lock()
"""Held while BLAS is limited: the limit is process-wide, so two overlapping limits
would restore each other's setting out of order and could leave BLAS at one thread."""


@functools.cache
def _threadpools() -> ThreadpoolController:
    return ThreadpoolController()


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Run the block with numpy's BLAS on one thread, then restore its setting."""
    with _blas_lock, _threadpools().limit(limits=1, user_api="blas"):
        yield


class UserVectors:
    """One user's vectors of one table: a growable matrix plus an id map.

    ``seqs`` holds each row's ``emb_seq`` and ``ghosts`` the numbers of rows seen with
    a number but no vector: together they say exactly which stored rows the block
    accounts for (``vector_file`` checks a file against the store with them).
    ``file_rows`` is how many rows the user's vector file held when this block was
    read from it or wrote it (0: no file yet).
    """

    def __init__(self, dims: int) -> None:
        self.matrix: npt.NDArray[np.float32] = np.zeros((0, dims), dtype=np.float32)
        self.ids: list[str] = []
        self._position: dict[str, int] | None = {}
        self.alive = np.zeros(0, dtype=bool)
        self.seqs = np.zeros(0, dtype=np.int64)
        self.ghosts = np.zeros(0, dtype=np.int64)
        self.count = 0
        self.cursor = 0
        self.file_rows = 0
        self.neighbours: npt.NDArray[np.intp] | None = None
        """Turns' neighbours in their sessions (``SQLiteStore._turn_neighbours``)."""
        self.neighbours_key: tuple[int, int] = (-1, -1)
        self._bits: npt.NDArray[np.uint64] | None = None
        """Sign bits, one row of 64-bit words per word of a vector (words × rows): a
        word of every row is contiguous, so the Hamming sums run over whole rows."""
        self._scratch: npt.NDArray[np.uint64] = np.zeros((0, 0), dtype=np.uint64)
        self._distance: npt.NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)

    @classmethod
    def mapped(cls, matrix: npt.NDArray[np.float32], ids: list[str],
               seqs: npt.NDArray[np.int64], ghosts: npt.NDArray[np.int64],
               cursor: int) -> UserVectors:
        """A block over an existing matrix (a mapped vector file): no copy is made
        until the block grows."""
        block = cls(int(matrix.shape[1]))
        block.matrix, block.ids, block.count, block.cursor = matrix, ids, len(ids), cursor
        block.seqs, block.ghosts = seqs, ghosts
        block.alive = np.ones(len(ids), dtype=bool)
        block._position = None
        block.file_rows = len(ids)
        return block

    @property
    def position(self) -> dict[str, int]:
        """Row of each id (built on first use: a mapped block may never need it)."""
        if self._position is None:
            self._position = {row_id: n for n, row_id in enumerate(self.ids)}
        return self._position

    def upsert(self, ids: Sequence[str], blobs: Sequence[bytes | None],
               seqs: Sequence[int] | None = None) -> None:
        """Add or replace vectors given as float32 BLOBs, each with its ``emb_seq``.
        A missing BLOB (None) records its number as a ghost; rows of another size are
        skipped (they belong to another model)."""
        dims = self.matrix.shape[1]
        numbers = list(seqs) if seqs is not None else [0] * len(ids)
        if missing := [numbers[i] for i, blob in enumerate(blobs) if blob is None]:
            self.ghosts = np.append(self.ghosts, np.asarray(missing, dtype=np.int64))
        keep = [i for i, blob in enumerate(blobs) if blob is not None and len(blob) == dims * 4]
        if not keep:
            return
        vectors = np.frombuffer(b"".join(blobs[i] or b"" for i in keep), dtype=np.float32)
        vectors = vectors.reshape(len(keep), dims)
        position = self.position
        fresh = len({ids[i] for i in keep} - position.keys())
        if self.count + fresh > self.matrix.shape[0]:
            grow = max(64, self.count + fresh - self.matrix.shape[0], self.count)
            self.matrix = np.vstack([self.matrix, np.zeros((grow, dims), dtype=np.float32)])
            self.alive = np.concatenate([self.alive, np.zeros(grow, dtype=bool)])
            self.seqs = np.concatenate([self.seqs, np.zeros(grow, dtype=np.int64)])
        positions = np.empty(len(keep), dtype=np.intp)
        for n, i in enumerate(keep):
            at = position.get(ids[i])
            if at is None:
                at = position[ids[i]] = self.count
                self.ids.append(ids[i])
                self.count += 1
            positions[n] = at
        self.matrix[positions] = vectors
        self.alive[positions] = True
        self.seqs[positions] = np.asarray([numbers[i] for i in keep], dtype=np.int64)
        if self._bits is not None:
            if self._bits.shape[1] < self.count:
                grow = self.matrix.shape[0] - self._bits.shape[1]
                self._bits = np.concatenate(
                    [self._bits, np.zeros((self._bits.shape[0], grow), dtype=np.uint64)],
                    axis=1)
            self._bits[:, positions] = _signs(vectors).T

    def accounted(self) -> tuple[int, int]:
        """Count and sum of the ``emb_seq`` numbers this block accounts for (live rows
        and ghosts): equal to the store's for the same rows when nothing was removed."""
        live = self.seqs[: self.count][self.alive[: self.count]]
        return len(live) + len(self.ghosts), int(live.sum()) + int(self.ghosts.sum())

    def retain(self, stored: npt.NDArray[np.int64]) -> bool:
        """Keep only rows and ghosts whose ``emb_seq`` is among ``stored`` (the store's
        numbers up to ``cursor``); False when the store holds a number up to the cursor
        that this block never saw (another store's file: rebuild)."""
        seen = np.concatenate([self.seqs[: self.count][self.alive[: self.count]], self.ghosts])
        if not np.isin(stored, seen).all():
            return False
        self.alive[: self.count] &= np.isin(self.seqs[: self.count], stored)
        self.ghosts = self.ghosts[np.isin(self.ghosts, stored)]
        self.neighbours = None  # rows may have gone: their sessions' neighbours change
        return True

    def forget(self, row_ids: Iterable[str]) -> None:
        """Stop scoring ``row_ids`` (forgotten or pruned)."""
        position = self.position
        found = [at for at in map(position.get, row_ids) if at is not None]
        if found:
            self.alive[found] = False
            self.neighbours = None  # a session lost a turn: its neighbours change

    def scores(self, query: Vector, smoothing: float = 0.0) -> npt.NDArray[np.float32]:
        """Cosine of every row (-inf for dead rows).

        With ``smoothing`` > 0 and ``neighbours`` set, a row's score is its cosine plus
        ``smoothing`` × the best cosine among its neighbours (positions, -1 for none).
        """
        with _one_blas_thread():
            scores = np.asarray(self.matrix[: self.count] @ query)
        scores[~self.alive[: self.count]] = -np.inf
        return self._smoothed(scores, smoothing)

    def _smoothed(self, scores: npt.NDArray[np.float32], smoothing: float,
                  rows: npt.NDArray[np.intp] | None = None) -> npt.NDArray[np.float32]:
        """``scores`` with ``smoothing`` × each row's best neighbour's score added (for
        ``rows`` only, when given: the others are -inf); unchanged without neighbours.

        One gather per neighbour slot, each a contiguous array: the best of a
        (rows × slots) gather, reduced along its short axis, cost 6 ms at 100,000 rows
        against 0.8."""
        if not smoothing or self.neighbours is None or len(self.neighbours) != self.count:
            return scores
        if not self.neighbours.size:
            return scores + (smoothing * np.where(np.isfinite(scores), scores, 0)).astype(
                np.float32)
        padded = np.append(scores, np.float32(-np.inf))  # position -1: no neighbour
        slots = self.neighbours.T if rows is None else self.neighbours[rows].T
        best = padded[slots[0]]
        for slot in slots[1:]:
            np.maximum(best, padded[slot], out=best)
        lift = smoothing * np.where(np.isfinite(best), best, 0).astype(np.float32)
        if rows is None:
            return scores + lift
        scores[rows] += lift
        return scores

    def shortlist(self, query: Vector, size: int = SHORTLIST, smoothing: float = 0.0
                  ) -> npt.NDArray[np.float32] | None:
        """Scores for a large block in two stages, or None for a small one.

        The first stage compares sign bits (one bit per dimension, Hamming distance
        by ``np.bitwise_count``: 48 bytes a row instead of 1,536); the ``size`` rows
        nearest by it are scored exactly, every other row gets -inf. With
        ``smoothing`` (as ``scores``), the neighbours of the best ``LEAD_ROWS`` of them
        are scored exactly too, as a row can rank by a neighbour's cosine as well as
        its own, and each row scored is smoothed over its neighbours among those
        scored. The caller falls back to ``scores`` when filters leave too few of these.
        Callers hold the index's lock (the block keeps scratch arrays between
        searches).
        """
        if self.count < APPROXIMATE_ROWS or size >= self.count:
            return None
        count = self.count
        if self._bits is None or self._bits.shape[1] < count:
            self._bits = np.ascontiguousarray(_signs(self.matrix[:count]).T)
        if self._scratch.shape[1:] != (count,):
            # Kept between searches: a fresh 4 MB array at 80,000 rows cost more in
            # page faults than the XOR itself.
            self._scratch = np.empty((self._bits.shape[0], count), dtype=np.uint64)
            self._distance = np.empty(count, dtype=np.uint64)
        words, distance = self._scratch, self._distance
        np.bitwise_xor(self._bits[:, :count], _signs(query[None, :]).T, out=words)
        np.bitwise_count(words, out=words)
        np.copyto(distance, words[0])
        for word in words[1:]:  # contiguous rows added one by one (a reduction over the
            np.add(distance, word, out=distance)  # six words' axis is several times slower)
        distance[~self.alive[:count]] = np.iinfo(np.uint64).max
        rows = np.sort(np.argpartition(distance, size)[:size])  # in file order: fewer pages
        scores = np.full(count, -np.inf, dtype=np.float32)
        with _one_blas_thread():
            scores[rows] = self.matrix[rows] @ query
        scores[~self.alive[:count]] = -np.inf
        if not smoothing or self.neighbours is None or len(self.neighbours) != count:
            return scores
        # The neighbours of the best ``LEAD_ROWS`` rows are scored exactly too.
        lead = rows[np.argpartition(-scores[rows], min(LEAD_ROWS, len(rows)) - 1)[:LEAD_ROWS]]
        picked = np.zeros(count + 1, dtype=bool)  # the last: position -1, no neighbour
        picked[self.neighbours[lead]] = True
        picked[rows] = False
        more = np.flatnonzero(picked[:count])
        with _one_blas_thread():
            scores[more] = self.matrix[more] @ query
        scores[more[~self.alive[more]]] = -np.inf
        return self._smoothed(scores, smoothing, np.concatenate([rows, more]))

    @staticmethod
    def best(scores: npt.NDArray[np.float32], start: int, stop: int) -> npt.NDArray[np.intp]:
        """Positions ranked ``start`` to ``stop`` (0-based) by descending score, sorting
        only as much as needed."""
        if stop >= len(scores):
            return np.argsort(-scores, kind="stable")[start:]
        head = np.argpartition(-scores, stop - 1)[:stop]
        return head[np.argsort(-scores[head], kind="stable")][start:]


def _signs(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    """Each row's sign bits, packed into 64-bit words (zero-padded)."""
    packed = np.packbits(np.asarray(vectors) > 0, axis=1)
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


class VectorIndex:
    """Per-user ``UserVectors`` for one table, guarded by a lock."""

    def __init__(self) -> None:
        self.users: dict[str, UserVectors] = {}
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.users.clear()

    def forget(self, user_id: str, row_ids: Iterable[str]) -> None:
        """Stop scoring rows the store no longer holds (the user's file keeps them
        until it is written again; it is checked against the store when mapped)."""
        with self.lock:
            block = self.users.get(user_id)
            if block is not None:
                block.forget(row_ids)
