"""The re-ranking hook: real reranker functions over real stores (no mocks)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest

from ledgermem import Hit, Memory, ProviderError, SearchOptions, UserMemory
from ledgermem.retrieval.rerank import Reranker, rerank
from tests.support import FakeClock

TEAS = ["Sarah likes green tea", "Green tea with mint after dinner",
        "Bought green tea and a new kettle", "A green tea latte at the station",
        "Green tea ice cream for dessert", "Our green tea garden tour in Shizuoka"]


def reverse(query: str, hits: list[Hit]) -> list[Hit]:
    """The fused order, upside down."""
    return hits[::-1]


def shortest_first(query: str, hits: list[Hit]) -> list[Hit]:
    """A rule-based scorer: shorter texts are more to the point; scores 1/length."""
    scored = [replace(hit, score=1 / len(hit.content)) for hit in hits]
    return sorted(scored, key=lambda hit: -hit.score)


def only_mentioning(word: str) -> Reranker:
    """A filter: keeps the hits whose text holds ``word``, in the given order."""
    def keep(query: str, hits: list[Hit]) -> list[Hit]:
        return [hit for hit in hits if word in hit.content.lower()]
    return keep


@pytest.fixture
def teas(alice: UserMemory, clock: FakeClock) -> list[str]:
    made = []
    for text in TEAS:
        clock.advance(hours=1)
        made.append(alice.remember(text).id)
        alice.add_turn("user", f"By the way: {text.lower()}")
    return made


@pytest.fixture
def reranked(db_url: str, clock: FakeClock, request: pytest.FixtureRequest
             ) -> Iterator[Memory]:
    """A second Memory on the test's store whose searches use ``request.param``."""
    reranker, depth = request.param
    with Memory.open(db_url, clock=clock, embedder=None,
                     search=SearchOptions(reranker=reranker, rerank_depth=depth)) as memory:
        yield memory


def ids(hits: Sequence[Hit]) -> list[str]:
    return [hit.id for hit in hits]


@pytest.mark.parametrize("reranked", [(reverse, 20)], indirect=True)
def test_a_reranker_reorders_knowledge_and_conversations(
        alice: UserMemory, teas: list[str], reranked: Memory) -> None:
    plain = alice.search("green tea", top_k=6, touch=False)
    handle = reranked.for_user("alice")
    hits = handle.search("green tea", top_k=6, touch=False)
    assert ids(hits) == ids(plain)[::-1]
    assert [h.why["rerank_rank"] for h in hits] == [1, 2, 3, 4, 5, 6]
    assert hits[0].why["pre_rerank_score"] == pytest.approx(plain[-1].score, abs=1e-6)
    turns = alice.search_conversations("green tea", limit=6)
    assert ids(handle.search_conversations("green tea", limit=6)) == ids(turns)[::-1]


@pytest.mark.parametrize("reranked", [(reverse, 20)], indirect=True)
def test_the_reranker_sees_the_depth_then_the_cut_applies(
        alice: UserMemory, teas: list[str], reranked: Memory) -> None:
    every = alice.search("green tea", top_k=6, touch=False)
    top2 = reranked.for_user("alice").search("green tea", top_k=2, touch=False)
    # It reordered all six (depth 20 > top_k), then two were kept: the fused last two.
    assert ids(top2) == ids(every)[::-1][:2]


@pytest.mark.parametrize("reranked", [(reverse, 3)], indirect=True)
def test_hits_below_the_depth_keep_their_place(
        alice: UserMemory, teas: list[str], reranked: Memory) -> None:
    every = ids(alice.search("green tea", top_k=6, touch=False))
    hits = reranked.for_user("alice").search("green tea", top_k=6, touch=False)
    assert ids(hits) == every[:3][::-1] + every[3:]
    assert all("rerank_rank" not in hit.why for hit in hits[3:])


