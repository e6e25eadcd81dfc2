"""Scale benchmark at a tiny size: the result's shape, and that the file really holds
the layout it claims (checked through the API and under it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ledgermem import InvalidInput, Memory
from ledgermem.benchmarks.scale import MAIN_USER, Corpus, run_scale
from ledgermem.testing import HashEmbedder
from tests.support import rows


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("scale")
    result = run_scale((500,), users=7, queries=10, db_dir=folder, quiet=True,
                       query_embedder=HashEmbedder(dimensions=32), api_items=40)
    return result, folder / "scale-500.db"


def test_result_shape(scaled: tuple[dict[str, Any], Path]) -> None:
    result, _ = scaled
    assert result["benchmark"] == "scale"
    assert {"cpus", "platform", "python", "sqlite"} <= set(result["machine"])
    assert (result["embedder"], result["dimensions"], result["queries"]) == ("hash:32", 32, 10)
    [run] = result["runs"]
    assert (run["items"], run["users"], run["scope_items"], run["api_items"],
            run["deduped"]) == (500, 8, 400, 40, 0)
    for key in ("add_per_s", "add_per_s_full", "bulk_load_s", "first_search_ms",
                "peak_rss_mib", "file_mib", "open_ms"):
        assert run[key] > 0, key
    assert set(run["latency_ms"]) == {"hybrid", "keyword", "vector", "query_embedding"}
    assert set(run["latency_ms_no_touch"]) == {"hybrid", "keyword", "vector"}
    for latency in [*run["latency_ms"].values(), *run["latency_ms_no_touch"].values()]:
        assert 0 < latency["p50"] <= latency["p95"]


def test_the_file_holds_the_layout(scaled: tuple[dict[str, Any], Path]) -> None:
    _, path = scaled
    # Opening with the query embedder passes the model check the benchmark set up.
    with Memory.open(path, embedder=HashEmbedder(dimensions=32)) as memory:
        stats = memory.for_user(MAIN_USER).stats()
        assert (stats["items"], stats["items_unembedded"]) == (400, 0)
        others = [u for u in memory.store.user_ids() if u != MAIN_USER]
        assert len(others) == 7
        assert sum(memory.for_user(u).stats()["items"] for u in others) == 100
        assert memory.for_user(MAIN_USER).search("anything at all", top_k=3, touch=False)
    # 40 + 40 items came through remember, the rest as memory.added events written
    # directly; every item has a ledger event and a 32-float vector. The timed searches
    # ran as a user's do by default: their recall bookkeeping is in the ledger too.
    kinds = dict(rows(path, "SELECT kind, count(*) FROM events GROUP BY kind"))
    assert kinds.keys() == {"memory.added", "memory.recalled"}
    assert kinds["memory.added"] == 500 and kinds["memory.recalled"] >= 1
    assert rows(path, "SELECT count(*), min(length(embedding)), max(length(embedding)) "
                      "FROM knowledge") == [(500, 128, 128)]
    assert rows(path, "SELECT count(*) FROM knowledge_fts WHERE knowledge_fts MATCH ?",
                [_common_word(path)])[0][0] > 0


def test_every_vector_is_the_benchmarks_own_and_none_was_left_to_the_model(
        scaled: tuple[dict[str, Any], Path]) -> None:
    # Rows the benchmark forgot would be embedded by the worker while searches are timed.
    _, path = scaled
    found = rows(path, "SELECT content, embedding FROM knowledge")
    stored = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in found])
    model = HashEmbedder(dimensions=32).embed_batch([text for text, _ in found])
    assert np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
    assert not np.isclose(stored, model, atol=1e-6).all(axis=1).any()


def _common_word(path: Path) -> str:
    text = rows(path, "SELECT content FROM knowledge LIMIT 1")[0][0]
    return str(text.rstrip(".").lower().split()[0])


def test_corpus_is_seeded_and_sentences_have_distinct_words() -> None:
    one = Corpus(np.random.default_rng(3), words=300)
    two = Corpus(np.random.default_rng(3), words=300)
    assert one.words == two.words and len(set(one.words)) == 300
    texts = one.sentences(np.random.default_rng(1), 50)
    assert texts == two.sentences(np.random.default_rng(1), 50)
    for text in texts:
        words = text.rstrip(".").lower().split()
        assert 8 <= len(words) <= 16 and len(set(words)) == len(words)


def test_sizes_too_small_are_refused() -> None:
    with pytest.raises(InvalidInput):
        run_scale((5,), quiet=True, query_embedder="hash")


def test_scale_runs_on_postgres_in_a_schema_it_drops(pg_url: str) -> None:
    result = run_scale((300,), users=3, queries=5, db=pg_url, quiet=True,
                       query_embedder=HashEmbedder(dimensions=32), api_items=20)
    [run] = result["runs"]
    assert result["backend"] == "postgresql"
    assert (run["items"], run["scope_items"], run["deduped"]) == (300, 240, 0)
    assert run["file_mib"] > 0 and set(run["latency_ms"]) >= {"hybrid", "keyword", "vector"}
    assert rows(pg_url, "SELECT nspname FROM pg_namespace WHERE nspname LIKE "
                        "'ledgermem_scale_%'") == []
    with pytest.raises(InvalidInput, match="postgresql"):
        run_scale((300,), db="/tmp/not-a-url.db", quiet=True, query_embedder="hash")
