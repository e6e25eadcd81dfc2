"""The caller's own key and its user's keys: who am I, list, create and revoke keys of
the user the request acts for (a key bound to an agent manages none)."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Response

from ...errors import NotFound
from ..deps import Acting, Caller, Shared, UserHeader, acting, unbound
from ..errors import ERROR_RESPONSES
from ..keys import KeyInfo
from ..models import CreatedKeyOut, KeyInfoOut, OwnKeyRequest, PrincipalOut
from .admin import key_out

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["keys"], responses=ERROR_RESPONSES)

Who = Annotated[Acting, Depends(acting)]


@router.get("/me", summary="Who am I")
async def me(key: Caller, user_header: UserHeader = None) -> PrincipalOut:
    """The key's id, user, agent binding, whether it is the admin key, and the user a
    request with these headers acts for (none for the admin key alone)."""
    who = None if key.admin and not user_header else await acting(key, user_header)
    return PrincipalOut(key_id=key.key_id, user=key.user, agent=key.agent, admin=key.admin,
                        acting_for=None if who is None else who.user)


@router.get("/keys", summary="My user's keys")
async def list_keys(shared: Shared, who: Who) -> list[KeyInfoOut]:
    """The keys of the user the request acts for, revoked ones included."""
    unbound(who)
    return [key_out(info) for info in await anyio.to_thread.run_sync(shared.keys.list,
                                                                          who.user)]


@router.post("/keys", status_code=201, summary="Create a key for my user")
async def create_key(shared: Shared, who: Who, body: OwnKeyRequest | None = None
                     ) -> CreatedKeyOut:
    """Another key for the same user, optionally bound to one agent; shown once."""
    unbound(who)
    fields = body or OwnKeyRequest()
    token, info = await anyio.to_thread.run_sync(
        lambda: shared.keys.create(who.user, agent=fields.agent, label=fields.label))
    return CreatedKeyOut(key=token, info=key_out(info))


@router.delete("/keys/{key_id}", status_code=204, response_class=Response,
               summary="Revoke a key of my user")
async def revoke_key(key_id: Annotated[str, Path(min_length=1, max_length=100)],
                     shared: Shared, who: Who) -> Response:
    """Revoke one of the user's keys (another user's key ids answer 404)."""
    unbound(who)

    def revoke() -> None:
        info: KeyInfo = shared.keys.get(key_id)
        if info.user != who.user:
            raise NotFound(f"no API key {key_id!r}")
        shared.keys.revoke(key_id)

    await anyio.to_thread.run_sync(revoke)
    return Response(status_code=204)
