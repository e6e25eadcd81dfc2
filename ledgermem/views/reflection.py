"""Reflection: an agent turns what it has seen into a belief, and the belief into an event.

Once an agent has seen ``reflect_every`` visible events since its last reflection, it
is due: one LLM call asks for a single high-level belief, citing the events it rests
on, and the answer becomes an ``agent.reflected`` event that every agent of the user
sees. A belief may supersede one of the agent's earlier ones; ``beliefs`` gives the
belief state (the agent's reflections no later one superseded). Beliefs thus stand in
for the raw events they summarise, which keeps a long-lived agent's memory small.

Everything but ``reflect`` is pure. ``reflect`` calls ``LLM.complete`` and lets its
``ProviderError`` through; a pipeline that must not fail and accounts for its calls
uses ``ledgermem.pipeline.calls.ask`` on ``reflection_request(...)`` with ``Belief``
instead, then ``reflection_event`` on the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from ..domain.events import new_event
from ..errors import InvalidInput
from ..providers.llm import LLM
from ..types import Event, Scope
from .config import REFLECTED, ViewConfig
from .context import event_line
from .visibility import DEFAULT_CONFIG, check_agent, check_one_user, parse_moment, visible

__all__ = ["Belief", "beliefs", "reflect", "reflection_due", "reflection_event",
           "reflection_request", "unreflected"]

PURPOSE = "reflection"
"""The purpose an LLM call of reflection is accounted under."""


class Belief(BaseModel):
    """What a reflection answers: one belief, the events behind it, what it replaces."""

    belief: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="One high-level belief, judgement or conclusion, in one or two "
                    "sentences.")
    based_on: list[str] = Field(
        default_factory=list, description="Ids of the events that support the belief.")
    supersedes: str | None = Field(
        default=None, description="Id of one of your current beliefs this one replaces, "
                                  "or null.")


def unreflected(events: Sequence[Event], agent_id: str,
                config: ViewConfig = DEFAULT_CONFIG) -> list[Event]:
    """The visible events after ``agent_id``'s last own reflection (all of them if it
    never reflected), oldest first.

    Raises:
        InvalidInput: as ``visible``.
    """
    seen = visible(events, agent_id, config)
    last = max((i for i, event in enumerate(seen) if _own_reflection(event, agent_id)),
               default=-1)
    return seen[last + 1:]


def reflection_due(events: Sequence[Event], agent_id: str,
                   config: ViewConfig = DEFAULT_CONFIG) -> bool:
    """Whether ``agent_id`` has seen ``config.reflect_every`` visible events since it
    last reflected. Needs no LLM: a caller without one can still report it.

    Raises:
        InvalidInput: as ``visible``.
    """
    return len(unreflected(events, agent_id, config)) >= config.reflect_every


def beliefs(events: Sequence[Event], agent_id: str) -> list[Event]:
    """``agent_id``'s belief state: its ``agent.reflected`` events that no later one of
    its own superseded, oldest first.

    Raises:
        InvalidInput: events of several users, or an empty ``agent_id``.
    """
    check_agent(agent_id)
    check_one_user(events)
    current: dict[str, Event] = {}
    for event in events:
        if _own_reflection(event, agent_id):
            replaced = event.payload.get("supersedes")
            if isinstance(replaced, str):
                current.pop(replaced, None)
            current[event.id] = event
    return list(current.values())


def reflection_request(events: Sequence[Event], agent_id: str,
                       config: ViewConfig = DEFAULT_CONFIG) -> list[dict[str, str]]:
    """The chat messages that ask for ``agent_id``'s next belief (answered as ``Belief``).

    They show the agent's current beliefs and the newest ``config.reflect_window``
    events it has seen since it last reflected, each with its id to cite.

    Raises:
        InvalidInput: as ``visible``.
    """
    recent = unreflected(events, agent_id, config)[-config.reflect_window:]
    held = beliefs(events, agent_id)
    system = (
        f"You are the reflective mind of the agent {agent_id!r}. From the events it has "
        "seen, draw one high-level belief: an insight about people, motives or the state "
        "of the world that will still matter later, not a summary of a single event. "
        "List in based_on the ids (in square brackets below) of the events that support "
        "it. If the belief revises or contradicts one of the current beliefs, give that "
        "belief's id in supersedes; otherwise leave supersedes null. Answer in JSON with "
        "the keys belief, based_on and supersedes.")
    parts = ["Current beliefs:",
             "\n".join(event_line(e, with_id=True) for e in held) or "(none yet)",
             "",
             "Events seen since the last reflection, oldest first:",
             "\n".join(event_line(e, with_id=True) for e in recent) or "(none)"]
    return [{"role": "system", "content": system},
            {"role": "user", "content": "\n".join(parts)}]


def reflection_event(events: Sequence[Event], agent_id: str, belief: Belief,
                     config: ViewConfig = DEFAULT_CONFIG, *, scope: Scope,
                     now: str | datetime) -> Event:
    """The globally visible ``agent.reflected`` event recording ``belief``.

    Its payload is ``{belief, based_on, supersedes?}``. ``based_on`` keeps only ids of
    events ``agent_id`` sees (each once): a model cannot make an agent cite what it may
    not see or what never happened. ``supersedes`` is kept only when it names one of
    the agent's current beliefs.

    Args:
        events: the user's ledger the belief was drawn from.
        agent_id: the reflecting agent.
        belief: the model's answer.
        config: which kinds are globally visible.
        scope: the user (and session) to write under; its agent, when set, must be
            ``agent_id``.
        now: the event's time (an aware ``datetime`` or an ISO 8601 string).

    Raises:
        InvalidInput: as ``visible``; a blank belief; a scope of another user or agent.
    """
    seen = visible(events, agent_id, config)
    user = check_one_user(events)
    if user is not None and scope.user_id != user:
        raise InvalidInput("the scope's user is not the user of these events")
    if scope.agent_id not in (None, agent_id):
        raise InvalidInput(f"the scope's agent {scope.agent_id!r} is not {agent_id!r}")
    text = belief.belief.strip()
    if not text:
        raise InvalidInput("a belief needs some text")
    allowed = {event.id for event in seen}
    based_on = list(dict.fromkeys(i for i in belief.based_on if i in allowed))
    current = {event.id for event in beliefs(events, agent_id)}
    payload: dict[str, object] = {"belief": text, "based_on": based_on}
    if belief.supersedes in current:
        payload["supersedes"] = belief.supersedes
    return new_event(replace(scope, agent_id=agent_id), _timestamp(now), REFLECTED, payload,
                     visibility="global")


def reflect(events: Sequence[Event], agent_id: str, llm: LLM,
            config: ViewConfig = DEFAULT_CONFIG, *, scope: Scope,
            now: str | datetime) -> Event | None:
    """Ask ``llm`` for ``agent_id``'s next belief when one is due.

    Returns:
        The new ``agent.reflected`` event (see ``reflection_event``) for the caller to
        append, or None when no reflection is due (no call is made).

    Raises:
        ProviderError: the model gave no valid ``Belief``.
        InvalidInput: as ``reflection_event``.
    """
    if not reflection_due(events, agent_id, config):
        return None
    answer = llm.complete(reflection_request(events, agent_id, config), Belief,
                          purpose=PURPOSE)
    return reflection_event(events, agent_id, answer, config, scope=scope, now=now)


def _own_reflection(event: Event, agent_id: str) -> bool:
    return event.kind == REFLECTED and event.agent_id == agent_id


def _timestamp(now: str | datetime) -> str:
    moment = parse_moment(now, "now")
    if isinstance(now, str):
        return now
    return moment.astimezone(UTC).isoformat(timespec="microseconds")
