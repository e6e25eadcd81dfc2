"""Reflection: the cadence, the belief state, and a reflection through a real (scripted)
OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ledgermem.errors import InvalidInput, ProviderError
from ledgermem.providers.llm import OpenAICompatibleLLM
from ledgermem.testing import ScriptedLLMServer
from ledgermem.types import Event, Scope
from ledgermem.views import (
    Belief,
    ViewConfig,
    beliefs,
    episodic,
    reflect,
    reflection_due,
    reflection_event,
    reflection_request,
    unreflected,
    visible,
)
from tests.views.ledger import T0, at, ev, ids

EVERY_3 = ViewConfig(reflect_every=3)
SCOPE = Scope(user_id="u1", session_id="u1:village")


def seen_by_miller() -> list[Event]:
    return [
        ev(1, "world.observed", "The bakery burned down"),
        ev(2, "agent.thought", "I was at the mill all night", agent="miller"),
        ev(3, "agent.thought", "I started the fire", agent="baker"),  # private to the baker
        ev(4, "agent.spoke", "The baker smelled of smoke", agent="miller"),
    ]


@pytest.fixture
def llm(server: ScriptedLLMServer) -> Iterator[OpenAICompatibleLLM]:
    client = OpenAICompatibleLLM("scripted-model", server.url, timeout=10.0, retries=0,
                                 validation_retries=0)
    yield client
    client.close()


def test_a_reflection_is_due_after_n_visible_events_since_the_last_one() -> None:
    ledger = seen_by_miller()
    assert ids(unreflected(ledger, "miller")) == ["e1", "e2", "e4"]
    assert reflection_due(ledger, "miller", EVERY_3)
    assert not reflection_due(ledger[:3], "miller", EVERY_3)  # e3 is not the miller's to see
    assert not reflection_due(ledger, "miller")  # the default is 10
    ledger.append(ev(5, "agent.reflected", belief="The baker is hiding something",
                     agent="miller", visibility="global"))
    assert unreflected(ledger, "miller") == []
    assert not reflection_due(ledger, "miller", EVERY_3)
    # another agent's reflection is something the miller saw, not a reflection of its own
    ledger += [ev(6, "agent.reflected", belief="The miller suspects me", agent="baker",
                  visibility="global"),
               ev(7, "agent.thought", "private to the baker", agent="baker"),
               ev(8, "world.observed", "Rain")]
    assert ids(unreflected(ledger, "miller")) == ["e6", "e8"]
    assert not reflection_due(ledger, "miller", EVERY_3)
    ledger.append(ev(9, "agent.spoke", "Where were you?", agent="miller"))
    assert reflection_due(ledger, "miller", EVERY_3)
    # the baker reflected at e6 and has seen e7, e8 since (e9 is the miller's own)
    assert ids(unreflected(ledger, "baker")) == ["e7", "e8"]


def test_beliefs_are_the_agents_reflections_less_the_superseded() -> None:
    ledger = [
        ev(1, "agent.reflected", belief="The baker is kind", agent="miller"),
        ev(2, "agent.reflected", belief="The miller is odd", agent="baker"),
        ev(3, "agent.reflected", belief="The baker is hiding something", agent="miller",
           supersedes="e1"),
        ev(4, "agent.reflected", belief="The well is cursed", agent="miller"),
        # nobody retracts another agent's belief
        ev(5, "agent.reflected", belief="No curse", agent="baker", supersedes="e4"),
        ev(6, "agent.reflected", belief="The baker started the fire", agent="miller",
           supersedes="e3"),
    ]
    assert ids(beliefs(ledger, "miller")) == ["e4", "e6"]
    assert ids(beliefs(ledger, "baker")) == ["e2", "e5"]
    assert ids(beliefs(ledger[:3], "miller")) == ["e3"]
    assert beliefs(ledger, "judge") == []
    with pytest.raises(InvalidInput, match="users"):
        beliefs([*ledger, ev(9, "agent.reflected", belief="x", agent="miller", user="u2")],
                "miller")


def test_the_request_shows_current_beliefs_and_what_was_seen_since() -> None:
    ledger = [ev(1, "agent.reflected", belief="The baker is kind", agent="miller",
                 visibility="global"),
              *seen_by_miller()[1:]]
    system, user = reflection_request(ledger, "miller", EVERY_3)
    assert (system["role"], user["role"]) == ("system", "user")
    assert "'miller'" in system["content"] and "supersedes" in system["content"]
    text = user["content"]
    assert "[e1] 2026-06-01 12:01:00 agent.reflected (miller): The baker is kind" in text
    assert "[e4] 2026-06-01 12:04:00 agent.spoke (miller): The baker smelled of smoke" in text
    assert "I started the fire" not in text and "[e3]" not in text
    assert text.index("[e1]") < text.index("[e2]") < text.index("[e4]")
    # at most reflect_window events, the newest
    long = [ev(i, "agent.spoke", f"line {i}", agent="m") for i in range(1, 30)]
    shown = reflection_request(long, "m", ViewConfig(reflect_window=5))[1]["content"]
    assert "[e24]" not in shown and "[e25]" in shown and "[e29]" in shown


def test_a_belief_keeps_only_visible_citations_and_a_real_supersedes() -> None:
    ledger = [*seen_by_miller(),
              ev(5, "agent.reflected", belief="The baker is kind", agent="miller",
                 visibility="global")]
    answer = Belief(belief="  The baker started the fire ",
                    based_on=["e4", "e3", "e404", "e1", "e4"], supersedes="e2")
    event = reflection_event(ledger, "miller", answer, scope=SCOPE, now=at(6))
    assert (event.kind, event.visibility, event.user_id, event.agent_id, event.session_id,
            event.ts) == ("agent.reflected", "global", "u1", "miller", "u1:village", at(6))
    # e3 is the baker's private thought, e404 never happened; e2 is no belief
    assert event.payload == {"belief": "The baker started the fire", "based_on": ["e4", "e1"]}
    superseding = reflection_event(ledger, "miller", answer.model_copy(
        update={"supersedes": "e5"}), scope=SCOPE, now=T0)
    assert superseding.payload["supersedes"] == "e5"
    assert superseding.ts == "2026-06-01T12:00:00.000000+00:00"
    assert ids(beliefs([*ledger, superseding], "miller")) == [superseding.id]
    # every agent sees it
    assert superseding in visible([*ledger, superseding], "judge")


def test_a_belief_is_written_for_the_right_user_and_agent_only() -> None:
    answer = Belief(belief="x")
    with pytest.raises(InvalidInput, match="user"):
        reflection_event(seen_by_miller(), "miller", answer, scope=Scope("u2"), now=at(9))
    with pytest.raises(InvalidInput, match="agent"):
        reflection_event(seen_by_miller(), "miller", answer,
                         scope=Scope("u1", agent_id="baker"), now=at(9))
    with pytest.raises(InvalidInput, match="timezone"):
        reflection_event(seen_by_miller(), "miller", answer, scope=SCOPE,
                         now="2026-06-01T12:00:00")
    with pytest.raises(InvalidInput, match="text"):
        reflection_event(seen_by_miller(), "miller", Belief.model_construct(
            belief=" ", based_on=[], supersedes=None), scope=SCOPE, now=at(9))


def test_the_belief_schema_refuses_a_blank_belief() -> None:
    with pytest.raises(ValueError, match="belief"):
        Belief(belief="   ")
    assert Belief(belief="b") == Belief(belief="b", based_on=[], supersedes=None)


def test_reflect_asks_the_model_once_due_and_returns_the_event(
        server: ScriptedLLMServer, llm: OpenAICompatibleLLM) -> None:
    ledger = seen_by_miller()
    server.reply({"belief": "The baker started the fire", "based_on": ["e4", "e3"],
                  "supersedes": None})
    event = reflect(ledger, "miller", llm, EVERY_3, scope=SCOPE, now=at(5))
    assert event is not None
    assert event.payload == {"belief": "The baker started the fire", "based_on": ["e4"]}
    assert (event.kind, event.visibility, event.agent_id) == (
        "agent.reflected", "global", "miller")
    [request] = server.chat_requests
    assert request.body["messages"] == reflection_request(ledger, "miller", EVERY_3)
    assert request.body["response_format"]["json_schema"]["name"] == "Belief"
    # appended, it resets the cadence and shows in everyone's memory
    ledger.append(event)
    assert not reflection_due(ledger, "miller", EVERY_3)
    assert event in episodic(ledger, "baker")
    assert beliefs(ledger, "miller") == [event]


def test_reflect_makes_no_call_when_no_reflection_is_due(
        server: ScriptedLLMServer, llm: OpenAICompatibleLLM) -> None:
    assert reflect(seen_by_miller(), "miller", llm, scope=SCOPE, now=at(5)) is None
    assert server.chat_requests == []


def test_a_model_that_gives_no_valid_belief_raises_provider_error(
        server: ScriptedLLMServer, llm: OpenAICompatibleLLM) -> None:
    server.reply("not json at all", json.dumps({"belief": ""}))
    for _ in range(2):
        with pytest.raises(ProviderError, match="Belief"):
            reflect(seen_by_miller(), "miller", llm, EVERY_3, scope=SCOPE, now=at(5))
