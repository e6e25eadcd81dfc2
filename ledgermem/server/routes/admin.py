"""Admin routes (the admin key only): users and their keys, erasing a user, and the
maintenance that spans every user (maintain, rebuild, verify)."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Path, Query, Response

from ..deps import AdminKey, ServerState, Shared
from ..errors import ERROR_RESPONSES, ApiError
from ..keys import KeyInfo, UserExists
from ..models import (
    CreatedKeyOut,
    CreateKeyRequest,
    CreateUserRequest,
    ForgetUserOut,
    KeyInfoOut,
    UserOut,
)

__all__ = ["key_out", "router"]

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses={
    **ERROR_RESPONSES, 409: ERROR_RESPONSES[422] | {"description": "The user exists."}})

UserId = Annotated[str, Path(min_length=1, max_length=1000)]
KeyId = Annotated[str, Path(min_length=1, max_length=100)]


def key_out(info: KeyInfo) -> KeyInfoOut:
    """A key's info as the API shows it."""
    return KeyInfoOut.model_validate(info)


def _live_keys(shared: ServerState) -> dict[str, int]:
    """Each user's live keys. Revoked keys are kept for the record, but they make no
    user: an erased user (memory gone, keys revoked) is no longer one."""
    live: dict[str, int] = {}
    for info in shared.keys.list():
        if info.user is not None and info.active:
            live[info.user] = live.get(info.user, 0) + 1
    return live


def _users(shared: ServerState) -> list[UserOut]:
    counts = shared.memory.store.user_counts()
    live = _live_keys(shared)
    return [UserOut(user=user, live_keys=live.get(user, 0),
                    **{k: counts.get(user, {}).get(k, 0)
                       for k in ("events", "items", "turns", "tool_calls")})
            for user in sorted(set(counts) | set(live))]


@router.get("/users", summary="Users")
async def users(shared: Shared, key: AdminKey) -> list[UserOut]:
    """Every user with memory or a live key, with row counts and live keys."""
    return await anyio.to_thread.run_sync(_users, shared)


@router.post("/users", status_code=201, summary="Create a user")
async def create_user(body: CreateUserRequest, shared: Shared, key: AdminKey) -> CreatedKeyOut:
    """A new user and its first key (shown once). 409 when the user already has memory
    or a live key: give it another key with ``POST /v1/admin/keys``. An erased user may
    be created again (its revoked keys stay revoked)."""

    try:
        token, info = await anyio.to_thread.run_sync(
            lambda: shared.keys.create_user(body.user, label=body.label))
    except UserExists as exc:
        raise ApiError(409, "conflict", str(exc)) from exc
    return CreatedKeyOut(key=token, info=key_out(info))


@router.delete("/users/{user_id}", summary="Erase a user")
async def forget_user(user_id: UserId, shared: Shared, key: AdminKey) -> ForgetUserOut:
    """Erase every trace of the user, the ledger included, and revoke its keys."""
    removed = await shared.memory.for_user(user_id).forget_user()

    def revoke() -> int:
        live = [info.key_id for info in shared.keys.list(user_id) if info.active]
        for key_id in live:
            shared.keys.revoke(key_id)
        return len(live)

    return ForgetUserOut(events_removed=removed,
                         keys_revoked=await anyio.to_thread.run_sync(revoke))


@router.get("/keys", summary="Keys")
async def list_keys(shared: Shared, key: AdminKey,
                    user: Annotated[str | None, Query(min_length=1, max_length=1000)] = None,
                    ) -> list[KeyInfoOut]:
    """Every key (of ``user`` when given), oldest first, revoked ones included."""
    return [key_out(info) for info in await anyio.to_thread.run_sync(shared.keys.list, user)]


@router.post("/keys", status_code=201, summary="Create a key")
async def create_key(body: CreateKeyRequest, shared: Shared, key: AdminKey) -> CreatedKeyOut:
    """A key for a user (new or not), optionally bound to one agent; shown once."""
    token, info = await anyio.to_thread.run_sync(
        lambda: shared.keys.create(body.user, agent=body.agent, label=body.label))
    return CreatedKeyOut(key=token, info=key_out(info))


@router.delete("/keys/{key_id}", status_code=204, response_class=Response,
               summary="Revoke a key")
async def revoke_key(key_id: KeyId, shared: Shared, key: AdminKey) -> Response:
    """Revoke any key, on every server process at once."""
    await anyio.to_thread.run_sync(shared.keys.revoke, key_id)
    return Response(status_code=204)


@router.post("/maintenance", summary="Maintain every user")
async def maintain_all(shared: Shared, key: AdminKey) -> dict[str, Any]:
    """``maintain`` for every user; each step's counts summed over users."""
    return await shared.memory.maintain()


@router.post("/rebuild", summary="Rebuild the views")
async def rebuild(shared: Shared, key: AdminKey) -> dict[str, str]:
    """Re-derive every view and index from the ledger (every user)."""
    await shared.memory.rebuild()
    return {"status": "rebuilt"}


@router.post("/verify", summary="Verify the views")
async def verify(shared: Shared, key: AdminKey) -> dict[str, Any]:
    """Re-derive every view in a scratch store and compare; check the ledger."""
    return await shared.memory.verify()
