"""Agent events and the views over them, through the per-user handle, on both stores.

``record`` / ``ledger_events`` append and list agent events; ``episodic``, ``salient``,
``reflection_due``, ``reflect`` and ``beliefs`` must give exactly what the pure
functions of ``ledgermem.views`` give over the same events, at any past position,
never across users, and with the built-in ``HybridEventIndex`` as a rebuildable lens
that can only rank what the ledger holds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from ledgermem import (
    AsyncMemory,
    Event,
    InvalidInput,
    Memory,
    NotFound,
    ProviderError,
    UserMemory,
    views,
)
from ledgermem.ledger_index import HybridEventIndex
from ledgermem.ledger_views import is_reserved
from ledgermem.providers.llm import OpenAICompatibleLLM
from ledgermem.testing import HashEmbedder, ScriptedLLMServer
from tests.support import FakeClock

EVERY_3 = views.ViewConfig(reflect_every=3)


def record(handle: UserMemory, clock: FakeClock, kind: str, text: str, *,
           agent: str | None = None, **options: Any) -> Event:
    """Record one event a minute after the last, so times tell events apart."""
    clock.advance(minutes=1)
    return handle.record(kind, {"text": text}, agent_id=agent, **options)


def village(handle: UserMemory, clock: FakeClock) -> list[Event]:
    """A small mystery: world events, private thoughts and speech of three villagers."""
    return [
        record(handle, clock, "run.started", "Day one in the village"),
        record(handle, clock, "world.observed", "The bakery burned down at midnight"),
        record(handle, clock, "agent.thought", "The miller smelled of smoke", agent="baker"),
        record(handle, clock, "agent.spoke", "I was home all night", agent="miller"),
        record(handle, clock, "clue.found", "A flour sack by the bakery door",
               agent="miller"),
        record(handle, clock, "agent.thought", "Nobody saw me at the mill", agent="miller"),
        record(handle, clock, "world.observed", "Rain washed the square at dawn"),
        record(handle, clock, "agent.spoke", "The judge arrives tomorrow", agent="judge",
               visibility="global"),
    ]


def ids(events: list[Event]) -> list[str]:
    return [event.id for event in events]


def agent_kinds(mem: Memory, user: str) -> list[Event]:
    """The user's agent events, read under the API: every stored kind ledgermem does
    not write itself."""
    return [e for e in mem.store.events(user) if not is_reserved(e.kind)]


# record and list ----------------------------------------------------------------------
def test_recorded_events_are_listed_in_order_and_filtered(
        mem: Memory, alice: UserMemory, clock: FakeClock) -> None:
    alice.remember("Prefers green tea", category="preference")   # ledgermem's own events
    alice.add_turn("user", "Tell me a story about a village")
    events = village(alice, clock)
    assert alice.ledger_events() == events == agent_kinds(mem, "alice")
    stored = mem.store.events("alice")
    assert [e for e in stored if e.id in set(ids(events))] == events   # as stored
    first = events[0]
    assert (first.kind, first.payload, first.agent_id, first.visibility, first.user_id) == (
        "run.started", {"text": "Day one in the village"}, None, "private", "alice")
    assert events[-1].visibility == "global"

    assert alice.ledger_events(kinds=["agent.spoke"]) == [events[3], events[7]]
    assert alice.ledger_events(kinds=["world.observed", "clue.found"]) == [
        events[1], events[4], events[6]]
    assert alice.ledger_events(kinds=[]) == []
    assert alice.ledger_events(kinds=["never.recorded"]) == []
    assert alice.ledger_events(agent_id="miller") == events[3:6]
    assert alice.ledger_events(agent_id="miller", limit=2) == events[4:6]
    assert alice.ledger_events(since=events[2].ts, until=events[4].ts) == events[2:5]
    assert alice.ledger_events(until=clock.now - timedelta(minutes=6)) == events[:2]
    assert alice.ledger_events(limit=3) == events[-3:]                 # the newest
    # paging forward: the first ones after a cursor
    assert alice.ledger_events(after_event=events[1].id, limit=2) == events[2:4]
    assert alice.ledger_events(after_event=events[3].id, limit=2) == events[4:6]
    assert alice.ledger_events(after_event=events[-1].id) == []
    assert alice.ledger_events(after_event=events[0].id, kinds=["world.observed"],
                               agent_id=None) == [events[1], events[6]]


def test_record_takes_the_handles_agent_and_session_and_any_json(
        mem: Memory, clock: FakeClock) -> None:
    miller = mem.for_user("alice", agent_id="miller", session_id="day-1")
    payload = {"text": "Flour everywhere", "count": 3, "where": {"x": 1.5, "y": [1, None]}}
    event = miller.record("clue.found", payload)
    assert (event.agent_id, event.session_id, event.payload) == ("miller", "day-1", payload)
    other = miller.record("agent.spoke", agent_id="baker", session_id="day-2")
    assert (other.agent_id, other.session_id, other.payload) == ("baker", "day-2", {})
    assert mem.for_user("alice").ledger_events() == [event, other]
    # a hand-written reflection is an agent event too
    belief = miller.record("agent.reflected", {"belief": "The baker lies"},
                           visibility="global")
    assert miller.beliefs("miller") == [belief]


@pytest.mark.parametrize("kind", [
    "memory.added", "memory.deleted", "memory.anything_new", "turn.user", "turn.tool",
    "turns.queued", "llm.called", "llm.custom", "tool.called", "tool.other",
])
def test_kinds_ledgermem_writes_are_refused_and_nothing_is_stored(
        mem: Memory, alice: UserMemory, kind: str) -> None:
    alice.remember("Prefers green tea", category="preference")
    before = mem.store.events("alice")
    knowledge = alice.all_knowledge(include_superseded=True, limit=None)
    with pytest.raises(InvalidInput, match="ledgermem writes itself"):
        alice.record(kind, {"text": "sneaky", "id": before[0].subject_id})
    with pytest.raises(InvalidInput, match="ledgermem writes itself"):
        alice.ledger_events(kinds=[kind])
    assert mem.store.events("alice") == before
    assert alice.all_knowledge(include_superseded=True, limit=None) == knowledge


@pytest.mark.parametrize(("kind", "payload", "options", "message"), [
    ("", None, {}, "non-empty"),
    ("observed", None, {}, "joined by dots"),
    ("World.Observed", None, {}, "lower-case"),
    ("world..observed", None, {}, "joined by dots"),
    ("world.observed ", None, {}, "joined by dots"),
    ("a." + "b" * 99, None, {}, "at most 100"),
    (7, None, {}, "non-empty text"),
    ("world.observed", ["a list"], {}, "JSON object"),
    ("world.observed", {"text": "nul \x00"}, {}, "NUL"),
    ("world.observed", {"x": float("nan")}, {}, "JSON"),
    ("world.observed", {1: "int key"}, {}, "keys must be text"),
    ("world.observed", {"text": "x" * 100_001}, {}, "Limits.max_turn_chars"),
    ("world.observed", None, {"visibility": "public"}, "visibility"),
    ("world.observed", None, {"agent_id": "  "}, "agent_id"),
    ("world.observed", None, {"session_id": ""}, "session_id"),
])
def test_bad_input_to_record_is_refused_and_nothing_is_stored(
        mem: Memory, alice: UserMemory, kind: Any, payload: Any, options: dict[str, Any],
        message: str) -> None:
    before = mem.store.events("alice")
    with pytest.raises(InvalidInput, match=message):
        alice.record(kind, payload, **options)
    assert mem.store.events("alice") == before


def test_bad_listing_arguments_are_refused(alice: UserMemory, clock: FakeClock) -> None:
    event = record(alice, clock, "world.observed", "Fog")
    with pytest.raises(InvalidInput):
        alice.ledger_events(kinds="world.observed")  # one str, not a list of kinds
    with pytest.raises(InvalidInput):
        alice.ledger_events(limit=0)
    with pytest.raises(InvalidInput):
        alice.ledger_events(since="not a time at all")
    with pytest.raises(NotFound):
        alice.ledger_events(after_event="no-such-event")
    assert alice.ledger_events(after_event=event.id) == []


# views ---------------------------------------------------------------------------------
@pytest.mark.parametrize("agent", ["baker", "miller", "judge", "stranger"])
def test_views_through_the_api_are_the_pure_functions_over_the_same_events(
        mem: Memory, alice: UserMemory, clock: FakeClock, agent: str) -> None:
    alice.remember("The user likes mysteries", category="preference")
    village(alice, clock)
    alice.add_turn("user", "Who burned the bakery?")
    ledger = agent_kinds(mem, "alice")
    config = mem.views
    assert alice.episodic(agent) == views.episodic(ledger, agent, config)
    assert alice.episodic(agent, n=2) == views.episodic(ledger, agent, config, 2)
    assert alice.episodic(agent, n=0) == []
    for query in ("who burned the bakery?", "smoke at the mill", ""):
        assert alice.salient(agent, query) == views.salient(ledger, agent, query, config)
        assert alice.salient(agent, query, k=2) == views.salient(ledger, agent, query,
                                                                config, 2)
    assert alice.reflection_due(agent) == views.reflection_due(ledger, agent, config)
    assert alice.beliefs(agent) == views.beliefs(ledger, agent) == []
    # what an agent sees: its own events and the global ones, never ledgermem's own
    seen = alice.episodic(agent, n=100)
    assert all(e.agent_id == agent or e.visibility == "global"
               or e.kind in config.global_kinds for e in seen)
    assert not any(is_reserved(e.kind) for e in seen)
    if agent == "stranger":
        assert [e.kind for e in seen] == ["run.started", "world.observed",
                                          "world.observed", "agent.spoke"]


def test_the_views_follow_the_memorys_config(db_url: str, clock: FakeClock) -> None:
    config = views.ViewConfig(global_kinds=frozenset({"clue.found"}), episodic_n=2,
                              salience_k=1, reflect_every=2)
    with Memory.open(db_url, clock=clock, embedder=None, views=config) as mem:
        alice = mem.for_user("alice")
        events = village(alice, clock)
        ledger = alice.ledger_events()
        assert alice.episodic("baker") == views.episodic(ledger, "baker", config) == [
            events[4], events[7]]
        assert len(alice.salient("baker", "smoke")) == 1
        assert alice.reflection_due("baker")
    with pytest.raises(InvalidInput, match="ViewConfig"):
        Memory.open(db_url, embedder=None, views={"episodic_n": 2})
    with pytest.raises(InvalidInput, match="memory_index"):
        Memory.open(db_url, embedder=None, memory_index=object())


def test_views_as_of_an_event_id_or_a_time(alice: UserMemory, clock: FakeClock) -> None:
    events = village(alice, clock)
    for position in (0, 3, 5, len(events) - 1):
        cut = events[:position + 1]
        at = events[position]
        for as_of in (at.id, at.ts, clock.now - timedelta(minutes=len(events) - 1 - position,
                                                          seconds=-30)):
            assert alice.episodic("miller", as_of=as_of) == views.episodic(cut, "miller")
            assert alice.salient("miller", "bakery fire", as_of=as_of) == views.salient(
                cut, "miller", "bakery fire")
            assert alice.reflection_due("miller", as_of=as_of) == views.reflection_due(
                cut, "miller")
    assert alice.episodic("miller", as_of="2020-01-01T00:00:00+00:00") == []
    assert alice.episodic("miller", as_of="now") == views.episodic(events, "miller")
    with pytest.raises(NotFound):
        alice.episodic("miller", as_of="01900000-0000-7000-8000-000000000000")
    with pytest.raises(InvalidInput):
        alice.episodic("miller", as_of="not a time or an id")
    with pytest.raises(InvalidInput):
        alice.episodic("miller", as_of=12)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        alice.episodic("")
    with pytest.raises(InvalidInput):
        alice.salient("miller", "x" * 10_001)


def test_users_never_see_each_others_events_or_views(
        mem: Memory, alice: UserMemory, bob: UserMemory, clock: FakeClock) -> None:
    hers = village(alice, clock)
    his = record(bob, clock, "world.observed", "The bakery in bob's town is fine")
    assert bob.ledger_events() == [his]
    assert ids(alice.ledger_events()) == ids(hers)
    for agent in ("baker", "miller", "judge"):
        assert bob.episodic(agent, n=100) == [his]
        assert bob.salient(agent, "bakery burned", k=100) == [his]
        assert his not in alice.salient(agent, "bakery bob town fine", k=100)
        assert bob.beliefs(agent) == []
    # another user's event id is no position and no cursor, and says nothing of hers
    with pytest.raises(NotFound):
        bob.episodic("miller", as_of=hers[3].id)
    with pytest.raises(NotFound):
        bob.ledger_events(after_event=hers[3].id)
    alice.forget_user()
    assert alice.ledger_events() == [] and alice.episodic("miller") == []
    assert bob.ledger_events() == [his]


# reflection ------------------------------------------------------------------------------
@pytest.fixture
def llm_mem(db_url: str, clock: FakeClock, server: ScriptedLLMServer) -> Iterator[Memory]:
    llm = OpenAICompatibleLLM("scripted-model", server.url, timeout=2, retries=0,
                              validation_retries=0)
    with Memory.open(db_url, clock=clock, embedder=None, llm=llm, views=EVERY_3) as memory:
        yield memory
    llm.close()


def test_reflection_writes_a_global_belief_that_other_agents_then_see(
        llm_mem: Memory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    alice = llm_mem.for_user("alice")
    events = village(alice, clock)
    miller_saw = views.visible(events, "miller", EVERY_3)
    assert alice.reflection_due("miller")
    server.reply({"belief": "The baker suspects me", "based_on": [
        events[5].id, events[2].id, "made-up-id"], "supersedes": None})
    clock.advance(minutes=1)
    belief = alice.reflect("miller")
    assert belief is not None
    assert (belief.kind, belief.visibility, belief.agent_id, belief.user_id) == (
        "agent.reflected", "global", "miller", "alice")
    # it cites only what the miller could see (not the baker's private thought)
    assert belief.payload == {"belief": "The baker suspects me", "based_on": [events[5].id]}
    [request] = server.chat_requests
    assert request.body["messages"] == views.reflection_request(events, "miller", EVERY_3)
    assert all(e.id in request.text for e in miller_saw)
    assert events[2].id not in request.text
    # stored, seen by every agent, and the cadence starts again
    assert alice.ledger_events()[-1] == belief
    assert alice.episodic("baker")[-1] == belief
    assert belief in alice.salient("judge", "who does the baker suspect?", k=3)
    assert alice.beliefs("miller") == [belief] and alice.beliefs("baker") == []
    assert not alice.reflection_due("miller")
    assert alice.reflect("miller") is None                     # not due: no call
    assert len(server.chat_requests) == 1
    [usage] = alice.llm_usage()
    assert (usage["purpose"], usage["calls"], usage["errors"]) == ("reflection", 1, 0)
    # a later belief supersedes the first
    for text in ("The mill is quiet", "The baker watches the mill", "Bread is late"):
        record(alice, clock, "world.observed", text)
    server.reply({"belief": "The baker knows", "based_on": [], "supersedes": belief.id})
    second = alice.reflect("miller")
    assert second is not None and second.payload["supersedes"] == belief.id
    assert alice.beliefs("miller") == [second]
    assert alice.beliefs("miller", as_of=belief.id) == [belief]


def test_a_failed_reflection_raises_records_its_cost_and_writes_no_belief(
        llm_mem: Memory, server: ScriptedLLMServer, clock: FakeClock) -> None:
    alice = llm_mem.for_user("alice")
    village(alice, clock)
    before = alice.ledger_events()
    server.reply("not json at all")
    with pytest.raises(ProviderError, match="reflection"):
        alice.reflect("miller")
    assert alice.ledger_events() == before
    assert alice.reflection_due("miller")
    [usage] = alice.llm_usage()
    assert (usage["purpose"], usage["calls"], usage["errors"]) == ("reflection", 1, 1)


def test_without_an_llm_reflection_is_reported_due_but_not_made(
        mem: Memory, alice: UserMemory, clock: FakeClock,
        caplog: pytest.LogCaptureFixture) -> None:
    events = village(alice, clock)
    for _ in range(4):
        record(alice, clock, "agent.thought", "Thinking", agent="miller")
    before = mem.store.events("alice")
    assert alice.reflection_due("miller")
    with caplog.at_level(logging.INFO, logger="ledgermem"):
        assert alice.reflect("miller") is None
        assert alice.reflect("miller") is None
    assert [r.getMessage() for r in caplog.records] == [
        "reflection skipped: no LLM configured"]
    assert mem.store.events("alice") == before
    assert alice.reflection_due("miller")
    assert not alice.reflection_due("miller", as_of=events[2].id)


# the hybrid index ------------------------------------------------------------------------
@pytest.fixture
def index() -> HybridEventIndex:
    return HybridEventIndex(HashEmbedder(dimensions=256))


@pytest.fixture
def index_mem(db_url: str, clock: FakeClock, index: HybridEventIndex) -> Iterator[Memory]:
    with Memory.open(db_url, clock=clock, embedder=None, memory_index=index) as memory:
        yield memory


def test_the_hybrid_index_upgrades_relevance(index_mem: Memory, index: HybridEventIndex,
                                             clock: FakeClock) -> None:
    alice = index_mem.for_user("alice")
    fire = record(alice, clock, "world.observed", "The bakery burned down at midnight")
    record(alice, clock, "world.observed", "Sheep grazed on the northern hill")
    record(alice, clock, "world.observed", "The river flooded the old mill")
    ledger = alice.ledger_events()
    query = "bakers fire?"   # no word in common with the fire: Jaccard sees nothing
    by_keywords = views.scored(ledger, "miller", query)
    assert all(s.relevance == 0 for s in by_keywords)
    assert views.salient(ledger, "miller", query, k=1) != [fire]
    # the index's embeddings relate "bakers" to "bakery": the fire is recalled
    assert alice.salient("miller", query, k=1) == [fire]
    fresh = HybridEventIndex(HashEmbedder(dimensions=256))
    assert alice.salient("miller", query, k=2) == views.salient(ledger, "miller", query,
                                                                k=2, index=fresh)
    top = views.scored(ledger, "miller", query, index=fresh)[0]
    assert top.event == fire and 0 < top.relevance <= 1
    # scores are 0-1, the best hit of both rankings is 1
    hits = index.search("bakery midnight", 3)
    assert hits[0] == (fire.id, 1.0)
    assert all(0 < score <= 1 for _, score in hits)
    assert index.search("bakery", 0) == [] and index.search("", 3) == []


def test_the_index_is_idempotent_and_rebuilds_from_the_ledger(
        index_mem: Memory, index: HybridEventIndex, clock: FakeClock) -> None:
    alice = index_mem.for_user("alice")
    bob = index_mem.for_user("bob")
    village(alice, clock)
    queries = ("who burned the bakery?", "smoke mill", "rain at dawn")
    seen = {(agent, q): alice.salient(agent, q, k=3)
            for agent in ("baker", "miller") for q in queries}
    assert len(index) == len(alice.ledger_events())   # the baker's and the miller's
    for agent, q in seen:
        alice.salient(agent, q)                   # indexing again adds nothing
    assert len(index) == len(alice.ledger_events())
    results = {q: index.search(q, 20) for q in queries}
    assert all(results.values())
    index.clear()
    assert len(index) == 0 and index.search("bakery", 5) == []
    index.rebuild_from(alice.ledger_events())
    assert {q: index.search(q, 20) for q in queries} == results
    assert {(agent, q): alice.salient(agent, q, k=3) for agent, q in seen} == seen
    # cleared, the views index again what they read: the same answers
    index.clear()
    assert {(agent, q): alice.salient(agent, q, k=3) for agent, q in seen} == seen
    # another user's events in the shared index change nothing for her
    record(bob, clock, "world.observed", "Bob's bakery burned, with smoke and rain")
    bob.salient("miller", "bakery")
    assert {(agent, q): alice.salient(agent, q, k=3) for agent, q in seen} == seen


def test_a_hit_is_never_an_event_the_ledger_has_not_produced(
        index_mem: Memory, index: HybridEventIndex, clock: FakeClock) -> None:
    alice = index_mem.for_user("alice")
    bob = index_mem.for_user("bob")
    village(alice, clock)
    for n in range(12):                           # his events are in the shared index too
        record(bob, clock, "world.observed", f"Bob's bakery burned at midnight, {n}")
    bob.salient("miller", "bakery")
    phantom = Event("phantom", clock.iso(), "alice", "world.observed",
                    {"text": "The bakery burned down at midnight, the miller did it"})
    index.index([phantom])                        # in the index, never in the ledger
    assert "phantom" in index and len(index) == 13
    assert index.search("miller bakery burned midnight", 1)[0][0] == "phantom"
    ledger_ids = set(ids(alice.ledger_events()))
    for agent in ("baker", "miller", "judge"):
        for query in ("miller bakery burned midnight", "bob's bakery burned at midnight"):
            found = alice.salient(agent, query, k=100)
            assert set(ids(found)) <= ledger_ids
            assert set(ids(found)) == set(ids(alice.episodic(agent, n=100)))
            # neither the phantom nor bob's events show or push hers out of the top
            fresh = HybridEventIndex(HashEmbedder(dimensions=256))
            assert alice.salient(agent, query, k=2) == views.salient(
                alice.ledger_events(), agent, query, k=2, index=fresh)


class ContainsIndex:
    """Another ``MemoryIndex``: 1.0 for an event whose text holds the query, else no hit."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.texts)

    def index(self, events: Sequence[Event]) -> None:
        self.texts.update((e.id, views.event_text(e).lower()) for e in events)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        return [(i, 1.0) for i, text in self.texts.items() if query.lower() in text][:k]


