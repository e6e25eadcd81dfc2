"""Tool calls of the host agent: log one, list the failed ones, summarise per tool."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Handle
from ..errors import ERROR_RESPONSES
from ..models import ToolCallOut, ToolCallRequest, ToolStatOut

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["tool calls"], responses=ERROR_RESPONSES)


@router.post("/tool-calls", status_code=201, summary="Log a tool call")
async def log_tool_call(body: ToolCallRequest, memory: Handle) -> ToolCallOut:
    """Record one tool call; a failure also becomes ``error`` knowledge unless
    ``learn_error`` is false."""
    fields = body.model_dump()
    name, arguments = fields.pop("name"), fields.pop("arguments")
    return ToolCallOut.model_validate(await memory.log_tool_call(name, arguments, **fields))


@router.get("/tool-calls/errors", summary="Failed tool calls")
async def tool_errors(
    memory: Handle,
    name: Annotated[str | None, Query(max_length=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 20,
) -> list[ToolCallOut]:
    """Failed tool calls, newest first."""
    calls = await memory.tool_errors(name=name, limit=limit)
    return [ToolCallOut.model_validate(call) for call in calls]


@router.get("/tool-calls/summary", summary="Tool summary")
async def tool_summary(memory: Handle) -> list[ToolStatOut]:
    """Per tool: calls, failures, success rate, mean duration, last call."""
    return [ToolStatOut.model_validate(row) for row in await memory.tool_summary()]
