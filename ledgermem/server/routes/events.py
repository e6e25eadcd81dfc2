"""Agent events and the views over them (many agents serving one user): record an
event, list the ledger's agent events, and each agent's episodic window, salient
events, reflection and beliefs, at any past position (``as_of``).

A key bound to an agent records as that agent and reads that agent's views only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from ..deps import Acting, Handle, acting, agent_for
from ..errors import ERROR_RESPONSES
from ..models import EventOut, RecordEventRequest, ReflectionDueOut, ReflectOut

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["events and views"], responses=ERROR_RESPONSES)

Who = Annotated[Acting, Depends(acting)]
AgentId = Annotated[str, Path(min_length=1, max_length=1000,
                              description="The agent whose view this is.")]
AsOf = Annotated[str | None, Query(max_length=200, description=(
    "The view right after this event (an event id), or at this time."))]


def _events(events: list[object]) -> list[EventOut]:
    return [EventOut.model_validate(event) for event in events]


@router.post("/events", status_code=201, summary="Record an event")
async def record(body: RecordEventRequest, memory: Handle, who: Who) -> EventOut:
    """Append an event of the application's own kind (``world.observed``) to the ledger."""
    fields = body.model_dump()
    fields["agent_id"] = agent_for(who, fields["agent_id"])
    return EventOut.model_validate(await memory.record(**fields))


@router.get("/events", summary="Ledger events")
async def ledger_events(
    memory: Handle, who: Who,
    kind: Annotated[list[str] | None, Query(description=(
        "Only these kinds (repeat the parameter)."))] = None,
    agent_id: Annotated[str | None, Query(max_length=1000, description=(
        "Only the events this agent wrote."))] = None,
    since: Annotated[str | None, Query(max_length=200)] = None,
    until: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    after_event: Annotated[str | None, Query(max_length=1000, description=(
        "Only events appended after this one: page forward with the last id you got."))
    ] = None,
) -> list[EventOut]:
    """The user's agent events, oldest first (the kinds ledgermem writes itself have
    their own routes)."""
    found = await memory.ledger_events(
        kinds=kind, agent_id=agent_for(who, agent_id), since=since, until=until,
        limit=limit, after_event=after_event)
    return _events(list(found))


@router.get("/agents/{agent_id}/episodic", summary="Episodic window")
async def episodic(agent_id: AgentId, memory: Handle, who: Who, as_of: AsOf = None,
                   n: Annotated[int | None, Query(ge=0, le=10_000)] = None) -> list[EventOut]:
    """The ``n`` most recent events the agent sees, oldest first."""
    return _events(list(await memory.episodic(agent_for(who, agent_id) or agent_id, n=n,
                                              as_of=as_of)))


@router.get("/agents/{agent_id}/salient", summary="Salient events")
async def salient(
    agent_id: AgentId, memory: Handle, who: Who,
    query: Annotated[str, Query(max_length=10_000)],
    k: Annotated[int | None, Query(ge=0, le=10_000)] = None, as_of: AsOf = None,
) -> list[EventOut]:
    """The ``k`` most salient events the agent sees for ``query``, in time order."""
    found = await memory.salient(agent_for(who, agent_id) or agent_id, query, k=k,
                                 as_of=as_of)
    return _events(list(found))


@router.get("/agents/{agent_id}/reflection-due", summary="Reflection due")
async def reflection_due(agent_id: AgentId, memory: Handle, who: Who,
                         as_of: AsOf = None) -> ReflectionDueOut:
    """Whether the agent has seen enough events since it last reflected."""
    due = await memory.reflection_due(agent_for(who, agent_id) or agent_id, as_of=as_of)
    return ReflectionDueOut(due=due)


@router.post("/agents/{agent_id}/reflect", summary="Reflect")
async def reflect(agent_id: AgentId, memory: Handle, who: Who) -> ReflectOut:
    """When due, ask the LLM for one belief and append it, globally visible."""
    event = await memory.reflect(agent_for(who, agent_id) or agent_id)
    return ReflectOut(event=None if event is None else EventOut.model_validate(event))


@router.get("/agents/{agent_id}/beliefs", summary="Beliefs")
async def beliefs(agent_id: AgentId, memory: Handle, who: Who,
                  as_of: AsOf = None) -> list[EventOut]:
    """The agent's current beliefs (its reflections no later one superseded)."""
    return _events(list(await memory.beliefs(agent_for(who, agent_id) or agent_id,
                                             as_of=as_of)))
