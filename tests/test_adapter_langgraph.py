"""The LangGraph adapter against LangGraph's own classes: the store operations compared
with LangGraph's reference ``InMemoryStore``, search with a query and a filter, TTL on a
fake clock, isolation, bad input, and a compiled graph that stores on one thread and
recalls on another (sync and async, and after reopening the database).

The comparison with the reference store and TTL run on SQLite and PostgreSQL (``mem``);
the rest on a SQLite file."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError, PutOp
from langgraph.store.memory import InMemoryStore

from ledgermem import Memory
from ledgermem.adapters import MissingExtra
from ledgermem.adapters.langgraph import LedgermemStore, NamespaceError
from ledgermem.errors import InvalidInput
from ledgermem.testing import HashEmbedder
from ledgermem.types import ItemQuery
from ledgermem.validation import MAX_JSON_CHARS
from tests.support import FakeClock

NS = ("alice", "memories")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def memory(tmp_path: Path, clock: FakeClock) -> Iterator[Memory]:
    opened = Memory.open(tmp_path / "graph.db", clock=clock, embedder=HashEmbedder())
    yield opened
    opened.close()


@pytest.fixture
def store(memory: Memory) -> LedgermemStore:
    return LedgermemStore(memory)


def fill(target: BaseStore) -> None:
    target.put(NS, "diet", {"text": "Vegetarian, eats no fish", "kind": "food", "n": 1})
    target.put(NS, "city", {"text": "Lives in Porto", "kind": "place", "n": 2})
    target.put(("alice", "memories", "work"), "boss", {"text": "Manager is Sarah Chen",
                                                      "kind": "person", "n": 3})
    target.put(("alice", "profile"), "name", {"text": "Alice", "tags": ["a", "b"]})
    target.put(("bob", "memories"), "diet", {"text": "Eats fish every day", "kind": "food"})
    target.put(NS, "city", {"text": "Lives in Lisbon", "kind": "place", "n": 5})  # update
    target.delete(("alice", "profile"), "name")


def shape(items: list[Any]) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    return sorted((item.namespace, item.key, item.value) for item in items)


# store semantics, against LangGraph's reference store --------------------------------------
def test_get_put_delete_search_and_list_agree_with_langgraph_in_memory_store(
        mem: Memory) -> None:
    store = LedgermemStore(mem)  # on SQLite and PostgreSQL
    reference = InMemoryStore()
    fill(reference)
    fill(store)
    for namespace, key in ((NS, "diet"), (NS, "city"), (("alice", "profile"), "name"),
                           (("bob", "memories"), "diet"), (NS, "missing")):
        mine, theirs = store.get(namespace, key), reference.get(namespace, key)
        assert (mine and (mine.namespace, mine.key, mine.value)) == \
            (theirs and (theirs.namespace, theirs.key, theirs.value))
    for prefix, filters in (((("alice",)), None), (NS, None), (NS, {"kind": "food"}),
                            (("alice",), {"n": {"$gte": 2}}), (("alice",), {"n": {"$ne": 1}}),
                            (("alice",), {"kind": "food", "n": {"$lt": 1}}),
                            (("bob",), {"kind": "food"})):
        assert shape(store.search(prefix, filter=filters)) == \
            shape(reference.search(prefix, filter=filters)), (prefix, filters)
    for options in ({"prefix": ("alice",)}, {"prefix": ("alice",), "max_depth": 2},
                    {"prefix": ("alice",), "suffix": ("work",)},
                    {"prefix": ("alice", "*", "work")}, {"prefix": ("bob",)}):
        # (the reference store keeps listing a namespace after its last item is deleted)
        assert store.list_namespaces(**options) == [
            ns for ns in reference.list_namespaces(**options) if reference.search(ns)]

def test_an_update_keeps_when_the_item_was_created(store: LedgermemStore,
                                                   clock: FakeClock) -> None:
    store.put(NS, "city", {"text": "Lives in Porto"})
    first = store.get(NS, "city")
    clock.advance(minutes=5)
    store.put(NS, "city", {"text": "Lives in Lisbon"})
    city = store.get(NS, "city")
    assert first is not None and city is not None
    assert city.created_at == first.created_at < city.updated_at
    assert city.value == {"text": "Lives in Lisbon"}
    assert len(store.search(NS)) == 1  # one key, one item


class TickingClock(FakeClock):
    """A clock that moves on by a millisecond every time it is read, as a real one does."""

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def test_a_first_put_is_created_and_updated_at_one_moment(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path / "tick.db", clock=TickingClock(), embedder=None)
    store = LedgermemStore(memory)
    try:
        # as LangGraph's InMemoryStore: updated_at is never before created_at
        for target in (store, InMemoryStore()):
            target.put(NS, "k1", {"text": "likes tea"})
            first = target.get(NS, "k1")
            assert first is not None and first.created_at <= first.updated_at
            target.put(NS, "k1", {"text": "likes green tea"})
            again = target.get(NS, "k1")
            assert again is not None and first.created_at <= again.created_at \
                <= again.updated_at
        store.put(NS, "k2", {"text": "likes coffee"})
        new = store.get(NS, "k2")
        [found] = store.search(NS, filter={"text": "likes coffee"})
        assert new is not None and new.created_at == new.updated_at  # one moment
        assert (found.created_at, found.updated_at) == (new.created_at, new.updated_at)
        updated = store.get(NS, "k1")  # (ledgermem keeps the first put's created_at)
        assert updated is not None and updated.created_at < updated.updated_at
    finally:
        memory.close()


def test_search_with_a_query_ranks_by_meaning_and_words_within_the_prefix_and_filter(
        store: LedgermemStore, memory: Memory) -> None:
    fill(store)
    memory.flush()  # embeddings written in the background
    hits = store.search(("alice",), query="does she eat fish?")
    assert hits[0].key == "diet"
    assert hits[0].score is not None and hits[0].score > 0
    assert all(h.namespace[0] == "alice" for h in hits)  # bob's fish never shows
    assert {h.value["kind"] for h in store.search(("alice",), query="fish",
                                                   filter={"kind": "place"})} <= {"place"}
    assert store.search(("alice",), query="Sarah Chen manager")[0].key == "boss"
    deeper = store.search(("alice", "memories", "work"), query="vegetarian fish Lisbon")
    assert [h.key for h in deeper] in ([], ["boss"])  # diet and city are not under it
    assert store.search(("alice",), query="fish", limit=1, offset=1) == \
        store.search(("alice",), query="fish")[1:2]
    # the items are alice's ledgermem knowledge, found by ledgermem's own API too
    found = memory.for_user("alice").search("Lisbon")
    assert found[0].content == "Lives in Lisbon\nplace"  # every string of the value
    assert found[0].item is not None and found[0].item.context == "langgraph:memories"


def test_the_index_fields_decide_what_an_item_is_found_by(tmp_path: Path) -> None:
    memory = Memory.open(tmp_path / "words.db", embedder=None)  # found by words alone
    store = LedgermemStore(memory, index=["summary"])
    store.put(NS, "trip", {"summary": "Kayaking in Norway", "notes": "bring a raincoat"})
    store.put(NS, "raw", {"summary": "Raincoat shopping"}, index=False)
    assert [h.key for h in store.search(NS, query="kayaking")] == ["trip"]
    assert [h.key for h in store.search(NS, query="raincoat")] == []  # notes: not indexed
    assert [h.key for h in store.search(NS, query="raw")] == ["raw"]  # index=False: the key
    memory.close()


# TTL ----------------------------------------------------------------------------------------
def test_ttl_expires_refreshes_on_read_and_is_swept(mem: Memory, clock: FakeClock) -> None:
    memory = mem  # on SQLite and PostgreSQL
    store = LedgermemStore(memory, ttl={"default_ttl": 10})
    store.put(NS, "short", {"text": "Parked on level 3"}, ttl=1)
    store.put(NS, "default", {"text": "Wifi code 1234"})
    store.put(NS, "forever", {"text": "Born in 1990"}, ttl=None)
    clock.advance(seconds=50)
    assert store.get(NS, "short") is not None  # read: restarts its minute
    clock.advance(seconds=50)
    assert store.get(NS, "short", refresh_ttl=False) is not None
    clock.advance(seconds=20)  # 70 s since the last refreshing read
    assert store.get(NS, "short") is None
    assert "short" not in [h.key for h in store.search(NS, query="parked level")]
    clock.advance(minutes=10)
    assert {h.key for h in store.search(NS)} == {"forever"}
    assert store.list_namespaces(prefix=("alice",)) == [NS]
    assert store.sweep_ttl() == 2
    items, _ = memory.store.query_items("alice", ItemQuery(include_superseded=True))
    assert [i.content for i in items] == ["Born in 1990"]  # the others are forgotten


def test_a_bad_or_non_positive_ttl_is_refused_and_stores_nothing(
        store: LedgermemStore, memory: Memory) -> None:
    for ttl in ("abc", "5", -1, -0.5, 0, 0.0, float("nan"), float("inf"), True, 10**12):
        with pytest.raises(InvalidInput, match="ttl must be a number of minutes") as raised:
            store.put(NS, "k", {"text": "x"}, ttl=ttl)  # type: ignore[arg-type]
        assert isinstance(raised.value, ValueError), ttl  # what the stores' callers catch
        with pytest.raises(InvalidInput):
            store.batch([PutOp(NS, "k", {"text": "x"}, ttl=ttl)])  # type: ignore[arg-type]
    assert memory.store.user_ids() == []
    with pytest.raises(InvalidInput, match="ttl must be"):
        LedgermemStore(memory, ttl={"default_ttl": -1})
    store.put(NS, "k", {"text": "x"}, ttl=0.5)  # half a minute is a TTL
    assert store.get(NS, "k") is not None


def test_a_value_over_the_json_cap_is_refused_naming_the_limit(store: LedgermemStore,
                                                               memory: Memory) -> None:
    reference = InMemoryStore()
    value = {"text": "z" * (MAX_JSON_CHARS + 1)}
    reference.put(NS, "big", value)  # the reference keeps anything in memory
    with pytest.raises(InvalidInput, match="at most 100,000") as raised:
        store.put(NS, "big", value)
    assert "'big'" in str(raised.value) and "MAX_JSON_CHARS" in str(raised.value)
    assert store.get(NS, "big") is None and memory.store.user_ids() == []
    # a store returns what was put: a value under the limit comes back whole
    fits = {"text": "z" * 99_000, "tags": ["a"]}
    store.put(NS, "big", fits)
    found = store.get(NS, "big")
    assert found is not None and found.value == fits


# isolation and bad input ------------------------------------------------------------------
def test_no_operation_reads_across_users(memory: Memory) -> None:
    store = LedgermemStore(memory, user_index=1)
    store.put(("memories", "alice"), "k", {"text": "Alice's secret"})
    assert store.search(("memories", "bob"), query="secret") == []
    assert store.get(("memories", "bob"), "k") is None
    for call in (lambda: store.search(("memories",), query="secret"),
                 lambda: store.list_namespaces(),
                 lambda: store.list_namespaces(prefix=("memories", "*")),
                 lambda: store.put(("memories",), "k", {"text": "x"})):
        with pytest.raises(NamespaceError) as raised:
            call()
        assert isinstance(raised.value, InvalidInput)
        assert isinstance(raised.value, InvalidNamespaceError)
    assert memory.store.user_ids() == ["alice"]


def test_bad_input_is_refused_and_stores_nothing(store: LedgermemStore, memory: Memory) -> None:
    with pytest.raises(InvalidInput):
        store.put(NS, "", {"text": "no key"})
    with pytest.raises(InvalidInput):
        store.put(NS, "nul", {"text": "NUL \x00 inside"})
    with pytest.raises(InvalidInput):
        store.search(NS, filter={"n": {"$near": 1}})
    with pytest.raises(InvalidInput):
        store.batch([object()])  # type: ignore[list-item]
    with pytest.raises(InvalidInput):
        LedgermemStore(memory, user_index=-1)
    assert memory.store.user_ids() == []


# a graph: stores on one thread, recalls on another ----------------------------------------
class State(TypedDict):
    text: str
    answer: str


def build(store: BaseStore) -> Any:
    def remember(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, str]:
        user = config["configurable"]["user_id"]
        if state["text"].startswith("remember "):
            fact = state["text"].removeprefix("remember ")
            store.put((user, "memories"), str(abs(hash(fact))), {"text": fact})
            return {"answer": "noted"}
        return {}

    def recall(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, str]:
        if state.get("answer") == "noted":
            return {}
        hits = store.search((config["configurable"]["user_id"], "memories"),
                            query=state["text"], limit=1)
        return {"answer": hits[0].value["text"] if hits else "I don't know"}

    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_node("recall", recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(checkpointer=InMemorySaver(), store=store)


def config(thread: str, user: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "user_id": user}}


@pytest.mark.anyio
async def test_a_graph_stores_on_one_thread_and_recalls_on_another(
        tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "threads.db"
    memory = Memory.open(path, clock=clock, embedder=None)
    graph = build(LedgermemStore(memory))
    said = graph.invoke({"text": "remember my locker code is 4411", "answer": ""},
                        config("thread-1", "alice"))
    assert said["answer"] == "noted"
    asked = await graph.ainvoke({"text": "what is my locker code?", "answer": ""},
                                config("thread-2", "alice"))
    assert asked["answer"] == "my locker code is 4411"
    other = graph.invoke({"text": "what is my locker code?", "answer": ""},
                         config("thread-3", "bob"))
    assert other["answer"] == "I don't know"
    memory.close()

    memory = Memory.open(path, clock=clock, embedder=None)  # a new process
    try:
        again = build(LedgermemStore(memory)).invoke(
            {"text": "locker code?", "answer": ""}, config("thread-4", "alice"))
        assert again["answer"] == "my locker code is 4411"
    finally:
        memory.close()


def test_importing_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.store.base", None)
    monkeypatch.delitem(sys.modules, "ledgermem.adapters.langgraph")
    with pytest.raises(MissingExtra, match=r"ledgermem\[langgraph\]"):
        importlib.import_module("ledgermem.adapters.langgraph")


def test_the_example_runs_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from examples.langgraph_store import main

    assert main(["--db", str(tmp_path / "example.db"), "--keyword-only"]) == 0
    out = capsys.readouterr().out
    assert "[thread 2] assistant> You told me: I am allergic to peanuts" in out
