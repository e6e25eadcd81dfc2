"""The in-process vector index: exact scores, and BLAS left as it was found."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
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


def _unit(rows: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float32]:
    norms: npt.NDArray[np.floating[Any]] = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / norms).astype(np.float32)


def _clustered(rng: np.random.Generator, dims: int
               ) -> tuple[np.ndarray, np.ndarray, UserVectors]:
    """40 centres, and a block of 20,000 random rows then 6,000 rows near the centres
    (queries near a cluster, as real ones are)."""
    centres = _unit(rng.standard_normal((40, dims)))
    clustered = _unit(centres[rng.integers(0, 40, 6_000)]
                      + 0.04 * rng.standard_normal((6_000, dims)))
    corpus = np.concatenate([_unit(rng.standard_normal((20_000, dims))), clustered])
    block = UserVectors(dims)
    block.upsert([f"id{i}" for i in range(len(corpus))], [v.tobytes() for v in corpus],
                 list(range(1, len(corpus) + 1)))
    return centres, corpus, block


def test_the_two_stage_ranking_finds_the_exact_top_k() -> None:
    """Sign bits shortlist, exact rescoring: the same top 10 as the exact scan, on a
    corpus of random rows plus clusters (queries near a cluster, as real ones are)."""
    rng = np.random.default_rng(42)
    dims = 384
    centres, _, block = _clustered(rng, dims)
    block.alive[20_005] = False
    checked = 0
    for n in range(30):
        query = _unit(centres[n % 40][None, :] + 0.03 * rng.standard_normal((1, dims)))[0]
        shortlisted = block.shortlist(query)
        assert shortlisted is not None
        exact = block.scores(query)
        top = block.best(exact, 0, 10)
        assert list(block.best(shortlisted, 0, 10)) == list(top)
        np.testing.assert_allclose(shortlisted[top], exact[top], rtol=1e-6)
        assert shortlisted[20_005] == -np.inf
        checked += 1
    assert checked == 30


def test_turns_ranked_in_two_stages_keep_their_neighbours_lift() -> None:
    """Turns are scored with their neighbours (cosine + 0.5 × the best neighbour's). In
    two stages the shortlist's best rows have their neighbours scored exactly too, so
    the top 10 is the exact scan's, scores included, and a row whose own vector is far
    from the query but whose neighbour is the query's nearest still ranks by that."""
    rng = np.random.default_rng(7)
    dims = 384
    centres, corpus, block = _clustered(rng, dims)
    count = len(corpus)
    # Sessions of ten rows in file order: up to two neighbours on each side.
    neighbours = np.full((count, 4), -1, dtype=np.intp)
    for row in range(count):
        around = [r for r in range(row - 2, row + 3)
                  if r != row and r // 10 == row // 10]
        neighbours[row, : len(around)] = around
    block.neighbours = neighbours
    for n in range(30):
        query = _unit(centres[n % 40][None, :] + 0.03 * rng.standard_normal((1, dims)))[0]
        shortlisted = block.shortlist(query, smoothing=0.5)
        assert shortlisted is not None
        exact = block.scores(query, 0.5)
        top = block.best(exact, 0, 10)
        assert list(block.best(shortlisted, 0, 10)) == list(top)
        np.testing.assert_allclose(shortlisted[top], exact[top], rtol=1e-5)
    # A row beside the query's nearest row ranks through it, though the sign bits
    # alone do not shortlist it.
    query = corpus[103]
    beside = 101  # same session (100–109), its own cosine near 0
    assert abs(float(corpus[beside] @ query)) < 0.2
    alone = block.shortlist(query)
    assert alone is not None and alone[beside] == -np.inf
    shortlisted = block.shortlist(query, smoothing=0.5)
    exact = block.scores(query, 0.5)
    assert shortlisted is not None and shortlisted[beside] == pytest.approx(exact[beside])
    assert beside in set(block.best(shortlisted, 0, 5))


def test_a_small_block_is_ranked_exactly() -> None:
    rng = np.random.default_rng(1)
    block = UserVectors(64)
    block.upsert([str(i) for i in range(5_000)],
                 [v.tobytes() for v in rng.standard_normal((5_000, 64)).astype(np.float32)])
    assert block.shortlist(rng.standard_normal(64).astype(np.float32)) is None


def test_sign_bits_follow_rows_replaced_after_the_first_shortlist() -> None:
    rng = np.random.default_rng(9)
    dims = 128
    corpus = _unit(rng.standard_normal((25_000, dims)))
    block = UserVectors(dims)
    block.upsert([f"id{i}" for i in range(25_000)], [v.tobytes() for v in corpus])
    block.shortlist(corpus[0])  # builds the bits
    target = _unit(rng.standard_normal((1, dims)))[0]
    block.upsert(["id7", "new"], [target.tobytes(), (-target).tobytes()])
    scores = block.shortlist(target)
    assert scores is not None
    # Without its new sign bits, id7 (random bits) would not reach the shortlist.
    assert block.ids[int(block.best(scores, 0, 1)[0])] == "id7"
    assert block.count == 25_001 and scores[block.position["new"]] == -np.inf


def test_rows_added_after_the_first_shortlist_get_sign_bits() -> None:
    rng = np.random.default_rng(11)
    dims = 384
    corpus = _unit(rng.standard_normal((21_000, dims)))
    block = UserVectors(dims)
    block.upsert([f"id{i}" for i in range(21_000)], [v.tobytes() for v in corpus])
    assert block.shortlist(corpus[3]) is not None  # builds the bits and scratch arrays
    fresh = _unit(rng.standard_normal((3, dims)))
    block.upsert(["a", "b", "c"], [v.tobytes() for v in fresh])
    for name, vector in zip("abc", fresh, strict=True):
        scores = block.shortlist(vector)
        assert scores is not None and len(scores) == 21_003
        assert block.ids[int(block.best(scores, 0, 1)[0])] == name
    # Earlier rows still rank as before the block grew.
    scores = block.shortlist(corpus[3])
    assert scores is not None and block.ids[int(block.best(scores, 0, 1)[0])] == "id3"
