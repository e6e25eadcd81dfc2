"""Conversations and sessions: add turns, list sessions, a session's history, recent
turns across sessions, and search over past turns."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Handle, Shared
from ..errors import ERROR_RESPONSES
from ..models import AddTurnsRequest, ConversationSearchRequest, HitOut, SessionOut, TurnOut

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["conversations"], responses=ERROR_RESPONSES)

Limit = Annotated[int, Query(ge=1, le=10_000)]


@router.post("/turns", status_code=201, summary="Add turns")
async def add_turns(body: AddTurnsRequest, memory: Handle) -> list[TurnOut]:
    """Keep messages in one transaction; ``infer`` also queues them for extraction (an
    LLM decides what to remember from them, in the background)."""
    turns = [turn.model_dump() for turn in body.turns]
    kept = await memory.add_turns(turns, session_id=body.session_id, infer=body.infer)
    return [TurnOut.model_validate(turn) for turn in kept]


@router.get("/turns", summary="Session history")
async def session_history(
    memory: Handle,
    session_id: Annotated[str | None, Query(max_length=1000, description=(
        "Default: the user's default session."))] = None,
    limit: Limit | None = None,
) -> list[TurnOut]:
    """The last ``limit`` turns of a session, oldest first."""
    turns = await memory.session_history(session_id, limit=limit)
    return [TurnOut.model_validate(turn) for turn in turns]


@router.get("/turns/recent", summary="Recent turns")
async def recent_turns(memory: Handle, limit: Limit = 20) -> list[TurnOut]:
    """The latest turns across sessions, newest first."""
    return [TurnOut.model_validate(turn) for turn in await memory.recent_conversations(limit)]


@router.post("/turns/search", summary="Search conversations")
async def search_turns(body: ConversationSearchRequest, memory: Handle,
                       shared: Shared) -> list[HitOut]:
    """Past turns by keywords and meaning and/or a time range, best first."""
    with shared.metrics.searching("conversations"):
        hits = await memory.search_conversations(**body.model_dump())
    return [HitOut.model_validate(hit) for hit in hits]


@router.get("/sessions", summary="Sessions")
async def sessions(memory: Handle) -> list[SessionOut]:
    """Sessions with their turn counts and first and last times, latest first."""
    return [SessionOut.model_validate(row) for row in await memory.sessions()]
