"""Observability of one user's memory: counts, mode and backlog, activity timeline,
entities and contexts, recent errors and LLM usage. (The tool summary is with the
tool calls; the process's own metrics are at ``/metrics``.)"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Handle
from ..errors import ERROR_RESPONSES
from ..models import (
    FacetOut,
    ItemOut,
    LLMUsageOut,
    RecentErrorsOut,
    StatsOut,
    StatusOut,
    TimelineOut,
    ToolCallOut,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["stats and observability"], responses=ERROR_RESPONSES)


@router.get("/stats", summary="Stats")
async def stats(memory: Handle) -> StatsOut:
    """Counts of items, turns, sessions, tool calls and events; the embedder and LLM in
    use, and what the LLM cost this user."""
    return StatsOut.model_validate(await memory.stats())


@router.get("/status", summary="Status")
async def status(memory: Handle) -> StatusOut:
    """The mode (LLM, embedder, both, none), turns by extraction state, rows waiting for
    a vector, and the pipeline steps skipped, with why."""
    return StatusOut.model_validate(await memory.status())


@router.get("/timeline", summary="Activity timeline")
async def timeline(memory: Handle,
                   days: Annotated[int, Query(ge=0, le=100_000)] = 30) -> list[TimelineOut]:
    """Events per day and kind over the last ``days``."""
    return [TimelineOut.model_validate(row) for row in await memory.activity_timeline(days)]


@router.get("/entities", summary="Entities")
async def entities(memory: Handle) -> list[FacetOut]:
    """Entities linked to active items, with counts, most used first."""
    return [FacetOut(value=value, count=count) for value, count in await memory.entities()]


@router.get("/contexts", summary="Contexts")
async def contexts(memory: Handle) -> list[FacetOut]:
    """Contexts of active items, with counts, most used first."""
    return [FacetOut(value=value, count=count) for value, count in await memory.contexts()]


@router.get("/errors/recent", summary="Recent errors")
async def recent_errors(memory: Handle,
                        limit: Annotated[int, Query(ge=1, le=10_000)] = 20) -> RecentErrorsOut:
    """Known ``error`` items and the latest failed tool calls."""
    found = await memory.recent_errors(limit)
    return RecentErrorsOut(items=[ItemOut.model_validate(i) for i in found["items"]],
                           tool_calls=[ToolCallOut.model_validate(c)
                                       for c in found["tool_calls"]])


@router.get("/llm-usage", summary="LLM usage")
async def llm_usage(memory: Handle) -> list[LLMUsageOut]:
    """LLM calls made for this user, per purpose and model: calls, tokens, errors and
    total latency."""
    return [LLMUsageOut.model_validate(row) for row in await memory.llm_usage()]
