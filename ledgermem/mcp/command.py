"""``ledgermem mcp``: the MCP server, on stdio (one configured user) or streamable HTTP
(the user of each request's API key).

This module imports the ``mcp`` SDK only when the command runs: the CLI imports it on
every invocation, and the SDK takes about a second to import.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import click

from ..config import Settings

__all__ = ["mcp_command"]

DEFAULT_PORT = 8766
"""``--port`` of ``ledgermem mcp --transport http`` (the REST server's is 8765)."""


class _CommandContext(Protocol):
    """What the command uses of the CLI's ``Context`` (``cli.Context``)."""

    db: str | None
    user: str
    embedder: str | None
    settings: Settings

    def open(self, *, create: bool = False, embed: bool = True, **options: Any) -> Any: ...
    def settle(self) -> None: ...


@click.command("mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio",
              show_default=True, help="stdio: a client starts this command and talks "
              "over its stdin/stdout; http: streamable HTTP at http://HOST:PORT/mcp.")
@click.option("--user", "-u", "user", default=None,
              help="Whose memory a stdio server serves. Default: the global --user "
                   "(LEDGERMEM_USER, else 'local'). Over http each request's API key "
                   "names the user instead.")
@click.option("--agent", default=None, help="Act as this agent of the user (stdio).")
@click.option("--db", "db", default=None,
              help="Database path or URL. Default: the global --db (LEDGERMEM_DB, the "
                   "config file, else the user data dir).")
@click.option("--config", "config", default=None,
              help="A YAML configuration file, instead of the global --config.")
@click.option("--host", default="127.0.0.1", show_default=True, help="http: where to listen.")
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT,
              show_default=True, help="http: the port.")
@click.pass_obj
def mcp_command(obj: _CommandContext, transport: str, user: str | None, agent: str | None,
                db: str | None, config: str | None, host: str, port: int) -> None:
    """The MCP server: the five memory tools for MCP clients.

    stdio serves one user's memory (--user); http serves each request as the user of
    its API key ('Authorization: Bearer KEY'; an admin key is refused). No tool call
    can choose whose memory it reaches.
    """
    if config is not None:
        _use_config(obj, config)
    if db is not None:
        obj.db = db
    if transport == "http" and (user is not None or agent is not None):
        raise click.UsageError("--user and --agent bind a stdio server; over http each "
                               "request's API key says whose memory it reaches")
    from ..config import memory_options
    from ..validation import check_name, check_optional_name

    served = obj.user if user is None else user  # an empty --user is refused, not "local"
    if transport == "stdio":  # refused before a database is created or a client waits
        check_name(served, "--user")
        check_optional_name(agent, "--agent")
    memory = obj.open(create=True, **memory_options(obj.settings))
    long_term = obj.settings.memory.enabled
    try:
        if transport == "stdio":
            _serve_stdio(memory, served, agent, long_term)
        else:
            _serve_http(memory, host, port, long_term)
    except KeyboardInterrupt:  # Ctrl-C is how a server is stopped by hand
        pass
    obj.settle()


def _serve_stdio(memory: Any, user: str, agent: str | None, long_term: bool) -> None:
    import anyio

    from .server import run_stdio

    anyio.run(lambda: run_stdio(memory, user, agent=agent, long_term=long_term))


def _serve_http(memory: Any, host: str, port: int, long_term: bool) -> None:
    from ..server.keys import KeyRing
    from .http import DEFAULT_PATH, serve_http

    shown = f"[{host}]" if ":" in host else host
    click.echo(f"MCP endpoint: http://{shown}:{port}{DEFAULT_PATH} (each request needs a "
               "user's API key: 'Authorization: Bearer KEY')", err=True)
    serve_http(memory, KeyRing(memory.store), host=host, port=port, long_term=long_term)


def _use_config(obj: _CommandContext, config: str) -> None:
    """Read ``config`` instead of the global configuration; options given on the
    command line (--db, --embedder) and their variables still win over the file."""
    from ..config import find_config_path, load_settings

    settings = load_settings(find_config_path(config, os.environ), os.environ)
    root = click.get_current_context().find_root().params
    obj.settings = settings
    obj.db = root.get("db") or settings.database.url
    obj.embedder = root.get("embedder") or settings.embedder.name

