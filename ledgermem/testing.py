"""Test helpers shipped for users' tests too: a deterministic offline embedder and a
scripted OpenAI-compatible server.

``HashEmbedder`` maps words (and their 4-character prefixes) to vector slots by
hashing: texts sharing words are close, it needs no model, and it is the same on
every machine. It is no substitute for a real model's semantics.

``ScriptedLLMServer`` is a real HTTP server on loopback that speaks
``/v1/chat/completions`` and ``/v1/embeddings`` and plays scripted answers (JSON,
malformed text, HTTP errors, delays), so the network edge is faked and nothing else.
``SERVER_PROFILES`` make it answer structured-output requests the way a real kind of
server does: the status and body of each one's refusals (llama-cpp-python's HTTP 500 on
``json_schema``, LM Studio's 400 on ``json_object``, Gemini's errors as a JSON list…)
and the servers that ignore ``response_format`` and wrap their JSON in prose and a
code fence.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import numpy.typing as npt

from .providers.embedders import BaseEmbedder, register_embedder
from .retrieval.keyword import query_terms

__all__ = ["SERVER_PROFILES", "HashEmbedder", "Reply", "ScriptedLLMServer", "ScriptedRequest",
           "ServerProfile"]


class HashEmbedder(BaseEmbedder):
    """Feature-hashing embedder: deterministic, fast, offline."""

    def __init__(self, model: str = "64", *, dimensions: int | None = None) -> None:
        self.dimensions = dimensions or int(model)
        self.model_id = f"hash:{self.dimensions}"
        self.calls = 0

    def _embed(self, texts: Sequence[str], *, query: bool) -> npt.ArrayLike:
        self.calls += 1
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in query_terms(text, max_terms=512):
                for feature in (word, word[:4]):
                    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                    slot = int.from_bytes(digest[:4], "little") % self.dimensions
                    sign = 1.0 if digest[4] & 1 else -1.0
                    out[row, slot] += sign
        return out


# Test code registers itself: importing this module makes ``hash`` / ``hash:DIMS`` a
# name ``embedder_from_name`` and the CLI's ``--embedder`` accept.
register_embedder("hash", HashEmbedder)


Entry = Any
"""A scripted answer: a dict or list (sent as JSON message content), a str (sent raw, e.g.
malformed JSON), an int (an HTTP status to answer with), a float (seconds to wait
before answering 504, to cause a client timeout), a ``Reply``, or a callable taking the
request body and returning one of these."""


@dataclass(frozen=True)
class Reply:
    """A scripted answer with every knob: ``content`` (dict/list → JSON text, str → raw),
    HTTP ``status``, ``delay`` seconds before answering, ``usage`` token counts, and
    ``tool_calls``: the assistant calls tools (``finish_reason`` ``tool_calls``; the
    content is null unless given). Each call is ``{"name", "arguments"}`` (a dict or
    JSON text; an ``id`` is made up unless given) or already in the OpenAI format."""

    content: Any = None
    status: int = 200
    delay: float = 0.0
    usage: dict[str, int] | None = None
    tool_calls: Sequence[dict[str, Any]] | None = None
    error: Any = None
    """The JSON body of an error answer (``status`` other than 200); default: an
    OpenAI-style ``{"error": {"message": …}}``."""
    model: str | None = None
    """The model name the answer reports (default: the one asked for)."""


@dataclass(frozen=True)
class ServerProfile:
    """How one kind of OpenAI-compatible server answers structured-output requests.

    Attributes:
        name: what the profile is called in ``SERVER_PROFILES``.
        refuses: ``response_format`` type → the (status, JSON body) it is refused with,
            before any scripted reply is played.
        ignores: types the server accepts but does not enforce: the scripted JSON comes
            back wrapped in a sentence and a code fence, as a model left free writes it.
    """

    name: str
    refuses: Mapping[str, tuple[int, Any]] = field(default_factory=dict)
    ignores: frozenset[str] = frozenset()


_LLAMA_CPP_PYTHON_500 = {"error": {
    "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
               "'response_format', 'type'), 'msg': \"Input should be 'text' or "
               "'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or "
               "'json_object'\"}}\n\n  File \"llama_cpp/server/app.py\", line 376, in "
               "create_chat_completion\n    POST /v1/chat/completions",
    "type": "internal_server_error", "param": None, "code": None}}

SERVER_PROFILES: dict[str, ServerProfile] = {profile.name: profile for profile in (
    ServerProfile("openai"),
    # llama-cpp-python's server (0.3.x): a request-validation error on json_schema,
    # answered with HTTP 500 (recorded in ../shared/data/real-llm).
    ServerProfile("llama-cpp-python", {"json_schema": (500, _LLAMA_CPP_PYTHON_500)}),
    # llama.cpp's llama-server, older builds: a runtime error, HTTP 500.
    ServerProfile("llama-server-old", {"json_schema": (500, {"error": {
        "code": 500, "type": "server_error",
        "message": 'response_format type must be one of "text" or "json_object", but got: '
                   "json_schema"}})}),
    # LM Studio: JSON schema only; the error is a bare string.
    ServerProfile("lm-studio", {"json_object": (400, {
        "error": "'response_format.type' must be 'json_schema' or 'text'"})}),
    # vLLM when its grammar backend cannot compile the schema.
    ServerProfile("vllm", {"json_schema": (400, {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": "The provided JSON schema contains features not supported by "
                   "xgrammar."})}),
    # Gemini's OpenAI-compatible endpoint: errors come as a JSON list.
    ServerProfile("gemini", {"json_schema": (400, [{"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": "Invalid JSON payload received. Unknown name \"$defs\" at "
                   "'response_format.json_schema.schema': Cannot find field."}}])}),
    # A FastAPI-based server with a strict request model: 422 and a ``detail`` list.
    ServerProfile("strict-422", {"json_schema": (422, {"detail": [{
        "type": "literal_error", "loc": ["body", "response_format", "type"],
        "msg": "Input should be 'text' or 'json_object'", "input": "json_schema"}]})}),
    # A server with no structured output at all.
    ServerProfile("no-json-mode", {kind: (400, {"error": {
        "message": f"response_format {kind} is not supported", "type": "invalid_request_error"}})
        for kind in ("json_schema", "json_object")}),
    # Older Ollama and many proxies: response_format is taken and ignored.
    ServerProfile("ignores-format", ignores=frozenset({"json_schema", "json_object"})),
)}
"""Known server behaviours, by name, for ``ScriptedLLMServer(profile=…)``."""


@dataclass(frozen=True)
class ScriptedRequest:
    """One request the server received: path (without ``/v1``), JSON body, headers and
    the HTTP status it was answered with (0 while the answer is still being played)."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int

    @property
    def text(self) -> str:
        """Every message's content of a chat request, joined (for assertions)."""
        return "\n".join(str(m.get("content", "")) for m in self.body.get("messages", []))


