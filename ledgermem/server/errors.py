"""What a client sees when a request fails: one JSON shape, one status per error kind.

Every failure answers ``{"error": {"code": …, "message": …}}`` (validation errors add
``details``, the fields at fault). The library's error tree is mapped to HTTP statuses
here, once (``STATUS``); a request that fails validation, names no route or uses the
wrong method gets the same shape. Anything else a handler raises is logged with its
traceback and answered 500 ``internal_error`` without details: a client learns
nothing about the server's insides from it, and a test fails on it.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import (
    AccessDenied,
    ConfigError,
    InvalidInput,
    LedgermemError,
    NotFound,
    ProviderError,
    StorageError,
)

__all__ = ["ERROR_RESPONSES", "STATUS", "ApiError", "BodyLimit", "CatchAll", "ErrorBody",
           "ErrorDetail", "error_response", "install_error_handlers"]

log = logging.getLogger("ledgermem.server")


class ApiError(Exception):
    """A failure the server decides on itself (no key, rate limited, a conflict), with
    its status, code, message and any headers (``Retry-After``, ``WWW-Authenticate``)."""

    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


STATUS: tuple[tuple[type[LedgermemError], int, str], ...] = (
    (NotFound, 404, "not_found"),
    (InvalidInput, 422, "invalid_input"),
    (AccessDenied, 403, "forbidden"),
    (ProviderError, 502, "provider_error"),
    (ConfigError, 503, "not_configured"),
    (StorageError, 503, "storage_unavailable"),
    (LedgermemError, 500, "internal_error"),
)
"""The library's errors as (kind, HTTP status, code), most specific first."""


class ErrorDetail(BaseModel):
    """What went wrong."""

    code: str
    """A stable, machine-readable name (``not_found``, ``invalid_input``, ``rate_limited``…)."""
    message: str
    """One sentence for a person."""
    details: list[dict[str, Any]] | None = None
    """For ``validation_error``: each field at fault (``loc``, ``msg``, ``type``)."""


class ErrorBody(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


def error_response(status: int, code: str, message: str, *,
                   details: list[dict[str, Any]] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """A response in the one error shape."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, details=details))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status,
                        headers=headers)


def _for_library(exc: LedgermemError) -> JSONResponse:
    for kind, status, code in STATUS:
        if isinstance(exc, kind):
            if status >= 500:
                log.warning("%s: %s", code, exc)
            if isinstance(exc, StorageError):  # the driver's words stay in the log
                return error_response(status, code, "the database failed on this "
                                      "request; the server's log says why")
            return error_response(status, code, str(exc) or code)
    raise AssertionError("LedgermemError is the last entry of STATUS")  # pragma: no cover


def _details(exc: RequestValidationError) -> list[dict[str, Any]]:
    """The fields at fault, without the input itself (it may be large or private)."""
    return [{"loc": [str(part) for part in error.get("loc", ())],
             "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
            for error in exc.errors()]


_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 406: "not_acceptable", 413: "too_large",
               415: "unsupported_media_type", 429: "rate_limited"}


def install_error_handlers(app: FastAPI) -> None:
    """Answer every failure of ``app`` in the one error shape."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.code, exc.message, headers=exc.headers)

    async def library_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, LedgermemError)
        return _for_library(exc)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        details = _details(exc)
        first = details[0] if details else {"loc": [], "msg": "invalid request"}
        where = ".".join(first["loc"])
        message = str(first["msg"])
        return error_response(422, "validation_error",
                              f"{where}: {message}" if where else message, details=details)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(LedgermemError, library_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_middleware(CatchAll)


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` answers 413, whether its
    ``Content-Length`` says so up front or a chunked body grows past it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is larger than {self.max_bytes:,} bytes"
        declared = dict(scope.get("headers", ())).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await error_response(413, "too_large", message)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            received = await receive()
            if received["type"] == "http.request":
                seen += len(received.get("body", b""))
                if seen > self.max_bytes:
                    # An HTTPException: FastAPI re-raises it from body parsing (any other
                    # exception there becomes a 400), and the handler answers 413.
                    raise HTTPException(413, message)
            return received

        await self.app(scope, limited, send)


class CatchAll:
    """ASGI middleware: an exception no handler took becomes a logged 500 in the one
    error shape (Starlette's own last resort answers plain text and raises again)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            log.error("unexpected error on %s %s", scope.get("method"), scope.get("path"),
                      exc_info=exc)
            if started:  # the status line is out: all that is left is to cut the body
                raise
            response = error_response(500, "internal_error", "the server failed on this "
                                      "request; it has been logged")
            await response(scope, receive, send)


def _documented(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _documented("The body could not be parsed (nested past what the JSON parser "
                     "reads, about 1,000 levels); a body that is not JSON is a 422."),
    401: _documented("No API key, or one that is unknown or revoked."),
    403: _documented("The key may not do this (another user, an agent-bound key, not "
                     "the admin key)."),
    404: _documented("No such id in this user's memory."),
    413: _documented("The request body is larger than the server reads."),
    422: _documented("The request is malformed or a value is invalid."),
    429: _documented("Too many requests with this key; retry after Retry-After seconds."),
    502: _documented("The LLM or embedding provider failed."),
    503: _documented("The database is unavailable, or the server lacks a setting."),
}
"""The error responses every authenticated route may give, for the OpenAPI document."""
