"""How ``remember`` finds the item a text restates: the keyword lookup over two of the
text's rarest words (``dedup_terms`` with ``Store.term_counts``, keyword mode ``two``),
on both stores."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from ledgermem import Memory
from ledgermem.benchmarks.scale import Corpus
from ledgermem.domain.dedup import dedup_lookup, dedup_terms, dedup_triples
from ledgermem.retrieval.keyword import query_terms
from ledgermem.store import sql_keyword
from ledgermem.store.base import holding_two
from ledgermem.store.postgres import PostgresStore
from ledgermem.store.sql import item_where_sql
from ledgermem.store.sqlite import SQLiteStore
from ledgermem.store.word_counts import WordCounts
from ledgermem.types import ItemQuery

FILLERS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
           "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
           "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]


def _contents(mem: Memory, ids: list[str]) -> list[str]:
    return [mem.store.get_item("alice", i).content for i in ids]  # type: ignore[union-attr]


def test_mode_two_finds_the_rows_holding_two_of_the_terms(mem: Memory) -> None:
    alice = mem.for_user("alice")
    for text in ["walrus otter heron", "walrus puffin gannet", "otter heron lynx",
                 "bison moose caribou"]:
        alice.remember(text, dedup=False)
    search = mem.store.keyword_search_items
    found = search("alice", ["walrus", "otter", "heron"], "two", ItemQuery(), 10)
    assert sorted(_contents(mem, [i for i, _ in found])) == [
        "otter heron lynx", "walrus otter heron"]
    assert all(score > 0 for _, score in found)
    # Two terms: both; one term: that one.
    found = search("alice", ["walrus", "puffin"], "two", ItemQuery(), 10)
    assert _contents(mem, [i for i, _ in found]) == ["walrus puffin gannet"]
    found = search("alice", ["caribou"], "two", ItemQuery(), 10)
    assert _contents(mem, [i for i, _ in found]) == ["bison moose caribou"]
    # The other filters apply as in the other modes.
    assert search("alice", ["walrus", "otter", "heron"], "two",
                  ItemQuery(category="preference"), 10) == []
    assert search("bob", ["walrus", "otter", "heron"], "two", ItemQuery(), 10) == []


def test_term_counts_count_the_rows_holding_each_word(mem: Memory) -> None:
    alice = mem.for_user("alice")
    for text in ["walrus otter", "walrus heron", "walrus lynx"]:
        alice.remember(text, dedup=False)
    cutoff, counts = mem.store.term_counts("alice", "knowledge", ["walrus", "otter", "narwhal"])
    assert counts == {"walrus": 3, "otter": 1, "narwhal": 0}
    assert cutoff >= 1_000  # the common-term cut-off: none of these is common
    assert mem.store.term_counts("alice", "knowledge", []) == (cutoff, {})


def test_the_rarest_words_are_chosen() -> None:
    text = "mountaineering extraordinary photographing yak elk trip"
    assert list(dedup_terms(text)) == ["mountaineering", "extraordinary", "photographing"]
    counts = {"mountaineering": 40, "extraordinary": 40, "photographing": 40, "yak": 1,
              "elk": 2, "trip": 7}
    assert list(dedup_terms(text, counts)) == ["yak", "elk", "trip"]


def test_triples_take_one_more_than_the_words_a_restatement_may_lack() -> None:
    """Rarest words first, three a triple: at least two triples, one more than the
    ``n // 5`` words a restatement may lack, and one more again where the words allow;
    texts of fewer than six words keep two-of."""
    def words(n: int) -> str:
        return " ".join(FILLERS[:n])

    counts = {word: 100 - n for n, word in enumerate(FILLERS)}   # later words rarer
    assert dedup_triples(words(5), counts) is None
    assert list(dedup_triples(words(6), counts) or []) == FILLERS[5::-1]
    assert len(dedup_triples(words(9), counts) or []) == 9          # 1 may lack: 3 triples
    assert len(dedup_triples(words(10), counts) or []) == 9         # 2 may lack: 3
    assert len(dedup_triples(words(12), counts) or []) == 12        # 2: 4
    assert len(dedup_triples(words(20), counts) or []) == 18        # 4: 6
    assert list(dedup_triples(words(20), counts) or [])[:3] == ["tango", "sierra", "romeo"]


def test_a_common_last_word_is_dropped_and_one_of_the_others_asked_for() -> None:
    """Two of the chosen words, unless some are common and at least two are not: then
    one of those, whose postings are all that is read."""
    terms = ["yak", "elk", "trip"]
    assert dedup_lookup(terms, {"yak": 1, "elk": 2, "trip": 7}, 1_000) == (terms, "two")
    assert dedup_lookup(terms, {"yak": 1, "elk": 2, "trip": 1_001}, 1_000) == (
        ["yak", "elk"], "or")
    # Two common words: one of the rare ones, while at least two are rare.
    assert dedup_lookup(terms, {"yak": 1, "elk": 1_001, "trip": 1_001}, 1_000) == (
        terms, "two")
    assert dedup_lookup([*terms, "ox"], {"yak": 1, "elk": 2, "trip": 1_001, "ox": 1_500},
                        1_000) == (["yak", "elk"], "or")
    # Every word common: two of them.
    assert dedup_lookup(terms, dict.fromkeys(terms, 5_000), 1_000) == (terms, "two")
    # Two words or fewer: two-of is already both (or the one).
    assert dedup_lookup(["yak", "trip"], {"trip": 5_000}, 1_000) == (["yak", "trip"], "two")


def _zebra_tally(mem: Memory, monkeypatch: Any
                 ) -> tuple[Any, Any, list[tuple[list[str], str]]]:
    """Alice's store with "zebra" and "tally" in 1,050 rows each (past the common-term
    cut-off) and one item to restate; returns her handle, that item and the list the
    store's ranked lookups are recorded in from then on (terms sorted, mode)."""
    alice = mem.for_user("alice")
    codes = ["".join(chr(ord("a") + int(d)) for d in f"{n:04d}") for n in range(1_050)]
    alice.remember_many([f"zebra tally {code}" for code in codes], dedup=False)
    twin = alice.remember("quince marmalade for the zebra")
    asked: list[tuple[list[str], str]] = []
    search = mem.store.keyword_search_items

    def recorded(user_id: str, terms: Any, mode: Any, query: ItemQuery, limit: int) -> Any:
        asked.append((sorted(terms), mode))
        return search(user_id, terms, mode, query, limit)

    monkeypatch.setattr(mem.store, "keyword_search_items", recorded)
    return alice, twin, asked


