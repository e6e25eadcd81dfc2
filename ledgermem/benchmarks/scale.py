"""Scale: add throughput, recall latency, memory and file size as the store grows.

Layout "many users, one large scope": 80% of the N items belong to one user (the
scope that is searched), the rest are spread over ``users`` other users in the same
file. Texts are synthetic sentences over a seeded vocabulary with a Zipf word
distribution, so full-text posting lists look like real text.

Per size: ``api_items`` items go through ``UserMemory.remember`` (dedup check
included) into the empty file, the bulk is written as ``memory.added`` events
straight to the store with random unit vectors (no model runs for a million items),
and ``api_items`` more go through ``remember`` into the full file. Then the file is
reopened with the query embedder and searched in the large scope in hybrid,
keyword-only and vector-only mode, with the options a user gets by default (recall
bookkeeping on: ``latency_ms``); each query is also run with ``touch=False``, interleaved
with it so that both see the same load (``latency_ms_no_touch``), to show what the
bookkeeping costs. The query embedding is also timed alone, since it is part of every
hybrid and vector search. ``add_per_s`` is the empty-file rate, ``add_per_s_full`` the
full-file rate.
"""

from __future__ import annotations

import os
import platform
import resource
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from rich.progress import Progress

from ..clock import iso, new_id
from ..domain.events import ItemAdded, Kind, new_event
from ..errors import InvalidInput
from ..memory import Memory
from ..providers.embedders import DEFAULT_EMBEDDER, Embedder, embedder_from_name, normalise
from ..retrieval.embedding import QUERIES
from ..retrieval.keyword import STOPWORDS
from ..store.base import Store
from ..store.sqlite import SQLiteStore
from ..types import START_CONFIDENCE, Item, Scope
from .common import percentiles, progress

__all__ = ["MAIN_USER", "Corpus", "run_scale"]

MAIN_USER = "scale-main"
"""The user whose large scope is searched."""
SCOPE_SHARE = 0.8
BATCH = 5_000
TOP_K = 10
Mode = Literal["hybrid", "keyword", "vector"]
MODES: tuple[Mode, ...] = ("hybrid", "keyword", "vector")
CATEGORIES = ("fact", "fact", "preference", "note", "skill")

_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
           "w", "z", "br", "ch", "cr", "dr", "fl", "gr", "pl", "sh", "sk", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou")
_CODAS = ("", "", "", "n", "r", "s", "l", "m", "nd", "st", "x")


class Corpus:
    """Synthetic sentences: 8–16 distinct words from a Zipf-distributed vocabulary."""

    def __init__(self, rng: np.random.Generator, words: int = 4_000) -> None:
        vocabulary: dict[str, None] = {}
        while len(vocabulary) < words:
            parts = [rng.integers(0, len(table), size=(words, 3))
                     for table in (_ONSETS, _VOWELS, _CODAS)]
            lengths = rng.integers(1, 4, size=words)
            for row, length in enumerate(lengths):
                word = "".join(_ONSETS[parts[0][row, s]] + _VOWELS[parts[1][row, s]]
                               + _CODAS[parts[2][row, s]] for s in range(length))
                if word not in STOPWORDS and len(vocabulary) < words:
                    vocabulary[word] = None
        self.words = list(vocabulary)
        weights = 1.0 / (np.arange(words) + 2.7)
        self.p = weights / weights.sum()

    def sentences(self, rng: np.random.Generator, count: int) -> list[str]:
        picks = rng.choice(len(self.words), size=(count, 24), p=self.p)
        lengths = rng.integers(8, 17, size=count)
        out = []
        for row, length in zip(picks, lengths, strict=True):
            chosen = list(dict.fromkeys(int(i) for i in row))[:length]
            out.append(" ".join(self.words[i] for i in chosen).capitalize() + ".")
        return out


@dataclass(frozen=True)
class Plan:
    """How one size is split between the API slices, the bulk load and the users."""

    items: int
    scope_items: int
    api_items: int
    users: int

    @property
    def bulk_items(self) -> int:
        return self.items - 2 * self.api_items


