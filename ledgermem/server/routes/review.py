"""The review queue: findings proposed for a person to approve, edit or reject before
anything becomes knowledge (``UserMemory.propose`` and the decisions). Proposing is
open to any key of the user; deciding needs a key not bound to an agent, since the
queue is where a person, not an agent, says what is remembered."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query

from ..deps import Acting, Handle, acting, unbound
from ..errors import ERROR_RESPONSES
from ..models import (
    ApproveRequest,
    EditApproveRequest,
    ProposalOut,
    ProposeRequest,
    RejectRequest,
    ResetDiscoveryOut,
    Source,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/proposals", tags=["review queue"], responses=ERROR_RESPONSES)

Who = Annotated[Acting, Depends(acting)]
ProposalId = Annotated[str, Path(min_length=1, max_length=1000)]
Status = Literal["pending", "approved", "edited", "rejected", "decided", "all"]


def _out(proposals: list[object]) -> list[ProposalOut]:
    return [ProposalOut.model_validate(proposal) for proposal in proposals]


@router.post("", status_code=201, summary="Propose")
async def propose(body: ProposeRequest, memory: Handle) -> list[ProposalOut]:
    """Put findings in the review queue (one already pending or approved is not
    queued twice: its proposal is returned)."""
    findings = [finding.model_dump() for finding in body.findings]
    return _out(list(await memory.propose(findings, proposer=body.proposer)))


@router.get("", summary="The review queue")
async def proposals(
    memory: Handle, status: Status = "pending", source: Source | None = None,
    limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
) -> list[ProposalOut]:
    """Proposals, oldest first (pending by default)."""
    found = await memory.proposals(status, source=source, limit=limit, offset=offset)
    return _out(list(found))


@router.get("/{proposal_id}", summary="A proposal")
async def proposal(proposal_id: ProposalId, memory: Handle) -> ProposalOut:
    """One proposal, whatever its status."""
    return ProposalOut.model_validate(await memory.proposal(proposal_id))


@router.post("/approve", summary="Approve")
async def approve(body: ApproveRequest, memory: Handle, who: Who) -> list[ProposalOut]:
    """Approve pending proposals: each becomes a knowledge item."""
    unbound(who)
    return _out(list(await memory.approve(body.ids, edits=body.edits)))


@router.post("/{proposal_id}/edit", summary="Edit and approve")
async def edit_and_approve(proposal_id: ProposalId, body: EditApproveRequest,
                           memory: Handle, who: Who) -> ProposalOut:
    """Approve one pending proposal with the reviewer's changes."""
    unbound(who)
    decided = await memory.edit_and_approve(proposal_id, **body.model_dump())
    return ProposalOut.model_validate(decided)


@router.post("/reject", summary="Reject")
async def reject(body: RejectRequest, memory: Handle, who: Who) -> list[ProposalOut]:
    """Reject pending proposals: no item, and their text is blanked in the ledger."""
    unbound(who)
    return _out(list(await memory.reject(body.ids)))


@router.post("/reset-discovery", summary="Undo the discovery bootstrap")
async def reset_discovery(memory: Handle, who: Who) -> ResetDiscoveryOut:
    """Forget every ``discovery`` item and reject every pending ``discovery`` proposal."""
    unbound(who)
    return ResetDiscoveryOut.model_validate(await memory.reset_discovery())