class ScriptedLLMServer:
    """A real HTTP server on 127.0.0.1 speaking the OpenAI-compatible API, for tests.

    ``/v1/chat/completions`` plays the scripted replies in order; ``/v1/embeddings``
    plays its own script, or answers with ``HashEmbedder`` vectors when that is empty.
    Every request is recorded in ``requests``. When the chat script runs out the
    server plays ``default``, or answers HTTP 410 ("script exhausted") so that an
    unexpected call fails loudly.

    Example:
        >>> with ScriptedLLMServer({"operations": []}) as server:   # doctest: +SKIP
        ...     llm = OpenAICompatibleLLM("test", server.url, retries=0)
        ...     memory = Memory(SQLiteStore(path), llm=llm)

    Args:
        replies: the chat script (see ``Entry``).
        embeddings: the embeddings script: lists of vectors, status codes, delays.
        dimensions: size of the default (hashed) embedding vectors.
        json_schema: False makes the server refuse ``response_format`` of type
            ``json_schema`` with HTTP 400, like servers that only have JSON mode.
        default: the chat reply once the script is played (e.g. a callable that
            answers from the request); None answers HTTP 410.
        profile: a ``ServerProfile`` or the name of one in ``SERVER_PROFILES``: how
            structured-output requests are refused or ignored (default ``openai``:
            every mode taken).
    """

    def __init__(self, *replies: Entry, embeddings: Sequence[Entry] = (),
                 dimensions: int = 64, json_schema: bool = True,
                 default: Entry | None = None,
                 profile: str | ServerProfile = "openai") -> None:
        if isinstance(profile, str):
            if profile not in SERVER_PROFILES:
                raise ValueError(f"unknown server profile {profile!r}; known: "
                                 f"{', '.join(SERVER_PROFILES)}")
            profile = SERVER_PROFILES[profile]
        self.profile = profile
        self.json_schema = json_schema
        self.default = default
        self.requests: list[ScriptedRequest] = []
        self.max_in_flight = 0
        self.errors: list[BaseException] = []
        self._chat: deque[Entry] = deque(replies)
        self._embeddings: deque[Entry] = deque(embeddings)
        self._embedder = HashEmbedder(dimensions=dimensions)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="scripted-llm", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The base URL to give a client: ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reply(self, *entries: Entry) -> None:
        """Append chat replies to the script."""
        with self._lock:
            self._chat.extend(entries)

    def reply_embeddings(self, *entries: Entry) -> None:
        """Append embeddings answers to their script."""
        with self._lock:
            self._embeddings.extend(entries)

    @property
    def remaining(self) -> int:
        """Chat replies not played yet."""
        with self._lock:
            return len(self._chat)

    @property
    def chat_requests(self) -> list[ScriptedRequest]:
        """The chat requests received, in order."""
        with self._lock:
            return [r for r in self.requests if r.path == "/chat/completions"]

    def close(self) -> None:
        """Stop serving; replies still waiting out a delay give up at once."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # what the handler calls -------------------------------------------------------
    def _answer(self, path: str, body: dict[str, Any], headers: dict[str, str]
                ) -> tuple[int, Any]:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            index = len(self.requests)
            self.requests.append(ScriptedRequest(path, body, headers, 0))
        try:
            status, answer = self._play(path, body)
        except Exception as exc:  # a broken script: answer 500 and keep it for the test
            self.errors.append(exc)
            status, answer = 500, _error(f"scripted server failed: {exc!r}")
        finally:
            with self._lock:
                self._in_flight -= 1
        with self._lock:
            self.requests[index] = ScriptedRequest(path, body, headers, status)
        return status, answer

    def _play(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        fmt = None
        if path == "/chat/completions":
            fmt = (body.get("response_format") or {}).get("type")
            if fmt == "json_schema" and not self.json_schema:
                return 400, _error("response_format json_schema is not supported by this "
                                   "server; use json_object")
            if isinstance(fmt, str) and fmt in self.profile.refuses:
                return self.profile.refuses[fmt]
            queue = self._chat
        elif path == "/embeddings":
            queue = self._embeddings
        else:
            return 404, _error(f"no route {path}")
        with self._lock:
            entry = queue.popleft() if queue else None
        if entry is None and path == "/chat/completions":
            entry = self.default
        if entry is None and path == "/embeddings":
            entry = self._embedder.embed_batch(list(body.get("input") or [])).tolist()
        if entry is None:
            return 410, _error("scripted server: script exhausted")
        while callable(entry):
            entry = entry(body)
        reply = _as_reply(entry)
        if reply.delay and self._closing.wait(reply.delay):
            return 503, _error("scripted server closing")
        if reply.status != 200:
            return reply.status, (_error(f"scripted HTTP {reply.status}")
                                  if reply.error is None else reply.error)
        if path == "/embeddings":
            return 200, {"object": "list", "model": body.get("model"), "data": [
                {"object": "embedding", "index": i, "embedding": v}
                for i, v in enumerate(reply.content)]}
        content: str | None = (
            reply.content if isinstance(reply.content, str)
            else None if reply.content is None and reply.tool_calls
            else json.dumps(reply.content))
        if content is not None and fmt in self.profile.ignores:
            content = (f"Sure! Here is the JSON you asked for:\n```json\n{content}\n```\n"
                       "Let me know if you need anything else.")
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        usage = reply.usage or {"prompt_tokens": len(prompt.split()),
                                "completion_tokens": len((content or "").split())}
        usage = {**usage, "total_tokens": sum(usage.values())}
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.tool_calls:
            message["tool_calls"] = [_tool_call(call, n)
                                     for n, call in enumerate(reply.tool_calls)]
        return 200, {"id": "scripted", "object": "chat.completion",
                     "model": reply.model or body.get("model"),
                     "choices": [{"index": 0, "message": message,
                                  "finish_reason": "tool_calls" if reply.tool_calls
                                  else "stop"}],
                     "usage": usage}


def _tool_call(call: dict[str, Any], number: int) -> dict[str, Any]:
    """A scripted tool call in the OpenAI format."""
    if "function" in call:
        return {"id": f"call_{number}", "type": "function", **call}
    arguments = call.get("arguments", {})
    return {"id": call.get("id", f"call_{number}"), "type": "function",
            "function": {"name": call["name"],
                         "arguments": arguments if isinstance(arguments, str)
                         else json.dumps(arguments)}}


def _as_reply(entry: Entry) -> Reply:
    if isinstance(entry, Reply):
        return entry
    if isinstance(entry, bool):
        raise TypeError("a scripted reply cannot be a bool")
    if isinstance(entry, int):
        return Reply(status=entry)
    if isinstance(entry, float):
        return Reply(status=504, delay=entry)
    if isinstance(entry, dict | list | str):
        return Reply(content=entry)
    raise TypeError(f"cannot script a reply from {entry!r}")


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timed out) is expected here: stay quiet."""


def _handler_for(server: ScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            path = self.path.split("?", 1)[0]
            path = path[3:] if path.startswith("/v1/") else path
            status, answer = server._answer(path, body if isinstance(body, dict) else {},
                                            dict(self.headers.items()))
            data = json.dumps(answer).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client timed out and hung up
                pass

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``server.requests`` instead."""

    return Handler
