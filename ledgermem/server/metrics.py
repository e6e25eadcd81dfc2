"""Prometheus metrics of one server process (``GET /metrics``, text format).

- ``ledgermem_http_requests_total{method, route, status}`` and
  ``ledgermem_http_request_duration_seconds{method, route}``: every request, by its
  route's template (``/v1/memories/{item_id}``, never the id itself);
- ``ledgermem_search_duration_seconds{target}``: searches of knowledge, of
  conversations, and of both (``all``);
- ``ledgermem_llm_calls_total{purpose, model, outcome}`` and
  ``ledgermem_llm_tokens_total{purpose, model, direction}``: what the LLM was asked
  from this process (extraction, reconciliation, reflection…);
- gauges read at each scrape: rows waiting for a vector and turn batches waiting for
  extraction in the whole database (each counted up to ``QUEUE_CAP``), recall
  bookkeeping waiting in this process, and requests in progress in this process.

Each process counts its own requests (as Prometheus expects: scrape each process, or
sum over them); the queue gauges read the shared database, so every process reports
the same backlog.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..aio import AsyncMemory
from ..providers.llm import LLM, LLMCall, recording, report
from ..providers.llm import Message as ChatMessage

__all__ = ["CONTENT_TYPE", "QUEUE_CAP", "CountingLLM", "MetricsMiddleware", "ServerMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUEUE_CAP = 1000
"""Queue gauges count at most this many rows or batches (a scrape must stay cheap)."""
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0)
T = TypeVar("T", bound=BaseModel)
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""The methods a request is counted under by name; any other is counted as ``other``
(each distinct label is a series kept for the life of the process)."""


class ServerMetrics:
    """The metrics of one server process, in a registry of their own (several apps in
    one process, as in tests, do not mix their counts)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ledgermem_http_requests", "HTTP requests answered, by route template and status.",
            ("method", "route", "status"), registry=self.registry)
        self.latency = Histogram(
            "ledgermem_http_request_duration_seconds", "Time to answer a request.",
            ("method", "route"), buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.in_progress = Gauge(
            "ledgermem_http_requests_in_progress", "Requests being answered now.",
            registry=self.registry)
        self.search = Histogram(
            "ledgermem_search_duration_seconds",
            "Time a search took (knowledge, conversations, or all).", ("target",),
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.llm_calls = Counter(
            "ledgermem_llm_calls", "LLM calls made from this process.",
            ("purpose", "model", "outcome"), registry=self.registry)
        self.llm_tokens = Counter(
            "ledgermem_llm_tokens", "LLM tokens used from this process.",
            ("purpose", "model", "direction"), registry=self.registry)
        self._queues: _Queues | None = None

    def watch(self, memory: AsyncMemory) -> None:
        """Report ``memory``'s queues at each scrape (once per registry)."""
        if self._queues is None:
            self._queues = _Queues(memory)
            self.registry.register(self._queues)

    @contextmanager
    def searching(self, target: str) -> Iterator[None]:
        """Time a search of ``target`` (``knowledge``, ``conversations``, ``all``)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.search.labels(target).observe(time.perf_counter() - started)

    def count_llm_call(self, call: LLMCall) -> None:
        self.llm_calls.labels(call.purpose, call.model, call.outcome).inc()
        self.llm_tokens.labels(call.purpose, call.model, "in").inc(call.tokens_in)
        self.llm_tokens.labels(call.purpose, call.model, "out").inc(call.tokens_out)

    def render(self) -> bytes:
        """The text exposition format (reads the database: call it off the event loop)."""
        return generate_latest(self.registry)


class _Queues(Collector):
    """Queue lengths, read when Prometheus scrapes."""

    def __init__(self, memory: AsyncMemory) -> None:
        self._memory = memory

    def collect(self) -> Iterable[Metric]:
        store = self._memory.store
        embeddings = GaugeMetricFamily(
            "ledgermem_pending_embeddings",
            f"Rows waiting for a vector, by table (counted up to {QUEUE_CAP}).",
            labels=["table"])
        for table in ("knowledge", "conversations"):
            embeddings.add_metric([table], len(store.pending_embeddings(table, QUEUE_CAP)))
        yield embeddings
        yield GaugeMetricFamily(
            "ledgermem_pending_extraction_batches",
            f"Batches of turns waiting for extraction (counted up to {QUEUE_CAP}).",
            value=len(store.pending_extractions(QUEUE_CAP)))
        yield GaugeMetricFamily(
            "ledgermem_pending_recall_bookkeeping",
            "Recalled items waiting for their confidence bump in this process.",
            value=self._memory.sync.recalls.pending())


class CountingLLM:
    """An ``LLM`` that counts the calls and tokens of the one it wraps into the
    metrics, and passes every ``LLMCall`` on to whoever records them (the ledger)."""

    def __init__(self, inner: LLM, metrics: ServerMetrics) -> None:
        self._inner = inner
        self._metrics = metrics
        self.model = inner.model

    def complete(self, messages: Sequence[ChatMessage], schema: type[T], *,
                 purpose: str) -> T:
        seen: list[LLMCall] = []
        try:
            with recording(seen.append):
                return self._inner.complete(messages, schema, purpose=purpose)
        finally:
            for call in seen:
                self._metrics.count_llm_call(call)
                report(call)  # to the recorder that was there before ours

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # structured_output and the like


class MetricsMiddleware:
    """ASGI middleware counting and timing every HTTP request by route template."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        self.metrics.in_progress.inc()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.in_progress.dec()
            route = scope.get("route")
            template = str(getattr(route, "path", "unmatched"))
            method = str(scope.get("method", ""))
            if method not in HTTP_METHODS:   # made-up methods would each add series
                method = "other"
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(
                time.perf_counter() - started)