@pytest.mark.parametrize("reranked", [(shortest_first, 20)], indirect=True)
def test_a_scoring_reranker_sets_the_scores(
        alice: UserMemory, teas: list[str], reranked: Memory) -> None:
    hits = reranked.for_user("alice").search("green tea", top_k=6, touch=False)
    assert [h.content for h in hits] == sorted(TEAS, key=len)
    assert all(h.score == pytest.approx(1 / len(h.content)) for h in hits)
    assert all(h.why["score"] == pytest.approx(h.score, abs=1e-6) for h in hits)


@pytest.mark.parametrize("reranked", [(only_mentioning("dinner"), 20)], indirect=True)
def test_a_reranker_may_drop_hits(alice: UserMemory, teas: list[str],
                                  reranked: Memory) -> None:
    hits = reranked.for_user("alice").search("green tea", top_k=6, touch=False)
    assert [h.content for h in hits] == ["Green tea with mint after dinner"]


@pytest.mark.parametrize("reranked", [(reverse, 20)], indirect=True)
def test_as_of_and_combined_searches_are_reranked_too(
        alice: UserMemory, teas: list[str], reranked: Memory, clock: FakeClock) -> None:
    handle = reranked.for_user("alice")
    plain = alice.search("green tea", top_k=6, as_of=clock.now)
    assert ids(handle.search("green tea", top_k=6, as_of=clock.now)) == ids(plain)[::-1]
    merged = alice.search_all("green tea", top_k=12, touch=False)
    assert ids(handle.search_all("green tea", top_k=12, touch=False)) == ids(merged)[::-1]


def test_the_reranker_gets_the_query_and_real_hits(
        db_url: str, clock: FakeClock, alice: UserMemory, teas: list[str]) -> None:
    seen: list[tuple[str, list[Hit]]] = []

    def spy(query: str, hits: list[Hit]) -> list[Hit]:
        seen.append((query, hits))
        return hits

    with Memory.open(db_url, clock=clock, embedder=None,
                     search=SearchOptions(reranker=spy, rerank_depth=4)) as memory:
        memory.for_user("alice").search("green tea", top_k=2, touch=False)
    [(query, hits)] = seen
    assert query == "green tea" and len(hits) == 4
    assert all(hit.item is not None and hit.item.user_id == "alice" for hit in hits)


# misbehaving rerankers -----------------------------------------------------------------

def raises(query: str, hits: list[Hit]) -> list[Hit]:
    raise RuntimeError("model server is down")


def invents(query: str, hits: list[Hit]) -> list[Hit]:
    first = hits[0]
    if first.item is not None:
        return [*hits, Hit(score=1.0, item=replace(first.item, id="not-a-real-id"))]
    assert first.turn is not None
    return [*hits, Hit(score=1.0, turn=replace(first.turn, id="not-a-real-id"))]


def repeats(query: str, hits: list[Hit]) -> list[Hit]:
    return [hits[0], *hits]


def returns_text(query: str, hits: list[Hit]) -> str:
    return "no"


@pytest.mark.parametrize(("bad", "message"), [
    (raises, "failed: RuntimeError"),
    (invents, r"not given \(not-a-real-id\)"),
    (repeats, "a hit twice"),
    (returns_text, "must return a list"),
])
def test_a_misbehaving_reranker_is_a_provider_error(
        db_url: str, clock: FakeClock, alice: UserMemory, teas: list[str],
        bad: Reranker, message: str) -> None:
    with Memory.open(db_url, clock=clock, embedder=None,
                     search=SearchOptions(reranker=bad)) as memory:
        handle = memory.for_user("alice")
        with pytest.raises(ProviderError, match=message) as caught:
            handle.search("green tea", touch=False)
        with pytest.raises(ProviderError, match=message):
            handle.search_conversations("green tea")
    if bad is raises:
        assert isinstance(caught.value.__cause__, RuntimeError)
    # A failed search recalled nothing.
    assert all(alice.get(i).use_count == 0 for i in teas)


def test_rerank_is_a_pure_function_over_hits(alice: UserMemory, teas: list[str]) -> None:
    hits = alice.search("green tea", top_k=6, touch=False)
    assert rerank(reverse, "green tea", [], 5) == []
    assert ids(rerank(reverse, "q", hits, 1)) == ids(hits)
    assert isinstance(reverse, Reranker)
