"""Properties over random ledgers of 2 users and 3 agents: no view ever returns an event
its agent may not see, and a list mixing users is refused by every view."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledgermem.errors import InvalidInput
from ledgermem.types import Event, Scope
from ledgermem.views import (
    DEFAULT_GLOBAL_KINDS,
    Belief,
    ViewConfig,
    beliefs,
    episodic,
    reflection_due,
    reflection_event,
    reflection_request,
    salient,
    scored,
    unreflected,
    until,
    visible,
)
from tests.views.ledger import at

AGENTS = ("a1", "a2", "a3")
KINDS = (*sorted(DEFAULT_GLOBAL_KINDS), "agent.spoke", "agent.thought", "clue.found",
         "turn.user")
WORDS = ("key", "mill", "fire", "baker", "night", "smoke")


@st.composite
def ledgers(draw: st.DrawFn, users: Sequence[str] = ("u1",)) -> list[Event]:
    """Events in ledger order, ids ``e0``…, of the given users."""
    size = draw(st.integers(0, 25))
    events = []
    for n in range(size):
        kind = draw(st.sampled_from(KINDS))
        payload: dict[str, Any] = {"text": " ".join(draw(st.lists(st.sampled_from(WORDS),
                                                                  max_size=4)))}
        if kind == "agent.reflected" and n and draw(st.booleans()):
            payload["supersedes"] = f"e{draw(st.integers(0, n - 1))}"
        events.append(Event(
            id=f"e{n}", ts=at(n), user_id=draw(st.sampled_from(users)), kind=kind,
            payload=payload, agent_id=draw(st.sampled_from((*AGENTS, None))),
            visibility=draw(st.sampled_from(("private", "global")))))
    return events


def may_see(event: Event, agent: str, config: ViewConfig) -> bool:
    """The rule, restated here rather than imported."""
    return (event.agent_id == agent or event.visibility == "global"
            or event.kind in config.global_kinds)


class EveryHit:
    """An index that claims every id it has heard of, and some it has not, is relevant."""

    def __init__(self, ledger: Sequence[Event]) -> None:
        self.ledger = ledger

    def index(self, events: Sequence[Event]) -> None:
        pass

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        return [("ghost", 1.0), *((e.id, 1.0) for e in self.ledger)][:k]


CONFIGS = st.sampled_from([ViewConfig(reflect_every=2),
                           ViewConfig(global_kinds=frozenset({"clue.found"}),
                                      reflect_every=1)])


def views(ledger: list[Event], agent: str, config: ViewConfig, query: str
          ) -> dict[str, list[Event]]:
    """Every view's events for ``agent``."""
    answer = Belief(belief="b", based_on=[e.id for e in ledger] + ["ghost"])
    belief = reflection_event(ledger, agent, answer, config, scope=Scope("u1"), now=at(99))
    cited = {e.id: e for e in ledger}
    return {
        "visible": visible(ledger, agent, config),
        "episodic": episodic(ledger, agent, config),
        "salient": salient(ledger, agent, query, config, k=5),
        "salient_indexed": salient(ledger, agent, query, config, k=5,
                                   index=EveryHit(ledger)),
        "scored": [s.event for s in scored(ledger, agent, query, config)],
        "beliefs": beliefs(ledger, agent),
        "unreflected": unreflected(ledger, agent, config),
        "based_on": [cited[i] for i in belief.payload["based_on"]],
    }


@settings(max_examples=150, deadline=None)
@given(ledger=ledgers(), agent=st.sampled_from(AGENTS), config=CONFIGS,
       query=st.text(alphabet=" abcdefghijklmnopqrstuvwxyz", max_size=20))
def test_no_view_returns_an_event_its_agent_may_not_see(
        ledger: list[Event], agent: str, config: ViewConfig, query: str) -> None:
    for name, events in views(ledger, agent, config, query).items():
        hidden = [e.id for e in events if not may_see(e, agent, config)]
        assert hidden == [], f"{name} showed {agent} {hidden}"
    assert all(e.agent_id == agent for e in beliefs(ledger, agent))
    # the request never quotes an event the agent may not see
    prompt = "\n".join(m["content"] for m in reflection_request(ledger, agent, config))
    shown = {e.id for e in ledger if f"[{e.id}]" in prompt}
    assert all(may_see(e, agent, config) for e in ledger if e.id in shown)
    # and a view at a past position is the same view of the shorter ledger
    if ledger:
        cut = ledger[len(ledger) // 2].id
        past = until(ledger, event_id=cut)
        assert episodic(past, agent, config) == [e for e in visible(ledger, agent, config)
                                                 if e in past][-config.episodic_n:]


VIEW_CALLS: dict[str, Callable[[list[Event], str], object]] = {
    "visible": visible,
    "episodic": episodic,
    "salient": lambda ledger, agent: salient(ledger, agent, "key"),
    "scored": lambda ledger, agent: scored(ledger, agent, "key"),
    "beliefs": beliefs,
    "unreflected": unreflected,
    "reflection_due": reflection_due,
    "reflection_request": reflection_request,
}


@settings(max_examples=100, deadline=None)
@given(ledger=ledgers(users=("u1", "u2")), agent=st.sampled_from(AGENTS))
def test_a_ledger_of_two_users_is_refused_by_every_view(ledger: list[Event], agent: str
                                                        ) -> None:
    mixed = len({e.user_id for e in ledger}) > 1
    for view in VIEW_CALLS.values():
        if mixed:
            with pytest.raises(InvalidInput, match="users"):
                view(ledger, agent)
        else:
            view(ledger, agent)  # one user (or none): answered, whoever it is