def test_a_text_holding_a_common_word_finds_its_restatement_by_its_rare_ones(
        mem: Memory, monkeypatch: Any) -> None:
    """With one word in more rows than the common-term cut-off (1,000 rows), the lookup
    on PostgreSQL asks for one of the text's other chosen words (SQLite asks for no
    ranked lookup: the rare words' postings and the rows pairing one of them with the
    common one answer it), and both merge."""
    alice, twin, asked = _zebra_tally(mem, monkeypatch)
    again = alice.remember("quince marmalade for the zebra!")
    assert again.written == "merged" and again.id == twin.id
    expected = ([(["marmalade", "quince"], "or")] if isinstance(mem.store, PostgresStore)
                else [])
    assert asked == expected
    # A text whose chosen words are all rare still asks for two of them.
    asked.clear()
    assert alice.remember("zebra tally aaab").written == "merged"
    assert [mode for _, mode in asked] in ([], ["two"])


def test_a_batch_pairs_a_common_word_with_the_rare_ones_without_a_lookup(
        mem: Memory, monkeypatch: Any) -> None:
    """In a batch, SQLite answers a text with a common chosen word from the rare words'
    postings and one FTS5 match pairing them with it: no ranked lookup. PostgreSQL
    asks for one of the rare words, as one ``remember`` does. A text with one rare
    word gets its lookup on both."""
    alice, twin, asked = _zebra_tally(mem, monkeypatch)
    items = alice.remember_many(["quince marmalade for the zebra!", "zebra tally aaab",
                                 "a walrus basks on the ice floe"])
    assert [i.written for i in items] == ["merged", "merged", "added"]
    assert items[0].id == twin.id
    # A text with one rare word left gets its ranked lookup on both.
    alone = (["aaab", "tally", "zebra"], "two")
    assert asked == ([(["marmalade", "quince"], "or"), alone]
                     if isinstance(mem.store, PostgresStore) else [alone])


