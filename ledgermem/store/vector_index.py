"""The in-process vector index of the SQLite store: exact cosine search with numpy.

The stored BLOBs are the truth; this index is derived from them. A user's vectors
are loaded on that user's first vector search and topped up incrementally from the
rows whose ``emb_seq`` grew since (including rows written by other processes).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = ["UserVectors", "VectorIndex"]

Vector = npt.NDArray[np.float32]


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

    def upsert(self, rows: Iterable[tuple[str, Vector]]) -> None:
        for row_id, vector in rows:
            if vector.shape[0] != self.matrix.shape[1]:
                continue
            at = self.position.get(row_id)
            if at is None:
                if self.count == self.matrix.shape[0]:
                    grow = max(64, self.count)
                    self.matrix = np.vstack([self.matrix, np.zeros(
                        (grow, self.matrix.shape[1]), dtype=np.float32)])
                    self.alive = np.concatenate([self.alive, np.zeros(grow, dtype=bool)])
                at = self.count
                self.count += 1
                self.ids.append(row_id)
                self.position[row_id] = at
            self.matrix[at] = vector
            self.alive[at] = True

    def discard(self, row_ids: Iterable[str]) -> None:
        for row_id in row_ids:
            at = self.position.get(row_id)
            if at is not None:
                self.alive[at] = False

    def ranked(self, query: Vector, smoothing: float = 0.0
               ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """Positions of live rows by descending score, and all scores.

        With ``smoothing`` > 0 and ``neighbours`` set, a row's score is its cosine plus
        ``smoothing`` × the best cosine among its neighbours (positions, -1 for none).
        """
        scores = self.matrix[: self.count] @ query
        scores[~self.alive[: self.count]] = -np.inf
        if smoothing and self.neighbours is not None and len(self.neighbours) == self.count:
            padded = np.append(scores, np.float32(-np.inf))
            best = padded[self.neighbours].max(axis=1) if self.neighbours.size else padded[:-1]
            scores = scores + smoothing * np.where(np.isfinite(best), best, 0).astype(np.float32)
        return np.argsort(-scores, kind="stable"), scores

    def top(self, query: Vector, k: int) -> list[tuple[str, float]]:
        """The ``k`` best live rows as (id, cosine)."""
        if self.count == 0:
            return []
        scores = self.matrix[: self.count] @ query
        scores[~self.alive[: self.count]] = -np.inf
        k = min(k, self.count)
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.ids[i], float(scores[i])) for i in best if np.isfinite(scores[i])]


class VectorIndex:
    """Per-user ``UserVectors`` for one table, guarded by a lock."""

    def __init__(self) -> None:
        self.users: dict[str, UserVectors] = {}
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.users.clear()
