"""``ledgermem serve``: the REST API (and the dashboard) under uvicorn.

The global options apply (``--db``, ``--config``, ``--user``, ``--embedder``);
``serve`` takes ``--db`` and ``--config`` too, which win over them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import click

__all__ = ["serve"]


def _data_dir() -> Path:
    from platformdirs import user_data_path

    return user_data_path("ledgermem", appauthor=False)


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _banner(startup: Any, url: str, database: str) -> None:
    click.echo(f"ledgermem server: {url}  (dashboard; API docs at {url}docs)")
    click.echo(f"database: {database}")
    click.echo(f"API key for user {startup.user!r}: {startup.user_key}")
    click.echo(f"  (kept in {startup.key_file}, readable by you only)")
    if startup.admin_key is not None:
        click.echo(f"admin key, shown only now (keep it somewhere safe): {startup.admin_key}")
    click.echo("Press Ctrl-C to stop.", nl=True)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True)
@click.option("--db", "db", default=None,
              help="Database path or URL (sqlite:///…, postgresql://…); wins over the "
                   "global --db. Default: the user data dir.")
@click.option("--config", "config", default=None,
              help="A YAML configuration file; wins over the global --config.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Server processes sharing the port (use PostgreSQL for more than a few).")
@click.option("--rate-limit", type=click.FloatRange(0, min_open=True), default=50.0,
              show_default=True, help="Requests per second per API key, per process.")
@click.option("--burst", type=click.IntRange(1), default=100, show_default=True,
              help="Requests a key may make at once after a pause.")
@click.option("--no-rate-limit", is_flag=True, help="Turn rate limiting off.")
@click.option("--public-metrics", is_flag=True,
              help="Serve /metrics without a key (default: the admin key).")
@click.option("--new-admin-key", is_flag=True,
              help="Revoke the stored admin key and print a new one.")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info",
                                                "debug"]), default="info", show_default=True)
@click.option("--access-log", is_flag=True, help="Log every request.")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, db: str | None, config: str | None,
          workers: int, rate_limit: float, burst: int, no_rate_limit: bool,
          public_metrics: bool, new_admin_key: bool, log_level: str,
          access_log: bool) -> None:
    """The REST API and dashboard on http://HOST:PORT/, with API keys. Prints the URL,
    a key for --user, and the admin key at the first start; Ctrl-C stops it."""
    # Imported here: the other commands should not pay for loading the web stack.
    import uvicorn

    from ..memory import open_store
    from .access_log import log_config
    from .metrics import ServerMetrics
    from .serve import SPEC_ENV, ServeSpec, build_app, open_memory, prepare_keys

    root: dict[str, Any] = ctx.find_root().params
    spec = ServeSpec(db=db or root.get("db"), config=config or root.get("config"),
                     embedder=root.get("embedder"), rate=None if no_rate_limit else rate_limit,
                     burst=burst, public_metrics=public_metrics)
    user = str(root.get("user") or "local")
    environ = dict(os.environ)
    url = _url(host, port)
    options: dict[str, Any] = {"host": host, "port": port, "log_level": log_level,
                               "access_log": access_log, "log_config": log_config()}
    if workers > 1:
        settings = spec.settings(environ)
        store = open_store(spec.db or settings.database.url)
        try:
            startup = prepare_keys(store, user, _data_dir(), environ,
                                   new_admin_key=new_admin_key)
            database = store.url
        finally:
            store.close()
        os.environ[SPEC_ENV] = spec.to_env()  # every worker builds its app from it
        _banner(startup, url, database)
        _run(lambda: uvicorn.run("ledgermem.server.serve:worker_app", factory=True,
                                 workers=workers, **options), url)
        return
    metrics = ServerMetrics()
    memory = open_memory(spec, metrics, environ)
    try:
        startup = prepare_keys(memory.store, user, _data_dir(), environ,
                               new_admin_key=new_admin_key)
        app = build_app(memory, spec, metrics, environ, close_memory=False)
        _banner(startup, url, memory.store.url)
        server = uvicorn.Server(uvicorn.Config(app, **options))
        _run(server.run, url)
    finally:
        memory.sync.close()


def _run(start: Any, url: str) -> None:
    """Run the server until Ctrl-C (or SIGTERM). uvicorn handles the signal, shuts down
    gracefully, then raises it again once it is done: that is a clean stop here. A
    server that could not start (the port is taken) exits with one line and code 1."""
    try:
        with contextlib.suppress(KeyboardInterrupt):
            start()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise click.ClickException(f"the server could not start on {url} (uvicorn "
                                       "said why above)") from exc
        raise
