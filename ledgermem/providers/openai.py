"""Clients for any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp server,
LM Studio, Gemini's compatible endpoint).

Retries with exponential backoff on connection errors, timeouts, 429 and 5xx live
here, not in the pipeline; after the last try a ``ProviderError`` is raised. An error
that another try cannot change is not retried, whatever its status: a request the
server reads as invalid (llama-cpp-python answers those with HTTP 500 and a validation
error), or one the caller recognises (``post(..., refused=…)``), which is raised at once
as ``Refused`` with its status and body.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, ProviderError
from .embedders import BaseEmbedder

__all__ = ["OpenAIClient", "OpenAIEmbedder", "Refused", "invalid_request"]

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

_INVALID = ("validation error", "literal_error", "input should be", "extra_forbidden",
            "missing required parameter")
"""What a body says when the server validated the request and refused it (pydantic's
and FastAPI's words): the same request gets the same answer, so it is not retried."""


class Refused(ProviderError):
    """The server refused a request in a way another try cannot change.

    Attributes:
        status: the HTTP status it answered with (a 500 as well as a 400).
        body: the body it answered with.
    """

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def invalid_request(status: int, body: str) -> bool:
    """Whether an error answer says the request itself is invalid (whatever the status)."""
    text = body.lower()
    return status >= 400 and any(word in text for word in _INVALID)


class OpenAIClient:
    """A small JSON-over-HTTP client with retries, shared by the embedder and the LLM.

    Args:
        base_url: e.g. ``http://localhost:11434/v1`` or ``https://api.openai.com/v1``.
        api_key: sent as a bearer token when given (read it from the environment at
            the edge of your program; ledgermem never reads secrets itself).
        timeout: seconds per request.
        retries: extra tries after the first, with exponential backoff.
        transport: an ``httpx`` transport, for tests.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base URL must start with http:// or https://, not {base_url!r}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._secret = api_key or None
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout,
                                  transport=transport)

    def post(self, path: str, body: dict[str, Any], *,
             refused: Callable[[int, str], bool] | None = None) -> dict[str, Any]:
        """POST JSON and return the JSON answer, retrying transient failures.

        ``refused(status, body)`` says which error answers are final for this request
        (besides an invalid request, always final): those raise ``Refused`` at once.
        """
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = self._http.post(path, json=body)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            # A server or proxy may echo the request's headers in an error: never let the
            # key reach an error message, a log line or the ledger.
            status, text = response.status_code, self._hide_secret(response.text)
            if status >= 400 and ((refused is not None and refused(status, text))
                                  or invalid_request(status, text)):
                raise Refused(f"{self.base_url}{path} refused the request with HTTP "
                              f"{status}: {text[:300]}", status, text)
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {status}: {text[:200]}"
                continue
            if response.status_code >= 400:
                raise ProviderError(f"{self.base_url}{path} answered HTTP "
                                    f"{status}: {text[:300]}")
            try:
                data: dict[str, Any] = response.json()
            except ValueError as exc:
                raise ProviderError(f"{self.base_url}{path} answered non-JSON") from exc
            return data
        raise ProviderError(f"{self.base_url}{path} failed after {self.retries + 1} tries: {last}")

    def _hide_secret(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def close(self) -> None:
        self._http.close()


class OpenAIEmbedder(BaseEmbedder):
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint.

    ``dimensions`` is asked of the server once (by embedding a probe) unless given.
    ``query_prefix`` / ``passage_prefix`` are prepended for models trained with them.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        dimensions: int | None = None,
        query_prefix: str = "",
        passage_prefix: str = "",
        batch_size: int = 64,
        client: OpenAIClient | None = None,
        **client_options: Any,
    ) -> None:
        self.client = client or OpenAIClient(base_url, api_key=api_key, **client_options)
        self.model = model
        self.model_id = f"openai:{model}@{self.client.base_url}"
        self.batch_size = batch_size
        self._prefixes = (query_prefix, passage_prefix)
        self.dimensions = dimensions or int(np.asarray(self._embed(["probe"], query=False)
                                                       ).shape[1])

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        prefix = self._prefixes[0] if query else self._prefixes[1]
        data = self.client.post("/embeddings", {"model": self.model,
                                                "input": [prefix + t for t in texts]})
        try:
            rows = sorted(data["data"], key=lambda row: row.get("index", 0))
            return np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderError(f"unexpected /embeddings answer: {str(data)[:200]}") from exc
