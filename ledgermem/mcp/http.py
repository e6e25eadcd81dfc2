"""The MCP server over streamable HTTP, each request bound to the user of its API key.

Every request carries ``Authorization: Bearer <key>``; the key ring says whose key it is,
and the tools of that request work on that user's memory (as the key's agent, when it
names one). A missing, unknown or revoked key, and an admin key (it manages users and
holds no memory), answer 401 with a JSON body, before anything reaches the MCP layer.

The endpoint is stateless (no MCP session lives between requests) and answers with
plain JSON: any server process of several on one database answers any request, and the
memory tools neither stream nor call back into the client.

``MCPEndpoint`` is one ASGI app, for a route of any Starlette or FastAPI app;
``mcp_http_app`` is a whole app with the endpoint at ``/mcp``; ``serve_http`` runs that
under uvicorn.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials
from starlette.requests import HTTPConnection
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..aio import AsyncMemory, AsyncUserMemory
from ..errors import LedgermemError
from ..memory import Memory
from .server import as_async, build_server

__all__ = ["DEFAULT_PATH", "KeyPrincipal", "KeyVerifier", "MCPEndpoint", "mcp_http_app",
           "serve_http"]

logger = logging.getLogger(__name__)

DEFAULT_PATH = "/mcp"
"""Where ``mcp_http_app`` serves the endpoint."""
_AGENT_CLAIM = "ledgermem_agent"


class KeyPrincipal(Protocol):
    """Whose an API key is (``server.keys.Principal``)."""

    @property
    def key_id(self) -> str: ...
    @property
    def user(self) -> str | None: ...
    @property
    def agent(self) -> str | None: ...
    @property
    def admin(self) -> bool: ...


class KeyVerifier(Protocol):
    """What the endpoint needs of a key ring (``server.keys.KeyRing``)."""

    def verify(self, token: str) -> KeyPrincipal | None:
        """The key's principal, or None for an unknown or revoked key."""
        ...


class _KeyTokens:
    """The SDK's ``TokenVerifier`` over a key ring: a user's key becomes an access token
    whose ``subject`` is the user; an admin key, an unknown one or a revoked one
    becomes nothing."""

    def __init__(self, keys: KeyVerifier) -> None:
        self.keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        # The ring reads the store: off the event loop.
        principal = await anyio.to_thread.run_sync(self.keys.verify, token)
        if principal is None or principal.admin or not principal.user:
            return None
        # ``token`` holds the key's id, not the secret: nothing downstream needs it.
        return AccessToken(token=principal.key_id, client_id=principal.key_id, scopes=[],
                           subject=principal.user, claims={_AGENT_CLAIM: principal.agent})


class _RequireUserKey:
    """Lets a request through only with a user's API key, which it records in the ASGI
    scope the way the SDK's bearer middleware does (``scope["user"]``), so the SDK's
    own machinery (session ownership, request state) sees the same principal."""

    def __init__(self, app: ASGIApp, tokens: _KeyTokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _presented_key(HTTPConnection(scope))
        if not token:
            await _refuse(send, 401, "send a user's API key: 'Authorization: Bearer <key>' "
                          "or 'X-API-Key: <key>'")
            return
        try:
            access = await self.tokens.verify_token(token)
        except LedgermemError:
            logger.exception("MCP endpoint: the API key could not be checked")
            await _refuse(send, 503, "the key store failed; try again later",
                          code="storage_unavailable")
            return
        if access is None:
            await _refuse(send, 401, "this API key is unknown or revoked, or is the admin "
                          "key, which holds no memory: use a user's key")
            return
        scope["user"] = AuthenticatedUser(access)
        scope["auth"] = AuthCredentials(access.scopes)
        await self.app(scope, receive, send)


def _presented_key(conn: HTTPConnection) -> str | None:
    """The key of ``Authorization: Bearer <key>``, else of ``X-API-Key`` (the REST
    API takes both)."""
    scheme, _, token = conn.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return conn.headers.get("x-api-key", "").strip() or None


async def _refuse(send: Send, status: int, message: str, *, code: str = "unauthorized"
                  ) -> None:
    """An error in the REST API's shape: ``{"error": {"code", "message"}}``."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class MCPEndpoint:
    """The MCP endpoint as one ASGI app: a user's API key on every request, the five
    memory tools on that user's memory.

    Give it a route of any Starlette or FastAPI app, and run ``run()`` for as long as
    the app serves (its lifespan); ``run()`` can be entered once per endpoint:

        endpoint = MCPEndpoint(memory, KeyRing(store))
        app.add_route("/mcp", endpoint, include_in_schema=False)
        # in the app's lifespan:  async with endpoint.run(): yield

    Args:
        memory: the memory served (a ``Memory`` is wrapped in an ``AsyncMemory``).
        keys: checks each request's API key (``server.keys.KeyRing``).
        host: the host the server listens on; on a loopback host, requests whose
            ``Host`` or ``Origin`` is not loopback are refused (DNS rebinding), as the
            SDK does.
        long_term: False when long-term memory is off: every tool call says so.
    """

    def __init__(self, memory: Memory | AsyncMemory, keys: KeyVerifier, *,
                 host: str = "127.0.0.1", long_term: bool = True) -> None:
        self.memory = as_async(memory)
        self.server = build_server(self._bind, long_term=long_term)
        # Builds the SDK's session manager (the app it returns is not used: the
        # endpoint is mounted on its own, behind the key check).
        self.server.streamable_http_app(stateless_http=True, json_response=True, host=host)
        self._app = _RequireUserKey(
            AuthContextMiddleware(StreamableHTTPASGIApp(self.server.session_manager)),
            _KeyTokens(keys))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    def run(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The endpoint's lifespan: requests are served while it is entered."""
        return self.server.session_manager.run()

    def _bind(self, ctx: Context[Any, Any]) -> AsyncUserMemory:
        """The memory of the user whose key the request carries (checked already)."""
        request = ctx.request_context.request
        user = getattr(request, "scope", {}).get("user")
        token = user.access_token if isinstance(user, AuthenticatedUser) else None
        if token is None or not token.subject:
            raise PermissionError("this request carries no user's API key")
        agent = (token.claims or {}).get(_AGENT_CLAIM)
        return self.memory.for_user(token.subject, agent if isinstance(agent, str) else None)


def mcp_http_app(memory: Memory | AsyncMemory, keys: KeyVerifier, *,
                 path: str = DEFAULT_PATH, host: str = "127.0.0.1",
                 long_term: bool = True) -> Starlette:
    """A Starlette app serving ``MCPEndpoint`` at ``path`` (its lifespan included)."""
    endpoint = MCPEndpoint(memory, keys, host=host, long_term=long_term)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with endpoint.run():
            yield

    return Starlette(routes=[Route(path, endpoint)], lifespan=lifespan)


def serve_http(memory: Memory | AsyncMemory, keys: KeyVerifier, *, host: str = "127.0.0.1",
               port: int = 8766, path: str = DEFAULT_PATH, long_term: bool = True) -> None:
    """Run ``mcp_http_app`` under uvicorn until interrupted (Ctrl-C stops it cleanly)."""
    import uvicorn

    app = mcp_http_app(memory, keys, path=path, host=host, long_term=long_term)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                  lifespan="on")).run()
