"""Salience: the arithmetic against hand-computed numbers, ties, and the index upgrade."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ledgermem.errors import InvalidInput
from ledgermem.types import Event
from ledgermem.views import (
    MemoryIndex,
    ViewConfig,
    event_text,
    keyword_relevance,
    salient,
    scored,
)
from tests.views.ledger import ev, ids

# Agent "a" sees e1 (a global kind), e2 and e4 (its own), not e3 (b's private thought).
SCENE = [
    ev(1, "world.observed", "The bridge collapsed at dawn"),
    ev(2, "agent.spoke", "I saw smoke near the bridge", agent="a"),
    ev(3, "agent.thought", "I set the bridge on fire, smoke everywhere", agent="b"),
    ev(4, "agent.thought", "Bread smells good", agent="a"),
]
QUERY = "bridge smoke"


def test_salience_matches_the_hand_computed_scores() -> None:
    # keywords (stopwords dropped): query {bridge, smoke}
    #   e1 {bridge, collapsed, dawn}    Jaccard 1/4, age 2, world.observed 0.70
    #   e2 {saw, smoke, near, bridge}   Jaccard 2/4, age 1, agent.spoke    0.50
    #   e4 {bread, smells, good}        Jaccard 0,   age 0, agent.thought  0.40
    # e1: 0.3·0.25 + 0.4·e^−0.2 + 0.3·0.7 = 0.075 + 0.32749 + 0.21 = 0.61249
    # e2: 0.3·0.50 + 0.4·e^−0.1 + 0.3·0.5 = 0.150 + 0.36193 + 0.15 = 0.66193
    # e4: 0.3·0    + 0.4·1      + 0.3·0.4 = 0     + 0.4     + 0.12 = 0.52
    ranked = scored(SCENE, "a", QUERY)
    assert [(s.event.id, round(s.score, 5)) for s in ranked] == [
        ("e2", 0.66193), ("e1", 0.61249), ("e4", 0.52)]
    assert ranked[1].why == pytest.approx({"score": 0.61249, "relevance": 0.25,
                                           "recency": 0.81873, "importance": 0.7,
                                           "age": 2.0}, abs=1e-5)
    # the top two, returned in the order they happened
    assert ids(salient(SCENE, "a", QUERY, k=2)) == ["e1", "e2"]
    assert ids(salient(SCENE, "a", QUERY)) == ["e1", "e2", "e4"]


def test_weights_decay_and_importance_come_from_the_config() -> None:
    config = ViewConfig(w_rel=1.0, w_rec=0.0, w_imp=0.0)
    assert [round(s.score, 5) for s in scored(SCENE, "a", QUERY, config)] == [0.5, 0.25, 0.0]
    config = ViewConfig(w_rel=0.0, w_rec=1.0, w_imp=0.0, decay=0.5)
    assert [round(s.recency, 5) for s in scored(SCENE, "a", QUERY, config)] == [
        1.0, 0.60653, 0.36788]
    config = ViewConfig(importance={"agent.thought": 1.0}, default_importance=0.0)
    # e4: 0.4·1 + 0.3·1.0 = 0.7 now leads; e2 (agent.spoke, unlisted) 0.15 + 0.36193
    assert [(s.event.id, round(s.score, 5)) for s in scored(SCENE, "a", QUERY, config)] == [
        ("e4", 0.7), ("e2", 0.51193), ("e1", 0.40249)]


def test_an_important_old_event_outranks_an_irrelevant_recent_one() -> None:
    ledger = [ev(1, "verdict.final", "The miller is guilty", agent="judge"),
              *[ev(i, "agent.thought", f"chore number {i}", agent="a") for i in range(2, 20)]]
    config = ViewConfig(global_kinds=frozenset({"verdict.final"}))
    assert ids(salient(ledger, "a", "who is guilty?", config, k=3)) == ["e1", "e18", "e19"]


def test_ties_go_to_the_newer_event() -> None:
    ledger = [ev(i, "agent.spoke", "same words", agent="a") for i in range(1, 5)]
    config = ViewConfig(decay=0.0)
    ranked = scored(ledger, "a", "words", config)
    assert len({s.score for s in ranked}) == 1
    assert [s.event.id for s in ranked] == ["e4", "e3", "e2", "e1"]
    assert ids(salient(ledger, "a", "words", config, k=2)) == ["e3", "e4"]
    # and the same answer every time
    assert all(ids(salient(ledger, "a", "words", config, k=2)) == ["e3", "e4"]
               for _ in range(5))


def test_k_and_the_query_are_checked() -> None:
    assert salient(SCENE, "a", QUERY, k=0) == []
    assert ids(salient(SCENE, "a", QUERY, ViewConfig(salience_k=1))) == ["e2"]
    with pytest.raises(InvalidInput, match="k must be"):
        salient(SCENE, "a", QUERY, k=-1)
    with pytest.raises(InvalidInput, match="query"):
        salient(SCENE, "a", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="users"):
        salient([*SCENE, ev(9, "world.observed", "x", user="u2")], "a", QUERY)
    assert salient([], "a", QUERY) == []


def test_an_empty_query_ranks_by_recency_and_importance_alone() -> None:
    assert all(s.relevance == 0 for s in scored(SCENE, "a", ""))
    assert ids(salient(SCENE, "a", "", k=1)) == ["e1"]  # 0.3274 + 0.21 beats 0.52


def test_event_text_reads_text_content_belief_or_the_payload_without_ids() -> None:
    assert event_text(ev(1, "x", "hello")) == "hello"
    assert event_text(ev(1, "x", content="from content")) == "from content"
    assert event_text(ev(1, "x", "  ", content="blank text skipped")) == "blank text skipped"
    assert event_text(ev(1, "agent.reflected", belief="the baker lies",
                         based_on=["e7"])) == "the baker lies"
    assert event_text(ev(1, "clue.found", where="mill", item="key", id="c1",
                         item_id="k9", witness_ids=["w"], supersedes="e0")) == (
        '{"item": "key", "where": "mill"}')
    assert event_text(ev(1, "run.started")) == ""


def test_keyword_relevance_is_jaccard_without_stopwords() -> None:
    assert keyword_relevance("the bridge", "a bridge over the river") == 0.5
    assert keyword_relevance("", "") == 0.0
    assert keyword_relevance("Bridge!", "bridge") == 1.0


class TinyIndex:
    """A MemoryIndex over a dict, with scripted scores and a record of what it was fed."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.texts: dict[str, str] = {}
        self.fed: list[list[str]] = []
        self.asked: list[tuple[str, int]] = []

    def index(self, events: Sequence[Event]) -> None:
        self.fed.append([event.id for event in events])
        for event in events:
            self.texts.setdefault(event.id, event_text(event))

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        self.asked.append((query, k))
        ranked = sorted(self.scores.items(), key=lambda pair: -pair[1])
        return ranked[:k]


