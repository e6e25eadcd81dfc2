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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

__all__ = ["UserVectors", "VectorIndex"]

Vector = npt.NDArray[np.float32]

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
    """One user's vectors of one table: a growable matrix plus an id map."""

    def __init__(self, dims: int) -> None:
        self.matrix = np.zeros((0, dims), dtype=np.float32)
        self.ids: list[str] = []
        self.position: dict[str, int] = {}
        self.alive = np.zeros(0, dtype=bool)
        self.count = 0
        self.cursor = 0
        self.neighbours: npt.NDArray[np.intp] | None = None
        self.neighbours_key: tuple[int, int] = (-1, -1)

    def upsert(self, ids: Sequence[str], blobs: Sequence[bytes]) -> None:
        """Add or replace vectors given as float32 BLOBs (rows of another size are
        skipped: they belong to another model)."""
        dims = self.matrix.shape[1]
        keep = [i for i, blob in enumerate(blobs) if len(blob) == dims * 4]
        if not keep:
            return
        vectors = np.frombuffer(b"".join(blobs[i] for i in keep), dtype=np.float32)
        vectors = vectors.reshape(len(keep), dims)
        fresh = len({ids[i] for i in keep} - self.position.keys())
        if self.count + fresh > self.matrix.shape[0]:
            grow = max(64, self.count + fresh - self.matrix.shape[0], self.count)
            self.matrix = np.vstack([self.matrix, np.zeros((grow, dims), dtype=np.float32)])
            self.alive = np.concatenate([self.alive, np.zeros(grow, dtype=bool)])
        positions = np.empty(len(keep), dtype=np.intp)
        for n, i in enumerate(keep):
            at = self.position.get(ids[i])
            if at is None:
                at = self.position[ids[i]] = self.count
                self.ids.append(ids[i])
                self.count += 1
            positions[n] = at
        self.matrix[positions] = vectors
        self.alive[positions] = True

    def scores(self, query: Vector, smoothing: float = 0.0) -> npt.NDArray[np.float32]:
        """Cosine of every row (-inf for dead rows).

        With ``smoothing`` > 0 and ``neighbours`` set, a row's score is its cosine plus
        ``smoothing`` × the best cosine among its neighbours (positions, -1 for none).
        """
        with _one_blas_thread():
            scores = self.matrix[: self.count] @ query
        scores[~self.alive[: self.count]] = -np.inf
        if smoothing and self.neighbours is not None and len(self.neighbours) == self.count:
            padded = np.append(scores, np.float32(-np.inf))
            best = padded[self.neighbours].max(axis=1) if self.neighbours.size else padded[:-1]
            scores = scores + smoothing * np.where(np.isfinite(best), best, 0).astype(np.float32)
        return scores

    @staticmethod
    def best(scores: npt.NDArray[np.float32], start: int, stop: int) -> npt.NDArray[np.intp]:
        """Positions ranked ``start`` to ``stop`` (0-based) by descending score, sorting
        only as much as needed."""
        if stop >= len(scores):
            return np.argsort(-scores, kind="stable")[start:]
        head = np.argpartition(-scores, stop - 1)[:stop]
        return head[np.argsort(-scores[head], kind="stable")][start:]


class VectorIndex:
    """Per-user ``UserVectors`` for one table, guarded by a lock."""

    def __init__(self) -> None:
        self.users: dict[str, UserVectors] = {}
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.users.clear()
