"""Speaker-aware conversation search: a query naming one participant of a conversation
gives that participant's turns a vote in fusion (``SearchOptions.speaker_weight``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ledgermem import InvalidInput, Memory, SearchOptions, UserMemory
from ledgermem.retrieval.hybrid import speaker_ranking
from ledgermem.store.base import TurnQuery

ORDER = ["t1", "t2", "t3", "t4"]
SPEAKERS = {"t1": "alice", "t2": "bob", "t3": "alice", "t4": None}


@pytest.mark.parametrize(("query", "expected"), [
    ("What does Bob play?", ["t2"]),
    ("what does ALICE like", ["t1", "t3"]),
    ("What did Alice tell Bob?", []),          # both named: no vote
    ("what is the weather like", []),          # nobody named
    ("bobcat sightings", []),                  # a word, not a part of a word
])
def test_the_named_participants_rows_in_fused_order(query: str, expected: list[str]) -> None:
    assert speaker_ranking(query, ORDER, SPEAKERS) == expected


def test_one_participant_is_nothing_to_tell_apart() -> None:
    assert speaker_ranking("what does Alice like", ["t1", "t3"],
                           {"t1": "alice", "t3": "alice"}) == []


def test_a_name_is_matched_by_any_of_its_words_but_stopwords() -> None:
    speakers = {"a": "jane smith", "b": "will"}
    assert speaker_ranking("what did Smith say", ["a", "b"], speakers) == ["a"]
    # "will" is a stopword: "what will happen" names nobody.
    assert speaker_ranking("what will happen", ["a", "b"], speakers) == []


def _chat(handle: UserMemory) -> None:
    # Alice talks about Bob's guitar more than Bob does, so by words alone her turn
    # ranks first for a question about Bob's guitar.
    handle.add_turns([
        {"role": "user", "name": "Alice", "content": "Bob's guitar, that guitar, the "
                                                      "loud guitar again"},
        {"role": "assistant", "name": "Bob", "content": "I practise guitar on weekends"},
        {"role": "user", "name": "Alice", "content": "I went hiking in the hills"},
    ], session_id="alice:chat")


def test_the_named_speakers_turn_comes_first(mem: Memory, alice: UserMemory) -> None:
    _chat(alice)
    query = "when does Bob play guitar?"
    plain = mem.searcher.with_options(speaker_weight=0.0).search_turns(
        "alice", query, _all_turns(), 5, now=mem.clock())
    assert plain[0].content.startswith("Bob's guitar")
    assert all("speaker_rank" not in hit.why for hit in plain)
    hits = alice.search_conversations(query)
    assert hits[0].content == "I practise guitar on weekends"
    assert hits[0].why["speaker_rank"] == 1
    assert all("speaker_rank" not in hit.why for hit in hits[1:])
    assert all(0 < hit.score <= 1 for hit in hits)


def test_a_query_naming_nobody_ranks_as_without_the_vote(mem: Memory,
                                                         alice: UserMemory) -> None:
    _chat(alice)
    off = mem.searcher.with_options(speaker_weight=0.0)
    for query in ("guitar on weekends", "who went hiking"):
        with_vote = alice.search_conversations(query)
        without = off.search_turns("alice", query, _all_turns(), 5, now=mem.clock())
        assert [(h.id, h.score, h.why) for h in with_vote] == [
            (h.id, h.score, h.why) for h in without]


@pytest.mark.parametrize("weight", [-0.1, float("nan"), True, "0.3"])
def test_a_bad_speaker_weight_is_refused(weight: object) -> None:
    with pytest.raises(InvalidInput, match="speaker_weight"):
        replace(SearchOptions(), speaker_weight=weight)  # type: ignore[arg-type]


def _all_turns() -> TurnQuery:
    return TurnQuery()