def test_any_memory_index_can_be_attached(db_url: str, clock: FakeClock) -> None:
    other = ContainsIndex()
    with Memory.open(db_url, clock=clock, embedder=None, memory_index=other) as mem:
        alice = mem.for_user("alice")
        events = village(alice, clock)
        assert alice.salient("miller", "flour sack", k=1) == [events[4]]
        assert alice.salient("miller", "flour sack", k=1) == views.salient(
            alice.ledger_events(), "miller", "flour sack", k=1, index=ContainsIndex())
        assert len(other) == len(views.visible(events, "miller"))


def test_the_index_replaces_text_the_ledger_blanked(index: HybridEventIndex) -> None:
    event = Event("e1", "2026-06-01T12:00:00+00:00", "u", "agent.spoke",
                  {"text": "The secret recipe uses rye"})
    index.index([event, event])
    assert len(index) == 1 and index.search("secret recipe", 1)[0][0] == "e1"
    index.index([Event("e1", event.ts, "u", "agent.spoke", {"text": ""})])
    assert len(index) == 1 and index.search("secret recipe", 1) == []
    with pytest.raises(InvalidInput):
        index.index(["not an event"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput):
        index.search("x", -1)
    with pytest.raises(InvalidInput):
        HybridEventIndex(rrf_k=float("nan"))


# async -------------------------------------------------------------------------------------
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.sqlite_only  # the async layer only runs the sync methods in threads
async def test_the_async_handle_records_and_reads_views(mem: Memory) -> None:
    alice = AsyncMemory.from_sync(mem).for_user("alice")
    event = await alice.record("world.observed", {"text": "The bakery burned"})
    assert await alice.ledger_events() == [event]
    assert await alice.episodic("miller") == [event]
    assert await alice.salient("miller", "bakery") == [event]
    assert await alice.reflection_due("miller") is False
    assert await alice.reflect("miller") is None
    assert await alice.beliefs("miller") == []


def test_forgetting_a_user_leaves_none_of_her_text_in_the_index(
        index_mem: Memory, index: HybridEventIndex, clock: FakeClock) -> None:
    alice, bob = index_mem.for_user("alice"), index_mem.for_user("bob")
    secret = record(alice, clock, "agent.thought", "The locker code is quartz 4417",
                    agent="baker")
    his = record(bob, clock, "agent.thought", "Bob's quartz collection", agent="baker")
    assert alice.salient("baker", "quartz locker", k=1) == [secret]
    assert secret.id in index
    alice.forget_user()
    assert secret.id not in index
    assert bob.salient("baker", "quartz", k=1) == [his]  # indexed again from the ledger