def _unit_vectors(rng: np.random.Generator, count: int, dims: int) -> npt.NDArray[np.float32]:
    return normalise(rng.standard_normal((count, dims), dtype=np.float32))


def _bulk_owners(rng: np.random.Generator, plan: Plan) -> npt.NDArray[np.int64]:
    """Owner of each bulk item: -1 for the main user, else another user's number;
    shuffled, as writes from many users interleave."""
    main = plan.scope_items - 2 * plan.api_items
    others = np.arange(plan.bulk_items - main, dtype=np.int64) % plan.users
    owners = np.concatenate([np.full(main, -1, dtype=np.int64), others])
    rng.shuffle(owners)
    return owners


def _bulk_load(store: Store, plan: Plan, corpus: Corpus, embedder: Embedder,
               rng: np.random.Generator, bar: Progress) -> float:
    """Write the bulk as ``memory.added`` events plus vectors; returns seconds taken."""
    owners = _bulk_owners(rng, plan)
    task = bar.add_task(f"{plan.items:,}: bulk load", total=len(owners))
    now = datetime.now(UTC)
    started = time.perf_counter()
    for start in range(0, len(owners), BATCH):
        chunk = owners[start:start + BATCH]
        texts = corpus.sentences(rng, len(chunk))
        ages = rng.uniform(0, 365 * 86400, size=len(chunk))
        categories = rng.choice(CATEGORIES, size=len(chunk))
        events = []
        for owner, text, age, category in zip(chunk, texts, ages, categories, strict=True):
            user = MAIN_USER if owner < 0 else f"scale-user-{owner:03d}"
            at = iso(now - timedelta(seconds=float(age)))
            item = Item(id=new_id(), user_id=user, category=str(category), content=text,
                        source="user", confidence=START_CONFIDENCE["user"], created_at=at,
                        updated_at=at, valid_from=at)
            events.append(new_event(Scope(user), at, Kind.MEMORY_ADDED, ItemAdded(item),
                                    subject_id=item.id))
        vectors = _unit_vectors(rng, len(events), embedder.dimensions)
        with store.transaction():
            store.append(events)
            store.set_embeddings("knowledge", [
                (str(e.subject_id), text, vectors[i])
                for i, (e, text) in enumerate(zip(events, texts, strict=True))],
                embedder.model_id)
        bar.advance(task, len(chunk))
    return time.perf_counter() - started


def _remember(memory: Memory, texts: Sequence[str], rng: np.random.Generator, bar: Progress,
              label: str) -> float:
    """Add ``texts`` to the main user through the API; returns items per second."""
    handle = memory.for_user(MAIN_USER)
    categories = rng.choice(CATEGORIES, size=len(texts))
    task = bar.add_task(label, total=len(texts))
    started = time.perf_counter()
    for text, category in zip(texts, categories, strict=True):
        handle.remember(text, str(category))
        bar.advance(task)
    elapsed = time.perf_counter() - started
    return len(texts) / elapsed if elapsed else 0.0


def _fill_vectors(store: Store, embedder: Embedder, rng: np.random.Generator) -> None:
    """Random vectors for rows written through the API (they have none yet)."""
    while rows := store.pending_embeddings("knowledge", BATCH):
        vectors = _unit_vectors(rng, len(rows), embedder.dimensions)
        store.set_embeddings("knowledge", [(row_id, text, vectors[i])
                                           for i, (row_id, text) in enumerate(rows)],
                             embedder.model_id)


