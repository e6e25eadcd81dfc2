"""Read-only views the web dashboard needs beyond the other routes: what maintenance did
for the user, step by step, read back from the ledger.

``POST /v1/maintenance/run`` answers what one run did, but a person opening the
dashboard later wants the record: every decay, prune, comparison and consolidation of
the last days, with how much each touched. The ledger holds it all (maintenance writes
its work as events), so this route reads it there; nothing else keeps a copy.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from ...clock import iso
from ...domain.events import Kind
from ...types import Event
from ..deps import Handle
from ..errors import ERROR_RESPONSES

__all__ = ["MaintenanceEntryOut", "maintenance_entry", "router"]

router = APIRouter(prefix="/v1/dashboard", tags=["dashboard"], responses=ERROR_RESPONSES)

Step = Literal["decay", "prune", "reconcile", "consolidate"]

STEPS: dict[str, Step] = {
    Kind.MEMORY_DECAYED: "decay",
    Kind.MEMORY_PRUNED: "prune",
    Kind.MEMORY_COMPARED: "reconcile",
    Kind.TURN_CONSOLIDATED: "consolidate",
}
"""The ledger kinds maintenance writes, and the step that writes each."""


class MaintenanceEntryOut(BaseModel):
    """One thing maintenance did, as the ledger recorded it."""

    id: str = Field(description="The ledger event's id.")
    ts: str
    step: Step
    counts: dict[str, int] = Field(description=(
        "How much it touched: decay {items}; prune {items, turns, tool_calls}; reconcile "
        "{pairs}; consolidate {turns, items, skipped}."))
    detail: dict[str, Any] = Field(description=(
        "decay {factor}; reconcile {outcome, similarity, older, newer} (item ids); "
        "consolidate {session_id, distilled}. No stored text: a comparison's reason may "
        "quote a memory forgotten since."))


def maintenance_entry(event: Event) -> MaintenanceEntryOut:
    """What one maintenance event says, without any stored text."""
    data = event.payload
    step = STEPS[event.kind]
    counts: dict[str, int]
    detail: dict[str, Any] = {}
    if step == "decay":
        counts = {"items": len(data.get("ids", ()))}
        detail = {"factor": data.get("factor")}
    elif step == "prune":
        counts = {"items": len(data.get("items", ())), "turns": len(data.get("turns", ())),
                  "tool_calls": len(data.get("tools", ()))}
    elif step == "reconcile":
        counts = {"pairs": 1}
        detail = {key: data.get(key) for key in ("outcome", "similarity", "older", "newer")}
    else:
        counts = {"turns": len(data.get("ids", ())), "items": int(data.get("items") or 0),
                  "skipped": int(data.get("skipped") or 0)}
        detail = {"session_id": event.session_id, "distilled": data.get("distilled", True)}
    return MaintenanceEntryOut(id=event.id, ts=event.ts, step=step, counts=counts,
                               detail=detail)


@router.get("/maintenance", summary="What maintenance did")
async def maintenance_log(
    memory: Handle,
    days: Annotated[int, Query(ge=0, le=100_000, description="How far back.")] = 90,
    limit: Annotated[int, Query(ge=1, le=10_000, description="At most this many, the newest.")]
    = 200,
) -> list[MaintenanceEntryOut]:
    """Every decay, prune, comparison and consolidation of the user's memory over the
    last ``days``, newest first, with what each touched."""
    handle = memory.sync

    def read() -> list[MaintenanceEntryOut]:
        since = iso(handle.memory.clock() - timedelta(days=days))
        events = handle.memory.store.events(handle.user_id, kinds=list(STEPS), since=since)
        return [maintenance_entry(event) for event in reversed(events[-limit:])]

    return await anyio.to_thread.run_sync(read)
