"""Export: a user's ledger and vectors as JSON Lines (``ledgermem import`` reads it),
or, with the admin key, every user's."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Collection
from typing import IO, Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from ...errors import NotFound
from ...transfer import export_jsonl
from ..deps import Acting, AdminKey, ServerState, Shared, acting, unbound
from ..errors import ERROR_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["export"], responses=ERROR_RESPONSES)

MEDIA_TYPE = "application/x-ndjson"
_SPOOL = 8 * 1024 * 1024
"""Bytes of an export kept in memory before it spills to a temporary file."""
_CHUNK = 64 * 1024
_EXPORT: dict[int | str, dict[str, Any]] = {200: {
    "description": "The format of `ledgermem export` (JSON Lines: a header, events, "
                   "vectors, an end record).",
    "content": {MEDIA_TYPE: {"schema": {"type": "string"}}}}}



async def _export(shared: ServerState, users: Collection[str] | None,
                  filename: str) -> StreamingResponse:
    """Write the export off the event loop into a spooled file, then stream it: a
    failure (no such user) is answered before the first byte goes out."""
    spool: IO[str] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 (closed by the stream)
        max_size=_SPOOL, mode="w+", encoding="utf-8")
    try:
        await anyio.to_thread.run_sync(
            lambda: export_jsonl(shared.memory.store, spool, users=users))
        spool.seek(0)
    except NotFound as exc:  # its message names the database: not for a client
        spool.close()
        raise NotFound("this user has no ledger yet: nothing to export") from exc
    except BaseException:
        spool.close()
        raise

    async def chunks() -> AsyncIterator[str]:
        try:
            while chunk := await anyio.to_thread.run_sync(spool.read, _CHUNK):
                yield chunk
        finally:
            spool.close()

    return StreamingResponse(chunks(), media_type=MEDIA_TYPE, headers={
        "Content-Disposition": f'attachment; filename="{filename}"'})


@router.get("/export", response_class=StreamingResponse, responses=_EXPORT,
            summary="Export")
async def export(shared: Shared, who: Annotated[Acting, Depends(acting)]) -> Any:
    """This user's ledger and vectors as JSON Lines. Needs a key not bound to an agent
    (the export holds every agent's events)."""
    unbound(who)
    return await _export(shared, [who.user], "ledgermem-export.jsonl")


@router.get("/admin/export", response_class=StreamingResponse, responses=_EXPORT,
            tags=["admin"], summary="Export every user")
async def export_all(shared: Shared, key: AdminKey) -> Any:
    """Every user's ledger and every vector, as ``ledgermem export`` writes them."""
    return await _export(shared, None, "ledgermem-export-all.jsonl")
