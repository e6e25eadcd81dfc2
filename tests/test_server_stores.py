"""What several server processes on one PostgreSQL database do to the store: each
keeps its own cached BM25 corpus statistics (``CORPUS_TTL_S``), which another
process's writes do not drop. Found by the server load benchmark (``bench/server_load``):
a user's corpus that grew through another process made a term's document count larger
than the cached row count, and the idf's logarithm of a negative number failed the
search (503)."""

from __future__ import annotations

from ledgermem import Memory


def test_a_search_survives_corpus_statistics_another_process_made_stale(
        pg_url: str) -> None:
    with Memory.open(pg_url, embedder=None) as here, \
            Memory.open(pg_url, embedder=None) as there:
        alice_here, alice_there = here.for_user("alice"), there.for_user("alice")
        alice_here.remember("Takes the train to work", dedup=False)
        assert len(alice_here.search("train", touch=False)) == 1  # caches 1 row
        for n in range(5):  # the other process writes: this one's cache says 1 row
            alice_there.remember(f"The train number {n} was late", dedup=False)
        hits = alice_here.search("train", touch=False, top_k=10)
        assert len(hits) == 6
        turns = [{"role": "user", "content": f"the train again {n}"} for n in range(3)]
        alice_here.add_turns(turns[:1])
        alice_here.search_conversations("train")
        alice_there.add_turns(turns[1:])
        assert len(alice_here.search_conversations("train")) == 3