def test_an_index_replaces_only_the_relevance_term() -> None:
    index = TinyIndex({"e4": 0.9, "e1": 0.1})
    assert isinstance(index, MemoryIndex)
    ranked = {s.event.id: s for s in scored(SCENE, "a", "baking", index=index)}
    # e4: 0.3·0.9 + 0.4 + 0.12 = 0.79; e1: 0.03 + 0.32749 + 0.21; e2 not returned: 0
    assert {i: round(s.score, 5) for i, s in ranked.items()} == {
        "e4": 0.79, "e1": 0.56749, "e2": 0.51193}
    assert (ranked["e2"].relevance, ranked["e4"].recency, ranked["e4"].importance) == (
        0.0, 1.0, 0.4)
    # the index was fed the visible events, then asked for as many hits
    assert index.fed == [["e1", "e2", "e4"]]
    assert index.asked == [("baking", 3)]
    assert ids(salient(SCENE, "a", "baking", k=2, index=index)) == ["e1", "e4"]


def test_an_index_hit_the_agent_may_not_see_or_the_ledger_never_wrote_is_ignored() -> None:
    # e3 is b's private thought; "e77" was never written; both score highest
    index = TinyIndex({"e3": 1.0, "e77": 1.0, "e2": 0.5})
    ranked = scored(SCENE, "a", QUERY, index=index)
    assert [s.event.id for s in ranked] == ["e2", "e1", "e4"]
    assert {s.event.id: s.relevance for s in ranked} == {"e1": 0.0, "e2": 0.5, "e4": 0.0}
    assert "e3" not in ids(salient(SCENE, "a", QUERY, k=10, index=index))
    assert "e3" not in index.texts  # nor was the index ever shown it


def test_index_scores_are_clamped_and_the_first_hit_per_id_counts() -> None:
    class Odd(TinyIndex):
        def search(self, query: str, k: int) -> list[tuple[str, float]]:
            return [("e2", 7.0), ("e2", 0.1), ("e1", -3.0), ("e4", float("nan"))]

    rel = {s.event.id: s.relevance for s in scored(SCENE, "a", QUERY, index=Odd({}))}
    assert rel == {"e2": 1.0, "e1": 0.0, "e4": 0.0}


def test_an_index_is_not_asked_when_nothing_is_visible() -> None:
    index = TinyIndex({"e3": 1.0})
    assert salient([SCENE[2]], "a", QUERY, index=index) == []
    assert index.fed == [] and index.asked == []