def test_a_restatement_behind_many_look_alikes_is_still_merged(mem: Memory) -> None:
    """Thirty shorter items hold the text's three longest words, so BM25 over those
    words ranks every one of them above the item it restates (which a lookup of the
    longest words therefore missed); its two rare words find it."""
    alice = mem.for_user("alice")
    twin = alice.remember("mountaineering extraordinary photographing yak elk trip planned")
    for filler in [*FILLERS, "amber", "beige", "coral", "denim"]:
        alice.remember(f"mountaineering extraordinary photographing {filler}", dedup=False)
    again = alice.remember("mountaineering extraordinary photographing yak elk trip")
    assert again.written == "merged" and again.id == twin.id
    [many] = alice.remember_many(["mountaineering extraordinary photographing elk yak trip"])
    assert many.written == "merged" and many.id == twin.id


def test_a_batch_finds_its_own_earlier_entry_by_two_rare_words(mem: Memory) -> None:
    alice = mem.for_user("alice")
    entries = [f"mountaineering extraordinary photographing {f}" for f in FILLERS]
    entries += ["mountaineering extraordinary photographing yak elk trip planned",
                "mountaineering extraordinary photographing yak elk trip"]
    items = alice.remember_many(entries)
    assert [i.written for i in items[-2:]] == ["added", "merged"]
    assert items[-1].id == items[-2].id
    # Texts that share only common words stay apart.
    assert len({i.id for i in items[:len(FILLERS)]}) == len(FILLERS)


def test_the_exact_texts_of_a_batch_are_read_by_the_content_index(mem: Memory) -> None:
    alice = mem.for_user("alice")
    texts = ("walrus otter heron", "bison moose caribou", "never stored")
    for text in texts[:2]:
        alice.remember(text, dedup=False)
    alice.remember("walrus otter heron lynx", dedup=False)
    found, _ = mem.store.query_items("alice", ItemQuery(contents=texts))
    assert sorted(i.content for i in found) == ["bison moose caribou", "walrus otter heron"]
    assert mem.store.query_items("alice", ItemQuery(contents=()))[0] == []
    assert mem.store.query_items("bob", ItemQuery(contents=texts))[0] == []
    store: Any = mem.store
    where, params = item_where_sql("alice", ItemQuery(contents=texts),
                                   digest=store._digest_text)
    sql = f"SELECT id FROM knowledge WHERE {where}"
    if isinstance(store, PostgresStore):
        # A few rows in the table: tell the planner a scan is dear, as it is at scale.
        with store._scope(("alice", False)), store._writing() as run:
            run("SET LOCAL enable_seqscan = off", [])
            plan = " ".join(str(r[0]) for r in run("EXPLAIN " + sql, params))
        assert "knowledge_digest" in plan, plan
    else:
        plan = " ".join(str(r[-1]) for r in store._read("EXPLAIN QUERY PLAN " + sql, params))
        assert "knowledge_text" in plan, plan


