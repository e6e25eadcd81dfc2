"""The headers every answer carries, so a browser does no more with it than it means.

- ``Content-Security-Policy``: the dashboard's pages run only the server's own scripts
  and styles and may not be framed by another site (``frame-ancestors``, which the
  policy in the page's ``<meta>`` cannot say); an API answer runs nothing at all, so
  stored text in it could not run even if a browser were made to render it as a page.
  The API's documentation page (``/docs``) runs the server's own copy of Swagger UI,
  and the one inline script the page starts it with.
- ``X-Frame-Options: DENY``: the same for browsers that know no ``frame-ancestors``.
- ``X-Content-Type-Options: nosniff``: JSON is never guessed to be HTML or script.
- ``Referrer-Policy: no-referrer``: no address of the server leaves with a link.
- ``Cache-Control: no-store`` on API answers (``/v1/…`` and ``/metrics``): they hold
  memory, which no browser or proxy cache keeps on disk.

A header a route set itself is left as it is.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["API_POLICY", "DASHBOARD_POLICY", "DOCS_POLICY", "SecurityHeaders"]

DASHBOARD_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; "
                    "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""The dashboard's pages: the policy of its ``index.html``, and no framing."""
API_POLICY = "default-src 'none'; frame-ancestors 'none'"
"""An API answer: nothing may run or load from it."""
DOCS_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; "
               "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
               "connect-src 'self'; object-src 'none'; base-uri 'none'; "
               "form-action 'self'; frame-ancestors 'none'")
"""The API's documentation page: scripts and styles from this server only (and the
inline script FastAPI's page template starts Swagger UI with), no framing."""
_ALWAYS = (("x-content-type-options", "nosniff"), ("x-frame-options", "DENY"),
           ("referrer-policy", "no-referrer"))


class SecurityHeaders:
    """ASGI middleware adding the module's headers to every HTTP answer.

    Args:
        app: the application wrapped.
        private: path prefixes whose answers hold memory (``/v1``, ``/metrics``): not
            stored, nothing runs.
        data: other paths that answer data (``/openapi.json``, ``/healthz``): nothing runs.
        docs: path prefixes of the documentation page (``/docs``).
        Every other path is the dashboard's.
    """

    def __init__(self, app: ASGIApp, *, private: Collection[str], data: Collection[str],
                 docs: Collection[str]) -> None:
        self.app = app
        self.private = tuple(private)
        self.data = frozenset(data)
        self.docs = tuple(docs)

    def _headers_for(self, path: str) -> tuple[tuple[str, str], ...]:
        if _under(path, self.private):
            return (("content-security-policy", API_POLICY),
                    ("cache-control", "no-store"), *_ALWAYS)
        if path in self.data:
            return (("content-security-policy", API_POLICY), *_ALWAYS)
        if _under(path, self.docs):
            return (("content-security-policy", DOCS_POLICY), *_ALWAYS)
        return (("content-security-policy", DASHBOARD_POLICY), *_ALWAYS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):   # served under a prefix (a proxy's)
            path = path[len(root):]
        added = self._headers_for(path)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in added:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, sending)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``prefixes`` or below one."""
    return any(path == prefix or path.startswith(f"{prefix}/") for prefix in prefixes)