def _load(where: Database, plan: Plan, corpus: Corpus, embedder: Embedder,
          rng: np.random.Generator, bar: Progress) -> tuple[dict[str, float], list[str]]:
    """Fill a new database; returns the timings and the texts added through the API."""
    store = where.open()
    # Recorded before any Memory is given the embedder, or check_model would refuse.
    store.set_meta("embedding_model", embedder.model_id)
    store.set_meta("embedding_dimensions", str(embedder.dimensions))
    memory = Memory(store, embedder=None)
    try:
        first = corpus.sentences(rng, plan.api_items)
        add_per_s = _remember(memory, first, rng, bar, f"{plan.items:,}: remember (empty file)")
        bulk_s = _bulk_load(store, plan, corpus, embedder, rng, bar)
        last = corpus.sentences(rng, plan.api_items)
        add_full = _remember(memory, last, rng, bar, f"{plan.items:,}: remember (full file)")
        _fill_vectors(store, embedder, rng)
    finally:
        memory.close()
    return {"add_per_s": round(add_per_s, 1), "add_per_s_full": round(add_full, 1),
            "bulk_load_s": round(bulk_s, 2),
            "bulk_per_s": round(plan.bulk_items / bulk_s, 1) if bulk_s else 0.0}, first


def _queries(rng: np.random.Generator, texts: Sequence[str], count: int) -> list[str]:
    """Two to four words of a stored sentence, so every query matches something."""
    out = []
    for pick in rng.integers(0, len(texts), size=count):
        words = texts[int(pick)].rstrip(".").lower().split()
        size = min(len(words), int(rng.integers(2, 5)))
        out.append(" ".join(str(w) for w in rng.choice(words, size=size, replace=False)))
    return out


def _time_embedding(embedder: Embedder, queries: Sequence[str]) -> dict[str, float]:
    """What the query embedding alone costs (part of every hybrid and vector search)."""
    samples = []
    for query in queries:
        started = time.perf_counter()
        embedder.embed_query(query)
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


def _measure(where: Database, embedder: Embedder, queries: Sequence[str], bar: Progress,
             label: str) -> dict[str, Any]:
    """Reopen the database with the query embedder and time searches in the large scope."""
    started = time.perf_counter()
    store = where.open()
    try:
        memory = Memory(store, embedder=embedder)
    except BaseException:
        store.close()
        raise
    open_ms = (time.perf_counter() - started) * 1000
    try:
        handle = memory.for_user(MAIN_USER)
        scope_items = int(handle.stats()["items"])
        started = time.perf_counter()
        handle.search(queries[0], top_k=TOP_K)
        first_ms = (time.perf_counter() - started) * 1000
        latency: dict[str, dict[str, float]] = {"query_embedding": _time_embedding(
            embedder, queries)}
        untouched: dict[str, dict[str, float]] = {}
        for mode in MODES:
            # The mode is a Memory-wide option (UserMemory.search takes none).
            memory.searcher.options = replace(memory.searcher.options, mode=mode)
            task = bar.add_task(f"{label}: search {mode}", total=len(queries))
            samples: dict[bool, list[float]] = {True: [], False: []}
            for n, query in enumerate(queries):
                for touch in (True, False) if n % 2 else (False, True):
                    # Each query is timed as a new one: the second of the pair would
                    # otherwise take its vector from the query cache.
                    QUERIES.clear()
                    started = time.perf_counter()
                    handle.search(query, top_k=TOP_K, touch=touch)
                    samples[touch].append((time.perf_counter() - started) * 1000)
                bar.advance(task)
            latency[mode] = percentiles(samples[True])
            untouched[mode] = percentiles(samples[False])
        file_bytes = where.size()
    finally:
        memory.close()
    return {"scope_items": scope_items, "open_ms": round(open_ms, 1),
            "first_search_ms": round(first_ms, 1), "latency_ms": latency,
            "latency_ms_no_touch": untouched,
            "file_mib": round(file_bytes / 2**20, 1)}


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


@dataclass(frozen=True)
class Database:
    """Where one size is measured: how to open its store and how big it is in bytes."""

    open: Callable[[], Store]
    size: Callable[[], int]


@contextmanager
def _db_file(db_dir: Path | None, size: int) -> Iterator[Database]:
    """``scale-N.db`` in ``db_dir`` (replaced if there, kept after), else a temp file."""
    if db_dir is None:
        with tempfile.TemporaryDirectory(prefix="ledgermem-scale-") as folder:
            yield _sqlite_file(Path(folder) / f"scale-{size}.db")
        return
    path = Path(db_dir) / f"scale-{size}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    yield _sqlite_file(path)


