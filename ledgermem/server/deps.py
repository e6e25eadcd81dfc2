"""Who is asking and for whom: the dependencies every route is built on.

- ``principal``: the API key of the request (``Authorization: Bearer <key>`` or
  ``X-API-Key: <key>``), verified against the store, then rate limited per key.
  Missing, unknown or revoked keys answer 401 alike.
- ``acting``: the user the request acts for. A user key acts for its own user (an
  ``X-Ledgermem-User`` naming another answers 403). The admin key acts for no one
  unless ``X-Ledgermem-User`` names a user; then it acts for that user, as that user's
  key would (with no agent binding).
- ``user_memory``: that user's ``AsyncUserMemory``, bound to the key's agent when the
  key is bound to one.
- ``admin``: the admin key itself (403 for any other).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import anyio.to_thread
from fastapi import Depends, Header, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ..aio import AsyncMemory, AsyncUserMemory
from ..errors import AccessDenied, InvalidInput
from .errors import ApiError
from .keys import KeyRing, Principal
from .metrics import ServerMetrics
from .ratelimit import RateLimiter

__all__ = [
    "USER_HEADER",
    "Acting",
    "AdminKey",
    "Caller",
    "Handle",
    "ServerState",
    "UserHeader",
    "acting",
    "admin",
    "agent_for",
    "principal",
    "state",
    "unbound",
    "user_memory",
]

USER_HEADER = "X-Ledgermem-User"
"""The header with which the admin key names the user it acts for."""


@dataclass
class ServerState:
    """What the routes share: the memory, the keys, the metrics and the rate limits."""

    memory: AsyncMemory
    keys: KeyRing
    metrics: ServerMetrics
    limiter: RateLimiter | None
    public_metrics: bool
    failures: RateLimiter | None = None
    """Requests with an unknown or revoked key, by client address (``FAILED_KEYS``)."""


def state(request: Request) -> ServerState:
    """The app's shared state."""
    found: ServerState = request.app.state.ledgermem
    return found


State = Annotated[ServerState, Depends(state)]
Shared = State
"""The app's shared state, as a route parameter."""

_bearer = HTTPBearer(auto_error=False, description="An API key: lm_<id>_<secret>.")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False,
                        description="An API key, as an alternative to the bearer header.")


async def principal(
    request: Request,
    shared: State,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key)],
) -> Principal:
    """The verified key of the request, after its rate limit. Unknown and revoked keys
    are limited too, by client address (``FAILED_KEYS``): a valid key is never held
    back by them."""
    token = bearer.credentials if bearer is not None else api_key
    if not token:
        raise ApiError(401, "unauthorized", "send an API key: 'Authorization: Bearer <key>' "
                       "or 'X-API-Key: <key>'", {"WWW-Authenticate": "Bearer"})
    found = await anyio.to_thread.run_sync(shared.keys.verify, token)
    if found is None:
        if shared.failures is not None:
            address = request.client.host if request.client else "unknown"
            _limited(shared.failures.take(address), "with unknown keys from this address")
        raise ApiError(401, "unauthorized", "this API key is unknown or revoked",
                       {"WWW-Authenticate": "Bearer"})
    if shared.limiter is not None:
        _limited(shared.limiter.take(found.key_id), "with this key")
    return found


def _limited(wait: float, what: str) -> None:
    """A 429 when a bucket had no token (``wait`` > 0: seconds until it has one)."""
    if wait > 0:
        raise ApiError(429, "rate_limited", f"too many requests {what}; retry in "
                       f"{wait:.2f} s", {"Retry-After": str(max(1, math.ceil(wait)))})


Caller = Annotated[Principal, Depends(principal)]


@dataclass(frozen=True)
class Acting:
    """A verified key and the user it acts for in this request."""

    key: Principal
    user: str
    agent: str | None


UserHeader = Annotated[str | None, Header(
    alias=USER_HEADER, max_length=1000,
    description="With the admin key: the user to act for. With a user key: optional, and "
                "must name the key's own user.")]


async def acting(key: Caller, user_header: UserHeader = None) -> Acting:
    """The user the request acts for (see the module's docstring)."""
    if key.admin:
        if not user_header:
            raise InvalidInput(f"the admin key acts for a user only when the {USER_HEADER} "
                               "header names one")
        return Acting(key, user_header, None)
    assert key.user is not None
    if user_header is not None and user_header != key.user:
        raise AccessDenied("this key acts for its own user only")
    return Acting(key, key.user, key.agent)


ActingFor = Annotated[Acting, Depends(acting)]


async def user_memory(shared: State, who: ActingFor) -> AsyncUserMemory:
    """The memory of the user the request acts for (bound to the key's agent)."""
    return shared.memory.for_user(who.user, agent_id=who.agent)


Handle = Annotated[AsyncUserMemory, Depends(user_memory)]


def agent_for(who: Acting, requested: str | None) -> str | None:
    """The agent a call names: the key's own when it is bound to one (naming another
    is refused), else ``requested``."""
    if who.agent is None:
        return requested
    if requested is not None and requested != who.agent:
        raise AccessDenied(f"this key is bound to agent {who.agent!r}")
    return who.agent


def unbound(who: Acting) -> Acting:
    """``who``, refused when its key is bound to an agent (the call reaches what every
    agent of the user wrote)."""
    if who.agent is not None:
        raise AccessDenied("a key bound to an agent cannot do this; use a key of the user")
    return who


async def admin(key: Caller) -> Principal:
    """The admin key (403 for a user key)."""
    if not key.admin:
        raise AccessDenied("only the admin key can do this")
    return key


AdminKey = Annotated[Principal, Depends(admin)]
