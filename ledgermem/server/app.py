"""The REST application: ``create_app(memory, keys)`` builds it over an ``AsyncMemory``.

Every route under ``/v1`` needs an API key (``deps``) and acts for one user; errors
answer one JSON shape (``errors``); ``/healthz`` needs no key, ``/metrics`` needs the
admin key unless ``ServerSettings.public_metrics``. ``GET /`` serves the dashboard's
files when they are installed (``ledgermem/server/dashboard/``), else it sends a
browser to the API's documentation (``/docs``). Every answer carries the headers of
``headers`` (no caching of memory, no framing, no script in an API answer).

The application holds no state of its own between requests besides rate-limit buckets
and metrics: keys and memory live in the database, so any number of processes can
serve one PostgreSQL database (``ledgermem serve --workers N``, or several hosts).

Example:
    >>> memory = AsyncMemory.from_sync(Memory.open("memory.db"))   # doctest: +SKIP
    >>> app = create_app(memory, KeyRing(memory.store))             # doctest: +SKIP
    >>> uvicorn.run(app)                                            # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import Depends, FastAPI
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import Scope as StarletteScope

from ..aio import AsyncMemory
from .deps import ServerState, Shared, admin
from .errors import ERROR_RESPONSES, BodyLimit, install_error_handlers
from .headers import SecurityHeaders
from .keys import KeyRing
from .metrics import CONTENT_TYPE, MetricsMiddleware, ServerMetrics
from .models import HealthOut
from .ratelimit import FAILED_KEYS, RateLimit, RateLimiter
from .routes import admin as admin_routes
from .routes import (
    conversations,
    dashboard,
    events,
    export,
    knowledge,
    maintenance,
    review,
    stats,
    tools,
)
from .routes import keys as key_routes

__all__ = ["API_PREFIX", "DASHBOARD_DIR", "ServerSettings", "create_app"]

DASHBOARD_DIR = Path(__file__).parent / "dashboard"
"""Where the dashboard's static files live (served at ``/`` when present)."""
API_PREFIX = "/v1"
"""Where the API's routes live: the dashboard never answers a path under it, so an
unknown one is a JSON 404 and a known one with another method a 405."""
DOCS_URL = "/docs"
"""The API's documentation page (Swagger UI; no ReDoc, whose bundle loads its logo
from a CDN)."""
DOCS_ASSETS_URL = f"{DOCS_URL}/assets"
"""Its scripts and styles, served from the ``fastapi_offline`` package."""


@dataclass(frozen=True)
class ServerSettings:
    """How the server behaves, apart from the memory it serves.

    Attributes:
        rate_limit: requests per key (``RateLimit``: rate per second and burst), per
            process; None turns limiting off.
        public_metrics: serve ``/metrics`` without a key (for a scraper on a trusted
            network); by default it needs the admin key.
        dashboard_dir: the dashboard's files, served at ``/`` when the folder has an
            ``index.html``.
        max_body_bytes: the largest request body read; a larger one answers 413.
    """

    rate_limit: RateLimit | None = field(default_factory=RateLimit)
    public_metrics: bool = False
    dashboard_dir: Path = DASHBOARD_DIR
    max_body_bytes: int = 16 * 1024 * 1024


def _version() -> str:
    try:
        return version("ledgermem")
    except PackageNotFoundError:  # pragma: no cover - a source tree not installed
        return "0"