def test_term_counts_follow_this_process_writes(mem: Memory) -> None:
    """Counts may be kept between calls (PostgreSQL keeps each word's), but what this
    process writes is counted at once."""
    alice = mem.for_user("alice")
    alice.remember("walrus otter", dedup=False)
    assert mem.store.term_counts("alice", "knowledge", ["walrus", "otter", "heron"])[1] == {
        "walrus": 1, "otter": 1, "heron": 0}
    alice.remember("walrus heron", dedup=False)
    alice.remember_many(["Walrus lynx", "heron moose"], dedup=False)
    assert mem.store.term_counts("alice", "knowledge", ["walrus", "otter", "heron"])[1] == {
        "walrus": 3, "otter": 1, "heron": 2}
    # PostgreSQL counts the user's rows; SQLite the file's (FTS5's statistics are).
    mem.for_user("bob").remember("walrus walrus", dedup=False)
    per_user = isinstance(mem.store, PostgresStore)
    assert mem.store.term_counts("alice", "knowledge", ["walrus"])[1] == {
        "walrus": 3 if per_user else 4}
    assert mem.store.term_counts("bob", "knowledge", ["walrus"])[1] == {
        "walrus": 1 if per_user else 4}


def _counted_words(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The words each fresh count of ``term_counts`` counted (every one is kept)."""
    counted: list[list[str]] = []
    keep = WordCounts.keep

    def noted(self: WordCounts, table: str, user_id: str, counts: Mapping[str, int],
              cutoff: int) -> None:
        counted.append(sorted(counts))
        keep(self, table, user_id, counts, cutoff)

    monkeypatch.setattr(WordCounts, "keep", noted)
    return counted


def test_dedup_counts_only_the_words_it_has_not_counted(
        mem: Memory, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``term_counts`` keeps each word's count and raises it by the rows this process
    inserts: a ``remember`` (or a ``remember_many`` batch) counts only its words not
    counted yet. Counting a word costs a full-text match of it: about 60 µs on SQLite,
    2,500 words for a batch of 1,000 texts. Another process's writes are seen once a
    count expires."""
    alice = mem.for_user("alice")
    alice.remember("Alice keeps bees on the roof", dedup=False)
    store = mem.store
    store.term_counts("alice", "knowledge", ["alice", "keeps", "bees", "roof"])
    counted = _counted_words(monkeypatch)
    assert store.term_counts("alice", "knowledge", ["bees", "roof"])[1] == {"bees": 1,
                                                                           "roof": 1}
    assert counted == []
    if isinstance(store, SQLiteStore):                  # not a statement
        seen: list[str] = []
        store.trace(seen.append)
        store.term_counts("alice", "knowledge", ["bees", "roof"])
        store.trace(None)
        assert seen == []
    alice.remember("Alice keeps wasps in the cellar")
    assert counted == [["cellar", "wasps"]]
    alice.remember_many(["Bees and wasps share the roof", "The cellar floods"])
    assert counted[-1] == ["floods", "share"]
    # The kept counts took in the rows inserted since: as a fresh count says.
    words = ["alice", "bees", "cellar", "roof", "wasps"]
    kept = store.term_counts("alice", "knowledge", words)[1]
    assert kept == {"alice": 2, "bees": 2, "cellar": 2, "roof": 2, "wasps": 2}
    assert len(counted) == 2
    # Another process's write is not seen by a kept count...
    other = Memory.open(db_url, embedder=None)
    try:
        other.for_user("alice").remember("Bees swarm in May", dedup=False)
    finally:
        other.close()
    assert store.term_counts("alice", "knowledge", ["bees"])[1] == {"bees": 2}
    # ...until it expires.
    words_kept = store._words._counts            # type: ignore[attr-defined]
    for key, (number, cutoff, _) in list(words_kept.items()):
        words_kept[key] = (number, cutoff, 0.0)
    assert store.term_counts("alice", "knowledge", ["bees"])[1] == {"bees": 3}
    assert counted[-1] == ["bees"]


def test_a_count_that_stopped_at_the_cut_off_is_counted_again_when_the_cut_off_grows(
        mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql_keyword, "COMMON_TERM_MIN_ROWS", 2)
    monkeypatch.setattr(sql_keyword, "COMMON_TERM_SHARE", 0.5)     # half the rows, at least 2
    alice = mem.for_user("alice")
    for text in ["walrus otter", "walrus heron", "walrus lynx", "walrus moose"]:
        alice.remember(text, dedup=False)
    store = mem.store
    assert store.term_counts("alice", "knowledge", ["walrus", "otter"]) == (
        2, {"walrus": 3, "otter": 1})                      # walrus: more than 2
    counted = _counted_words(monkeypatch)
    alice.remember_many(["bison caribou", "gannet puffin"], dedup=False)
    assert store.term_counts("alice", "knowledge", ["walrus", "otter", "bison"]) == (
        3, {"walrus": 4, "otter": 1, "bison": 1})
    assert counted == [["bison", "walrus"]]     # otter's count was exact: kept


def test_a_kept_count_outlives_a_new_cut_off_unless_it_stopped_below_it() -> None:
    """The cut-off grows with the rows (1% of them past 100,000): a count within the
    cut-off it was counted to is exact under any other, one that stopped past it is
    past any lower cut-off too, and counted again under a higher one."""
    words = WordCounts(60.0, per_user=True)
    words.keep("knowledge", "alice", {"rare": 40, "common": 1_001}, 1_000)
    assert words.known("knowledge", "alice", ["rare", "common"], 1_000) == (
        {"rare": 40, "common": 1_001}, [])
    assert words.known("knowledge", "alice", ["rare", "common"], 1_100) == (
        {"rare": 40}, ["common"])
    assert words.known("knowledge", "alice", ["common"], 900) == ({"common": 901}, [])
    assert words.known("knowledge", "alice", ["rare"], 30) == ({"rare": 31}, [])
    assert words.known("knowledge", "bob", ["rare"], 1_000) == ({}, ["rare"])
    # New rows raise a count until it passes its cut-off.
    words.keep("knowledge", "alice", {"edge": 1_000}, 1_000)
    for _ in range(3):
        words.inserted("knowledge", ("user_id", "content", "entity"),
                       [("alice", "Edge and rare", None), ("bob", "rare", "edge")])
    assert words.known("knowledge", "alice", ["rare", "edge"], 1_000) == (
        {"rare": 43, "edge": 1_001}, [])
    assert words.cutoff("knowledge", "alice") == 1_000
    assert words.cutoff("knowledge", "bob") is None
    words.forget("alice")
    assert words.known("knowledge", "alice", ["rare"], 1_000) == ({}, ["rare"])
    assert words.cutoff("knowledge", "alice") is None


def test_no_word_of_a_redacted_text_or_a_deleted_user_stays_counted(mem: Memory) -> None:
    alice = mem.for_user("alice")
    item = alice.remember("Alice hides the spare key under the heron statue", dedup=False)
    mem.for_user("bob").remember("Bob feeds the heron", dedup=False)
    store = mem.store
    kept = store._words._counts                  # type: ignore[attr-defined]
    for user in ("alice", "bob"):
        store.term_counts(user, "knowledge", ["heron", "statue", "key"])
    alice.forget(item.id)  # blanks its text in the ledger too
    # PostgreSQL keeps each user's counts; SQLite the file's, all dropped.
    assert not [key for key in kept if key[1] == "alice" or key[1] == ""]
    assert bool([key for key in kept if key[1] == "bob"]) == isinstance(
        store, PostgresStore)
    store.term_counts("alice", "knowledge", ["statue"])
    assert kept
    alice.forget_user()
    assert not [key for key in kept if key[1] == "alice" or key[1] == ""]


def test_items_holding_two_are_mode_two_s_rows_unranked(mem: Memory) -> None:
    alice = mem.for_user("alice")
    for text in ["walrus otter heron", "walrus puffin gannet", "otter heron lynx",
                 "bison moose caribou", "walrus running otters"]:
        alice.remember(text, dedup=False)
    old = alice.remember("heron lynx otter again", dedup=False)
    alice.update(old.id, content="osprey kestrel merlin")   # no longer holds those words
    mem.for_user("bob").remember("walrus otter heron", dedup=False)
    lists = [["walrus", "otter", "heron"], ["walrus", "puffin"], ["caribou"], ["narwhal"],
             [], ["walrus", "heron", "caribou", "moose"], ["walrus", "otter"]]
    found = mem.store.items_holding_two("alice", lists, 10)
    for terms, ids in zip(lists, found, strict=True):
        ranked = mem.store.keyword_search_items("alice", terms, "two", ItemQuery(), 10)
        assert ids is not None and sorted(ids) == sorted(i for i, _ in ranked), terms
    # Most of the terms first ("walrus otter heron" holds three), then the newest; a
    # word matches as keyword search matches it (stemmed: "otters").
    assert _contents(mem, found[0] or []) == [
        "walrus otter heron", "walrus running otters", "otter heron lynx"]
    assert _contents(mem, found[6] or []) == ["walrus running otters", "walrus otter heron"]
    assert found[3] == found[4] == []
    # More holders than the limit: the most terms first, then the rarer terms' holders
    # ("heron" is in three rows, "walrus" and "otter" in four each), not the newest.
    assert _contents(mem, mem.store.items_holding_two(
        "alice", [["walrus", "otter", "heron"]], 2)[0] or []) == [
        "walrus otter heron", "otter heron lynx"]
    assert mem.store.items_holding_two("bob", lists[:1], 10) == [
        [i for i, _ in mem.store.keyword_search_items("bob", lists[0], "two", ItemQuery(), 10)]]
    assert mem.store.items_holding_two("carol", lists, 10) == [[]] * len(lists)


def test_items_holding_two_leave_a_term_of_too_many_rows_alone(
        mem: Memory, monkeypatch: Any) -> None:
    monkeypatch.setattr("ledgermem.store.sql_keyword.POSTINGS_CAP", 3)
    alice = mem.for_user("alice")
    alice.remember_many([f"walrus {word} tusk" for word in FILLERS[:4]], dedup=False)
    assert mem.store.items_holding_two("alice", [["walrus", "alpha"], ["alpha", "tusk"],
                                                 ["bravo", "charlie"]], 10) == [
        None, None, []]


def test_a_common_term_is_paired_with_the_rarer_ones_without_its_postings(
        mem: Memory, monkeypatch: Any) -> None:
    """SQLite finds the rows holding a rarer term and a common one in one FTS5 match,
    without reading the common term's postings; PostgreSQL leaves such a list to the
    ranked lookup. Rows holding two common terms and no rarer one are left out."""
    monkeypatch.setattr("ledgermem.store.sql_keyword.POSTINGS_CAP", 3)
    alice = mem.for_user("alice")
    alice.remember_many([f"walrus {word} tusk" for word in FILLERS[:4]]
                        + ["bravo charlie narwhal"], dedup=False)
    # Bob holds most rows, so that SQLite reads Alice's through her scope token.
    mem.for_user("bob").remember_many([f"walrus {word} tusk" for word in ["alpha", *FILLERS[4:12]]],
                                      dedup=False)
    read: list[list[str]] = []
    postings = mem.store._postings  # type: ignore[attr-defined]

    def recorded(user_id: str, terms: Any, cap: int) -> Any:
        read.append(list(terms))
        return postings(user_id, terms, cap)

    monkeypatch.setattr(mem.store, "_postings", recorded)
    lists = [["walrus", "alpha", "bravo"], ["walrus", "tusk", "alpha", "bravo"],
             ["walrus", "tusk", "alpha"]]
    found = mem.store.items_holding_two("alice", lists, 10)
    if isinstance(mem.store, PostgresStore):
        assert found == [None, None, None]
        return
    assert _contents(mem, found[0] or []) == ["walrus bravo tusk", "walrus alpha tusk"]
    # Every row holds "walrus" and "tusk": only those with a rarer term are found.
    assert _contents(mem, found[1] or []) == ["walrus bravo tusk", "walrus alpha tusk"]
    assert found[2] is None                        # one rarer term: ranked lookup
    every = mem.store.keyword_search_items("alice", lists[1], "two", ItemQuery(), 10)
    assert len(every) == 4
    # The common terms' postings are read only up to the cap, once.
    assert read == [["alpha", "bravo", "tusk", "walrus"]]


def test_items_holding_two_keep_the_items_of_the_query_before_the_limit(
        mem: Memory) -> None:
    """Items of another category count neither towards the limit nor in the answer,
    as the ranked lookup filters them before its LIMIT."""
    alice = mem.for_user("alice")
    alice.remember_many([{"content": f"walrus otter heron {word}", "category": "note"}
                         for word in FILLERS[:12]], dedup=False)
    fact = alice.remember("walrus otter by the fjord", dedup=False)
    terms = [["walrus", "otter", "heron"]]
    assert fact.id not in (mem.store.items_holding_two("alice", terms, 10)[0] or [])
    assert mem.store.items_holding_two("alice", terms, 10, [ItemQuery(category="fact")]) == [
        [fact.id]]
    notes = mem.store.items_holding_two("alice", terms, 10, [ItemQuery(category="note")])[0]
    assert notes is not None and len(notes) == 10 and fact.id not in notes


def test_batched_and_ranked_lookups_find_the_same_candidates(mem: Memory) -> None:
    """On a corpus of Zipf-distributed words (as the write benchmark's), every text a
    batch answers from the postings gets the ranked lookup's candidates where they are
    ten or fewer, and ten of the items holding two of its words where there are more."""
    rng = np.random.default_rng(7)
    corpus = Corpus(rng)
    alice = mem.for_user("alice")
    alice.remember_many(corpus.sentences(rng, 600), dedup=False)
    texts = corpus.sentences(rng, 200)
    words = sorted({w for text in texts for w in dedup_terms(text)})
    counts = mem.store.term_counts("alice", "knowledge", words)[1]
    lists = [list(dedup_terms(text, counts)) for text in texts]
    found = mem.store.items_holding_two("alice", lists, 10)
    many = 0
    for terms, ids in zip(lists, found, strict=True):
        every = [i for i, _ in mem.store.keyword_search_items(
            "alice", terms, "two", ItemQuery(), 1_000)]
        assert ids is not None
        if len(every) <= 10:
            assert sorted(ids) == sorted(every), terms
        else:
            many += 1
            assert len(ids) == 10 and set(ids) <= set(every), terms
    assert 0 < many < 50


def test_a_large_batch_reads_the_postings_in_parts(mem: Memory, monkeypatch: Any) -> None:
    monkeypatch.setattr("ledgermem.domain.writer.POSTINGS_TEXTS", 2)
    alice = mem.for_user("alice")
    kept = [alice.remember(f"{word} walrus watched the {FILLERS[-1 - n]} glacier calving",
                           dedup=False) for n, word in enumerate(FILLERS[:5])]
    parts: list[int] = []
    holding_two = mem.store.items_holding_two

    def counted(user_id: str, term_lists: Any, limit: int, queries: Any = None) -> Any:
        parts.append(len(term_lists))
        return holding_two(user_id, term_lists, limit, queries)

    monkeypatch.setattr(mem.store, "items_holding_two", counted)
    # Restatements (one more word each), not the same texts: found by their words.
    items = alice.remember_many([f"{word} walrus slowly watched the {FILLERS[-1 - n]} glacier "
                                 "calving" for n, word in enumerate(FILLERS[:5])]
                                + ["a narwhal surfaced near the ice floe"])
    assert parts == [2, 2, 2]
    assert [i.written for i in items] == ["merged"] * 5 + ["added"]
    assert [i.id for i in items[:5]] == [k.id for k in kept]


def test_mode_triples_finds_the_rows_holding_all_of_one_triple(mem: Memory) -> None:
    alice = mem.for_user("alice")
    for text in ["walrus otter heron", "puffin gannet lynx tern", "walrus otter puffin gannet",
                 "bison moose caribou", "heron lynx"]:
        alice.remember(text, dedup=False)
    search = mem.store.keyword_search_items
    terms = ["walrus", "otter", "heron", "puffin", "gannet", "lynx", "caribou"]
    found = search("alice", terms, "triples", ItemQuery(), 10)
    # All of the first triple, of the second, or of the shorter last group; rows
    # holding two words of each triple (which two-of finds) are not.
    assert sorted(_contents(mem, [i for i, _ in found])) == [
        "bison moose caribou", "puffin gannet lynx tern", "walrus otter heron"]
    assert "walrus otter puffin gannet" in _contents(
        mem, [i for i, _ in search("alice", terms, "two", ItemQuery(), 10)])
    assert all(score > 0 for _, score in found)
    assert [score for _, score in found] == sorted((s for _, s in found), reverse=True)
    assert search("alice", terms, "triples", ItemQuery(category="preference"), 10) == []
    assert search("bob", terms, "triples", ItemQuery(), 10) == []


def test_a_restatement_of_common_words_behind_many_pairs_is_merged(
        mem: Memory, monkeypatch: Any) -> None:
    """A text whose words are all past the postings' cap gets a ranked lookup: on
    SQLite, of the rows holding all of one triple of its rarest words. The item it
    restates (it drops one word) is long; its six rarest words are each in twenty short
    rows holding two of them, its other words in more rows still, and none but the item
    holds a triple. (When a short text could restate a long one, the lookup of two of
    its rarest words ranked such short rows above the item and missed it.) PostgreSQL,
    which reads each posting as a row, keeps two-of (``ItemWriter._lookup``)."""
    monkeypatch.setattr("ledgermem.store.sql_keyword.POSTINGS_CAP", 3)
    monkeypatch.setattr("ledgermem.domain.writer.POSTINGS_CAP", 3)
    words = ["glacier", "walrus", "harbour", "lantern", "orchard", "meadow"]
    tail = ("beside the quiet fjord where the old ferry waits every summer for travellers"
            " from distant northern islands and coastal villages far across the grey"
            " windswept sea")
    alice = mem.for_user("alice")
    twin = alice.remember(" ".join(words) + " " + tail)
    pairs = [(a, b) for n, a in enumerate(words) for b in words[n + 1:]]
    alice.remember_many([f"{a} {b} {filler}" for a, b in pairs for filler in FILLERS[:4]],
                        dedup=False)
    # every other word of the item in more rows than the six: they stay the rarest
    alice.remember_many([f"{word} {filler}" for word in query_terms(tail)
                         for filler in FILLERS[:25]], dedup=False)
    text = " ".join(words) + " " + tail.removesuffix(" sea")
    counts = mem.store.term_counts("alice", "knowledge", query_terms(text, max_terms=512))[1]
    assert dedup_triples(text, counts)
    asked: list[str] = []
    search = mem.store.keyword_search_items

    def recorded(user_id: str, terms: Any, mode: Any, query: ItemQuery, limit: int) -> Any:
        asked.append(mode)
        return search(user_id, terms, mode, query, limit)

    monkeypatch.setattr(mem.store, "keyword_search_items", recorded)
    again = alice.remember(text)
    [many] = alice.remember_many([" ".join(reversed(text.split()))])
    if isinstance(mem.store, PostgresStore):
        assert asked == ["two", "two"]
        return
    assert asked == ["triples", "triples"]
    assert again.written == "merged" and again.id == twin.id
    assert many.written == "merged" and many.id == twin.id


def test_holding_two_counts_the_rows_in_two_or_more_of_the_lists() -> None:
    assert holding_two([{1, 2, 3}, [2, 3, 4], (3, 5), {6}]) == Counter({3: 3, 2: 2})
    assert holding_two([{1, 2}, {2, 3}]) == Counter({2: 2})         # two lists: both
    assert holding_two([[7, 8]]) == Counter({7: 1, 8: 1})           # one list: every row
    assert holding_two([]) == Counter()
    assert holding_two([{1}, {2}, {3}]) == Counter()
