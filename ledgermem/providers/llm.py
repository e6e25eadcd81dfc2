"""LLMs: the ``LLM`` protocol and a client for any OpenAI-compatible ``/chat/completions``.

An LLM answers a list of chat messages with an instance of a pydantic model. Structured
output uses the server's JSON schema mode where it has one, JSON mode otherwise, and the
answer is validated with pydantic either way. Timeouts, retries with backoff on 429/5xx
and a concurrency limit live here, not in the pipeline.

Every call is reported as an ``LLMCall`` (purpose, model, tokens in/out, latency,
outcome) to whoever is ``recording`` in the calling thread: the pipeline records them
in the ledger, so ``stats()`` can say what memory costs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import httpx
from pydantic import BaseModel, ValidationError

from ..errors import ConfigError, ProviderError
from .openai import OpenAIClient

__all__ = ["LLM", "LLMCall", "OpenAICompatibleLLM", "recording", "report"]

log = logging.getLogger("ledgermem.llm")

T = TypeVar("T", bound=BaseModel)
Message = Mapping[str, str]
JsonMode = Literal["auto", "json_schema", "json_object", "none"]


@dataclass(frozen=True)
class LLMCall:
    """What one ``complete`` cost: recorded for ``stats`` (and the dashboard)."""

    purpose: str
    model: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    outcome: Literal["ok", "error"]
    error: str | None = None


@runtime_checkable
class LLM(Protocol):
    """What the pipeline needs from a language model."""

    model: str

    def complete(self, messages: Sequence[Message], schema: type[T], *, purpose: str) -> T:
        """Answer ``messages`` with a validated instance of ``schema``.

        ``purpose`` names the pipeline step (``extraction``, ``reconcile``, …) for
        accounting. Raises ``ProviderError`` when no valid answer came after retries.
        """


_recorder: ContextVar[Callable[[LLMCall], None] | None] = ContextVar(
    "ledgermem_llm_recorder", default=None)


@contextmanager
def recording(callback: Callable[[LLMCall], None]) -> Iterator[None]:
    """Send every ``LLMCall`` reported in this thread (context) to ``callback``."""
    token = _recorder.set(callback)
    try:
        yield
    finally:
        _recorder.reset(token)


def report(call: LLMCall) -> None:
    """Providers call this once per ``complete``; a no-op when nobody records."""
    callback = _recorder.get()
    if callback is not None:
        callback(call)


class OpenAICompatibleLLM:
    """Chat completions from OpenAI, Ollama, vLLM, llama.cpp server, LM Studio, Gemini…

    Args:
        model: the model name the server knows (``gpt-4o-mini``, ``qwen2.5:7b``…).
        base_url: e.g. ``http://localhost:11434/v1``.
        api_key: sent as a bearer token; read it from the environment at the edge of
            your program (ledgermem's CLI reads ``LEDGERMEM_LLM_API_KEY``).
        timeout: seconds per HTTP request.
        retries: extra HTTP tries on timeouts, connection errors, 429 and 5xx.
        backoff: first retry delay in seconds (doubles each time).
        max_concurrency: requests in flight at once from this client; more callers wait.
        json_mode: ``auto`` asks for a JSON schema and falls back to JSON mode (then to
            a plain prompt) when the server rejects it; or force one of
            ``json_schema``, ``json_object``, ``none``.
        validation_retries: how many times an answer that is not valid JSON for the
            schema is asked again before ``ProviderError`` (never endlessly).
        temperature: sampling temperature (0 for repeatable extraction).
        transport: an ``httpx`` transport, for tests.
    """

    def __init__(
        self,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 4,
        json_mode: JsonMode = "auto",
        validation_retries: int = 1,
        temperature: float = 0.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not model:
            raise ConfigError("an LLM needs a model name")
        if max_concurrency < 1:
            raise ConfigError("max_concurrency must be at least 1")
        if json_mode not in ("auto", "json_schema", "json_object", "none"):
            raise ConfigError(f"unknown json_mode {json_mode!r}")
        self.model = model
        self.client = OpenAIClient(base_url, api_key=api_key, timeout=timeout, retries=retries,
                                   backoff=backoff, transport=transport)
        self.json_mode = json_mode
        self.validation_retries = max(0, validation_retries)
        self.temperature = temperature
        self.max_concurrency = max_concurrency
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._mode: str = "json_schema" if json_mode == "auto" else json_mode
        self._mode_lock = threading.Lock()

    @property
    def structured_output(self) -> str:
        """The structured-output mode in use now (``auto`` settles on the first call)."""
        return self._mode

    def complete(self, messages: Sequence[Message], schema: type[T], *, purpose: str) -> T:
        started = time.perf_counter()
        usage = [0, 0]
        try:
            with self._slots:
                result = self._complete([dict(m) for m in messages], schema, usage)
        except ProviderError as exc:
            self._report(purpose, usage, started, str(exc))
            raise
        self._report(purpose, usage, started, None)
        return result

    def close(self) -> None:
        """Release the HTTP connections."""
        self.client.close()

    def _report(self, purpose: str, usage: list[int], started: float, error: str | None
                ) -> None:
        report(LLMCall(purpose=purpose, model=self.model, tokens_in=usage[0],
                       tokens_out=usage[1],
                       latency_ms=round((time.perf_counter() - started) * 1000, 3),
                       outcome="error" if error else "ok", error=error))

    def _complete(self, messages: list[dict[str, str]], schema: type[T], usage: list[int]
                  ) -> T:
        problem = ""
        for _ in range(self.validation_retries + 1):
            content = self._chat(messages, schema, usage)
            try:
                return schema.model_validate(json.loads(json_text(content)))
            except (ValueError, ValidationError) as exc:
                problem = f"{type(exc).__name__}: {str(exc)[:300]}"
                log.warning("%s answered invalid JSON for %s: %s", self.model,
                            schema.__name__, problem)
        raise ProviderError(f"{self.model} gave no valid {schema.__name__} after "
                            f"{self.validation_retries + 1} answers: {problem}")

    def _chat(self, messages: list[dict[str, str]], schema: type[BaseModel],
              usage: list[int]) -> str:
        while True:
            mode = self._mode
            body: dict[str, Any] = {"model": self.model, "temperature": self.temperature,
                                    "messages": messages}
            if mode == "json_schema":
                body["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": schema.__name__, "schema": schema.model_json_schema(),
                    "strict": False}}
            else:
                body["messages"] = with_schema_hint(messages, schema)
                if mode == "json_object":
                    body["response_format"] = {"type": "json_object"}
            try:
                data = self.client.post("/chat/completions", body)
            except ProviderError as exc:
                if self.json_mode == "auto" and mode != "none" and _rejects_format(exc):
                    self._fall_back(mode, exc)
                    continue
                raise
            return _content(data, usage)

    def _fall_back(self, mode: str, exc: ProviderError) -> None:
        with self._mode_lock:
            if self._mode == mode:
                self._mode = "json_object" if mode == "json_schema" else "none"
                log.info("%s at %s does not take response_format %s (%s); using %s",
                         self.model, self.client.base_url, mode, str(exc)[:120], self._mode)


def with_schema_hint(messages: list[dict[str, str]], schema: type[BaseModel]
                     ) -> list[dict[str, str]]:
    """The messages with the output schema spelled out in the system message (for
    servers without JSON schema mode; JSON mode also needs the word "JSON" there)."""
    hint = ("Answer with one JSON object, and nothing else, matching this JSON schema:\n"
            + json.dumps(schema.model_json_schema(), separators=(",", ":")))
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0]['content']}\n\n{hint}"
    else:
        out.insert(0, {"role": "system", "content": hint})
    return out


def json_text(content: str) -> str:
    """The JSON inside an answer: code fences and chatter around the object removed."""
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0].strip()
    if text[:1] not in ("{", "["):
        start, end = text.find("{"), text.rfind("}")
        if start != -1 and end > start:
            text = text[start:end + 1]
    return text


def _content(data: dict[str, Any], usage: list[int]) -> str:
    counts = data.get("usage") or {}
    usage[0] += int(counts.get("prompt_tokens") or 0)
    usage[1] += int(counts.get("completion_tokens") or 0)
    try:
        content = data["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ProviderError(f"unexpected /chat/completions answer: {str(data)[:200]}") from exc
    return content if isinstance(content, str) else ""


def _rejects_format(exc: ProviderError) -> bool:
    """Whether the server refused the request because of ``response_format``."""
    text = str(exc).lower()
    return (("http 400" in text or "http 422" in text)
            and any(word in text for word in ("response_format", "json_schema", "json_object",
                                              "response format")))