def create_app(memory: AsyncMemory, keys: KeyRing, *, settings: ServerSettings | None = None,
               metrics: ServerMetrics | None = None) -> FastAPI:
    """The REST application over ``memory``, accepting the keys of ``keys``.

    Args:
        memory: the memory served (closing it is the caller's business).
        keys: the API keys (``KeyRing(memory.store)``, usually).
        settings: rate limits, metrics access and the dashboard (defaults when None).
        metrics: the metrics to count into (a new registry when None); pass the one
            an LLM was wrapped with (``CountingLLM``) to count its calls.
    """
    settings = settings or ServerSettings()
    metrics = metrics or ServerMetrics()
    metrics.watch(memory)
    # The documentation page's scripts and styles come from this server
    # (``fastapi_offline``), not a CDN: it works offline and tells no third party.
    app = FastAPIOffline(
        docs_url=DOCS_URL, redoc_url=None, static_url=DOCS_ASSETS_URL,
        title="ledgermem", version=_version(),
        summary="Long-term memory for LLM agents: REST API.",
        description="Every `/v1` route needs an API key (`Authorization: Bearer <key>` or "
                    "`X-API-Key`). A user key acts for its user; the admin key acts for the "
                    "user named in `X-Ledgermem-User`. Errors: `{\"error\": {\"code\", "
                    "\"message\"}}`.")
    app.state.ledgermem = ServerState(
        memory=memory, keys=keys, metrics=metrics, public_metrics=settings.public_metrics,
        limiter=None if settings.rate_limit is None else RateLimiter(settings.rate_limit),
        failures=None if settings.rate_limit is None else RateLimiter(FAILED_KEYS))
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    # Outermost of ours: every answer gets the headers, errors and 413s included.
    app.add_middleware(SecurityHeaders, private=[API_PREFIX, "/metrics"],
                       data=[url for url in (app.openapi_url, "/healthz") if url],
                       docs=[DOCS_URL])
    for module in (knowledge, conversations, tools, events, review, stats, maintenance,
                   export, key_routes, admin_routes, dashboard):
        app.include_router(module.router)
    _add_health_and_metrics(app, settings)
    _add_dashboard(app, settings.dashboard_dir)
    return app


def _add_health_and_metrics(app: FastAPI, settings: ServerSettings) -> None:
    @app.get("/healthz", tags=["server"], summary="Health",
             responses={503: ERROR_RESPONSES[503]})
    async def healthz(shared: Shared) -> HealthOut:
        """The server answers and its database does (no key needed)."""
        await anyio.to_thread.run_sync(shared.memory.store.get_meta, "embedding_model")
        return HealthOut(status="ok", version=app.version)

    text: dict[int | str, dict[str, Any]] = {
        200: {"description": "Prometheus text format.",
              "content": {"text/plain": {"schema": {"type": "string"}}}}}
    guard = [] if settings.public_metrics else [Depends(admin)]
    errors: dict[int | str, dict[str, Any]] = {} if settings.public_metrics else {
        code: ERROR_RESPONSES[code] for code in (401, 403, 429)}

    @app.get("/metrics", tags=["server"], summary="Metrics", response_class=Response,
             dependencies=guard, responses={**text, **errors})
    async def metrics(shared: Shared) -> Response:
        """This process's requests, latencies, searches and LLM calls, and the
        database's queues, in Prometheus text format."""
        body = await anyio.to_thread.run_sync(shared.metrics.render)
        return Response(body, media_type=CONTENT_TYPE)


class _DashboardMount(Mount):
    """The dashboard's files at ``/``, on every path the API leaves alone.

    A plain mount at ``/`` matches every path, so it took the requests the router
    should answer itself: a route's path with a method the route lacks (``GET
    /v1/turns/search``, ``HEAD /v1/me``) looked for a file and answered 404, where the
    router answers 405 with ``Allow``. This mount declines every path under
    ``API_PREFIX`` and every path another route of the app matches with any method.

    Args:
        folder: the dashboard's files (an ``index.html`` among them).
        routes: the app's routes, read at each request (so routes added later count).
    """

    def __init__(self, folder: Path, routes: Sequence[BaseRoute]) -> None:
        super().__init__("/", app=StaticFiles(directory=folder, html=True),
                         name="dashboard")
        self._routes = routes

    def matches(self, scope: StarletteScope) -> tuple[Match, StarletteScope]:
        if scope["type"] == "http" and self._api_owns(scope):
            return Match.NONE, {}
        return super().matches(scope)

    def _api_owns(self, scope: StarletteScope) -> bool:
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):   # served under a prefix (a proxy's)
            path = path[len(root):]
        if path == API_PREFIX or path.startswith(f"{API_PREFIX}/"):
            return True
        return any(route.matches(scope)[0] is not Match.NONE
                   for route in self._routes if route is not self)


def _add_dashboard(app: FastAPI, folder: Path) -> None:
    if (folder / "index.html").is_file():
        app.router.routes.append(_DashboardMount(folder, app.router.routes))
        return

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse(DOCS_URL)
