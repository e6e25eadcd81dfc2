"""The in-process vector index: exact scores, and BLAS left as it was found."""

from __future__ import annotations

import threading

import numpy as np
from threadpoolctl import threadpool_info

from ledgermem.store.vector_index import UserVectors


def blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_scores_are_exact_cosines_and_dead_rows_never_score() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    block = UserVectors(16)
    block.upsert([f"id{i}" for i in range(300)], [v.tobytes() for v in vectors])
    block.alive[5] = False
    query = vectors[3]
    scores = block.scores(query)
    expected = vectors @ query
    np.testing.assert_allclose(np.delete(scores, 5), np.delete(expected, 5), rtol=1e-5)
    assert scores[5] == -np.inf
    assert block.ids[int(block.best(scores, 0, 1)[0])] == "id3"


def test_concurrent_scoring_restores_the_blas_thread_count() -> None:
    before = blas_threads()
    block = UserVectors(64)
    rng = np.random.default_rng(1)
    block.upsert([str(i) for i in range(2_000)],
                 [v.tobytes() for v in rng.standard_normal((2_000, 64)).astype(np.float32)])
    query = rng.standard_normal(64).astype(np.float32)
    expected = block.scores(query)

    def score() -> None:
        for _ in range(50):
            np.testing.assert_allclose(block.scores(query), expected, rtol=1e-5)

    threads = [threading.Thread(target=score) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert blas_threads() == before