def _sqlite_file(path: Path) -> Database:
    return Database(open=lambda: SQLiteStore(path), size=lambda: sum(
        p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists()))


@contextmanager
def _pg_schema(url: str, size: int) -> Iterator[Database]:
    """A new schema ``ledgermem_scale_N_<random>`` in the database at ``url``, dropped
    at the end; its size is that of its tables with their indexes and TOAST."""
    import psycopg

    from ..store.postgres import PostgresStore

    schema = f"ledgermem_scale_{size}_{uuid.uuid4().hex[:6]}"

    def size_of() -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c "
                "JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = %s AND "
                "c.relkind IN ('r', 'p', 'm')", [schema]).fetchone()
        return int(row[0]) if row else 0

    try:
        yield Database(open=lambda: PostgresStore(url, schema=schema), size=size_of)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _plan(size: int, users: int, api_items: int) -> Plan:
    if size < 10 or users < 1 or api_items < 1:
        raise InvalidInput("need at least 10 items, 1 other user and 1 API item")
    scope = round(size * SCOPE_SHARE)
    return Plan(items=size, scope_items=scope, api_items=min(api_items, scope // 4),
                users=users)


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "machine": platform.machine(), "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "numpy": np.__version__}


def run_scale(
    sizes: Sequence[int] = (10_000, 100_000),
    *,
    users: int = 50,
    queries: int = 200,
    db_dir: Path | None = None,
    db: str | None = None,
    quiet: bool = False,
    query_embedder: Any = "default",
    api_items: int = 2_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure each size in a new file (or schema) and return the result object.

    Args:
        sizes: item counts, one file each.
        users: other users sharing the file (with 20% of the items).
        queries: searches timed per mode.
        db_dir: keep the files there as ``scale-N.db`` (replacing any); default a
            temporary directory.
        db: a PostgreSQL URL to measure instead of SQLite: each size runs in a new
            schema of that database, dropped at the end (``file_mib`` is then the size
            of its tables and indexes; ``peak_rss_mib`` counts this process only).
        query_embedder: embeds the queries (and fixes the stored vectors' dimension):
            ``"default"`` (``DEFAULT_EMBEDDER``), a registered name, or an ``Embedder``.
        api_items: items added through ``remember`` before and after the bulk load
            (at most a quarter of the large scope each).
        seed: seeds texts, layout, vectors and queries.

    ``peak_rss_mib`` is the process's peak so far, so it only grows across sizes.
    """
    if db is not None and not db.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("db takes a postgresql:// URL (SQLite runs in new files)")
    if query_embedder == "default":
        query_embedder = DEFAULT_EMBEDDER
    embedder: Embedder = (embedder_from_name(query_embedder) if isinstance(query_embedder, str)
                          else query_embedder)
    embedder.embed_query("warm up")  # a model's load time is no part of the first search
    runs = []
    for size in sizes:
        plan = _plan(size, users, api_items)
        rng = np.random.default_rng([seed, size])
        corpus = Corpus(rng)
        started = time.perf_counter()
        database = _pg_schema(db, size) if db else _db_file(db_dir, size)
        with database as where, progress(quiet) as bar:
            timings, first_texts = _load(where, plan, corpus, embedder, rng, bar)
            measured = _measure(where, embedder, _queries(rng, first_texts, queries), bar,
                                f"{size:,}")
        runs.append({"items": size, "users": users + 1, "api_items": plan.api_items,
                     "deduped": plan.scope_items - measured["scope_items"], **timings,
                     **measured, "peak_rss_mib": _peak_rss_mib(),
                     "total_s": round(time.perf_counter() - started, 1)})
    return {"benchmark": "scale", "machine": _machine(),
            "backend": "postgresql" if db else "sqlite", "embedder": embedder.model_id,
            "dimensions": embedder.dimensions, "queries": queries, "runs": runs}
