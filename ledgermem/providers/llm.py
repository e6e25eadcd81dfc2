"""LLMs: the ``LLM`` protocol and a client for any OpenAI-compatible ``/chat/completions``.

An LLM answers a list of chat messages with an instance of a pydantic model. Structured
output uses the server's JSON schema mode where it has one, JSON mode otherwise, and the
answer is validated with pydantic either way. Timeouts, retries with backoff on 429/5xx
and a concurrency limit live here, not in the pipeline.

Servers differ (docs/llm-servers.md). ``json_mode="auto"`` asks for a JSON schema and
settles, once per client, on the first mode the server takes: a refusal is recognised
by what the body says about ``response_format`` whatever the status (llama-cpp-python
answers HTTP 500), and it is never retried. Answers are read by ``read_json``: leniently
where nothing can be misread (code fences, prose around one object), loudly where
something could (two different objects, a key given two different values).

Every call is reported as an ``LLMCall`` (purpose, model, tokens in/out, latency,
outcome) to whoever is ``recording`` in the calling thread: the pipeline records them
in the ledger, so ``stats()`` can say what memory costs.
"""

from __future__ import annotations

import json
import logging
import re
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
from .openai import OpenAIClient, Refused

__all__ = ["LLM", "LLMCall", "OpenAICompatibleLLM", "UnclearAnswer", "read_json", "recording",
           "refuses_format", "report"]

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
            a plain prompt) when the server refuses it, whatever the HTTP status, and
            keeps the mode that worked for every later call; or force one of
            ``json_schema``, ``json_object``, ``none`` (a refusal is then an error,
            raised at once).
        validation_retries: how many times an answer that is not valid JSON for the
            schema is asked again (told what was wrong with it) before
            ``ProviderError`` (never endlessly).
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
        self.served_model: str | None = None
        """The model name the server reported in its last answer (None before one)."""
        self.refusals: list[str] = []
        """What the server said each time it refused a structured-output mode."""

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
        asked = messages
        for _ in range(self.validation_retries + 1):
            content = self._chat(asked, schema, usage)
            try:
                return schema.model_validate(read_json(content))
            except (ValueError, ValidationError) as exc:
                problem = f"{type(exc).__name__}: {str(exc)[:300]}"
                log.warning("%s answered invalid JSON for %s: %s", self.model,
                            schema.__name__, problem)
                # The same prompt at temperature 0 gets the same answer: say what was
                # wrong, so that asking again can change something.
                asked = [*messages, {"role": "assistant", "content": content[:2000]},
                         {"role": "user", "content": _again(problem)}]
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
                data = self.client.post("/chat/completions", body,
                                        refused=refuses_format if mode != "none" else None)
            except Refused as exc:
                if mode == "none" or not refuses_format(exc.status, exc.body):
                    raise
                if self.json_mode != "auto":
                    raise ProviderError(
                        f"{self.client.base_url} refuses response_format {mode} (HTTP "
                        f"{exc.status}); use json_mode='auto' or another mode: "
                        f"{exc.body[:200]}") from exc
                self._fall_back(mode, exc)
                continue
            model = data.get("model") if isinstance(data, dict) else None
            if isinstance(model, str) and model:
                self.served_model = model
            return _content(data, usage)

    def _fall_back(self, mode: str, exc: Refused) -> None:
        with self._mode_lock:
            self.refusals.append(f"{mode}: HTTP {exc.status}: {' '.join(exc.body.split())[:200]}")
            if self._mode == mode:
                self._mode = "json_object" if mode == "json_schema" else "none"
                log.info("%s at %s does not take response_format %s (HTTP %s); using %s "
                         "from now on", self.model, self.client.base_url, mode, exc.status,
                         self._mode)


def _again(problem: str) -> str:
    return (f"That answer could not be used ({problem[:300]}). Answer again with one JSON "
            "object and nothing else, giving each key once.")


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


class UnclearAnswer(ValueError):
    """An answer that could be read more than one way (two different JSON objects, a
    key given two different values): refused rather than guessed at."""


def read_json(content: str) -> Any:
    """The JSON value an answer holds, read leniently where nothing can be misread.

    Accepted: the JSON alone; inside a code fence; with prose before or after it, or a
    reasoning block (``<think>…</think>``) before it, whatever JSON that quotes; the
    same object given twice. A key given twice with the same value is read once; a key
    given twice with two lists (``{"operations": [...], "operations": []}``) is read as
    both lists joined, in order: nothing the model wrote is silently lost, and every
    entry is still validated (and, for extraction, guarded) on its own. Refused with
    ``UnclearAnswer``: a key given two different values that are not both lists, two
    different JSON objects in one answer. Raises ``ValueError`` when there is no JSON.
    """
    # A reasoning model's thinking (``<think>…</think>``, which llama.cpp and vLLM leave
    # in the content) may quote JSON it then decides against: only the answer counts.
    text = _THINKING.sub("", content.lstrip("\ufeff")).strip()
    fenced = [block.strip() for block in _FENCE.findall(text)]
    sources = [b for b in fenced if b[:1] in ("{", "[")] or [text]
    found: list[Any] = []
    for source in sources:
        found.extend(_values(source))
    if not found:
        raise ValueError(f"no JSON object in the answer: {text[:120]!r}")
    first = found[0]
    if any(other != first for other in found[1:]):
        raise UnclearAnswer(f"the answer holds {len(found)} different JSON objects")
    return first


_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_THINKING = re.compile(r"^\s*<(think|thinking|reasoning)>.*?(?:</\1>|\Z)",
                       re.DOTALL | re.IGNORECASE)
"""A reasoning block at the start of an answer, to its closing tag (or the end, when
the model was cut off while thinking)."""


def _values(text: str) -> list[Any]:
    """Each JSON object found in ``text`` (outside one another), left to right; a
    top-level list when ``text`` starts with one."""
    decoder = json.JSONDecoder(object_pairs_hook=_one_value_per_key)
    if text.startswith("["):
        try:
            value, _ = decoder.raw_decode(text)
            return [value]
        except json.JSONDecodeError:
            pass
    values: list[Any] = []
    at = text.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            if text[at + 1:].lstrip().startswith('"'):  # an object cut short or broken:
                raise ValueError(f"malformed JSON in the answer: {exc}") from exc  # no guess
            at = text.find("{", at + 1)
            continue
        values.append(value)
        at = text.find("{", end)
    return values


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json``'s object hook: a repeated key is read once when its values agree,
    joined when they are lists, and refused otherwise."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key not in out or out[key] == value:
            out[key] = value
        elif isinstance(out[key], list) and isinstance(value, list):
            out[key] = [*out[key], *value]
        else:
            raise UnclearAnswer(f"key {key!r} is given two different values")
    return out


def _content(data: dict[str, Any], usage: list[int]) -> str:
    counts = data.get("usage") or {}
    usage[0] += int(counts.get("prompt_tokens") or 0)
    usage[1] += int(counts.get("completion_tokens") or 0)
    try:
        content = data["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ProviderError(f"unexpected /chat/completions answer: {str(data)[:200]}") from exc
    return content if isinstance(content, str) else ""


_FORMAT_WORDS = ("response_format", "response format", "json_schema", "json schema",
                 "json_object", "response_schema", "response_mime_type", "structured output",
                 "guided_json", "guided decoding")


def refuses_format(status: int, body: str) -> bool:
    """Whether an error answer refuses the structured-output request: its body names
    ``response_format``, a JSON schema or JSON mode, whatever the status (400, 422, and
    the 500 llama-cpp-python answers with)."""
    text = body.lower()
    return status >= 400 and any(word in text for word in _FORMAT_WORDS)
