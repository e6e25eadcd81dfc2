"""Maintenance of one user's memory: the whole pass (decay → reconcile → consolidate
→ prune), or one step; queueing failed extractions again; finishing background work.
(Maintenance of every user, rebuild and verify are admin routes.)"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..deps import Handle
from ..errors import ERROR_RESPONSES
from ..models import CountOut, DecayRequest, PruneOut, PruneRequest

__all__ = ["router"]

router = APIRouter(prefix="/v1/maintenance", tags=["maintenance"], responses=ERROR_RESPONSES)


@router.post("/run", summary="Maintain")
async def maintain(memory: Handle) -> dict[str, Any]:
    """Decay, reconcile, consolidate and prune this user's memory, each step capped;
    steps that need an LLM are skipped without one and say why (``skipped``)."""
    return await memory.maintain()


@router.post("/decay", summary="Confidence decay")
async def decay(memory: Handle, body: DecayRequest | None = None) -> CountOut:
    """Multiply the confidence of items unused for ``unused_days`` by ``factor`` (at most
    once per period); returns how many decayed."""
    fields = (body or DecayRequest()).model_dump()
    return CountOut(count=await memory.apply_confidence_decay(**fields))


@router.post("/prune", summary="Prune")
async def prune(memory: Handle, body: PruneRequest | None = None) -> PruneOut:
    """Drop turns and tool calls older than ``days``, and items below ``min_confidence``
    unused as long (the ledger keeps their events)."""
    fields = (body or PruneRequest()).model_dump()
    return PruneOut.model_validate(await memory.prune(**fields))


@router.post("/requeue-extraction", summary="Requeue failed extraction")
async def requeue_extraction(memory: Handle) -> CountOut:
    """Queue again the turns whose extraction failed; returns how many."""
    return CountOut(count=await memory.requeue_extraction())


@router.post("/flush", summary="Finish background work")
async def flush(memory: Handle) -> CountOut:
    """Wait for this process's pending background work (recall bookkeeping, extraction,
    embedding); returns rows embedded. Writes are searchable by meaning afterwards."""
    return CountOut(count=await memory.flush())
