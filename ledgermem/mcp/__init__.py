"""The MCP server: the five memory tools (``remember``, ``recall``, ``update_memory``,
``forget``, ``search_past_conversations``) for any MCP client, over the official ``mcp``
SDK.

- stdio, one user fixed by configuration: ``ledgermem mcp --user alice``, or
  ``await run_stdio(memory, "alice")``;
- streamable HTTP, each request as the user of its API key:
  ``ledgermem mcp --transport http``, ``mcp_http_app(memory, keys)`` (a whole ASGI
  app), or ``MCPEndpoint(memory, keys)`` for a route of another app.

No tool takes a user: whose memory a call reaches is the transport's decision.

The names below are imported on first use (``from ledgermem.mcp import
mcp_http_app``): the SDK takes about a second to import, and the CLI, which imports
``ledgermem.mcp.command`` on every run, needs it only when ``ledgermem mcp`` runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .http import KeyPrincipal, KeyVerifier, MCPEndpoint, mcp_http_app, serve_http
    from .server import (
        RESULTS,
        Binding,
        ConversationsResult,
        ForgetResult,
        MemoryResult,
        RecallHit,
        RecallResult,
        RememberResult,
        TurnHit,
        bound_to,
        build_server,
        run_stdio,
    )

__all__ = [
    "RESULTS",
    "Binding",
    "ConversationsResult",
    "ForgetResult",
    "KeyPrincipal",
    "KeyVerifier",
    "MCPEndpoint",
    "MemoryResult",
    "RecallHit",
    "RecallResult",
    "RememberResult",
    "TurnHit",
    "bound_to",
    "build_server",
    "mcp_http_app",
    "run_stdio",
    "serve_http",
]

_HOME = {name: "http" for name in ("KeyPrincipal", "KeyVerifier", "MCPEndpoint",
                                   "mcp_http_app", "serve_http")}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_HOME.get(name, 'server')}", __name__)
    return getattr(module, name)
